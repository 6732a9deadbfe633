/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD protocol's constants and wire layout, as the specification
 * (NetworkBlockDevice/nbd, doc/proto.md) names them.  Everything on the
 * wire is big-endian; the structs below only document the layouts (the
 * code reads and writes bytes with nbd_ld*()/nbd_st*(), never by
 * casting a buffer to a struct).
 *
 * Shared by the server (nbd/server.c) and anything else speaking NBD:
 * no dependency but the C library.
 */
#ifndef NBD_NBD_H
#define NBD_NBD_H

#include <stdint.h>
#include <string.h>

/* ---- handshake ---------------------------------------------------- */

#define NBD_MAGIC               0x4e42444d41474943ULL   /* "NBDMAGIC" */
#define NBD_OPTS_MAGIC          0x49484156454F5054ULL   /* "IHAVEOPT" */
#define NBD_CLISERV_MAGIC       0x00420281861253ULL     /* oldstyle */
#define NBD_REP_MAGIC           0x0003e889045565a9ULL

/* Handshake flags (server, 16 bits) */
#define NBD_FLAG_FIXED_NEWSTYLE (1 << 0)
#define NBD_FLAG_NO_ZEROES      (1 << 1)

/* Client flags (32 bits) */
#define NBD_FLAG_C_FIXED_NEWSTYLE (1 << 0)
#define NBD_FLAG_C_NO_ZEROES      (1 << 1)

/* Options */
#define NBD_OPT_EXPORT_NAME       1
#define NBD_OPT_ABORT             2
#define NBD_OPT_LIST              3
#define NBD_OPT_PEEK_EXPORT       4
#define NBD_OPT_STARTTLS          5
#define NBD_OPT_INFO              6
#define NBD_OPT_GO                7
#define NBD_OPT_STRUCTURED_REPLY  8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT  10
#define NBD_OPT_EXTENDED_HEADERS  11

/* Option replies */
#define NBD_REP_ACK             1
#define NBD_REP_SERVER          2
#define NBD_REP_INFO            3
#define NBD_REP_META_CONTEXT    4
#define NBD_REP_FLAG_ERROR      (1U << 31)
#define NBD_REP_ERR_UNSUP       (NBD_REP_FLAG_ERROR | 1)
#define NBD_REP_ERR_POLICY      (NBD_REP_FLAG_ERROR | 2)
#define NBD_REP_ERR_INVALID     (NBD_REP_FLAG_ERROR | 3)
#define NBD_REP_ERR_PLATFORM    (NBD_REP_FLAG_ERROR | 4)
#define NBD_REP_ERR_TLS_REQD    (NBD_REP_FLAG_ERROR | 5)
#define NBD_REP_ERR_UNKNOWN     (NBD_REP_FLAG_ERROR | 6)
#define NBD_REP_ERR_SHUTDOWN    (NBD_REP_FLAG_ERROR | 7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD (NBD_REP_FLAG_ERROR | 8)
#define NBD_REP_ERR_TOO_BIG     (NBD_REP_FLAG_ERROR | 9)
#define NBD_REP_ERR_EXT_HEADER_REQD (NBD_REP_FLAG_ERROR | 10)

/* NBD_REP_INFO types */
#define NBD_INFO_EXPORT         0
#define NBD_INFO_NAME           1
#define NBD_INFO_DESCRIPTION    2
#define NBD_INFO_BLOCK_SIZE     3

/* Transmission flags (16 bits) */
#define NBD_FLAG_HAS_FLAGS          (1 << 0)
#define NBD_FLAG_READ_ONLY          (1 << 1)
#define NBD_FLAG_SEND_FLUSH         (1 << 2)
#define NBD_FLAG_SEND_FUA           (1 << 3)
#define NBD_FLAG_ROTATIONAL         (1 << 4)
#define NBD_FLAG_SEND_TRIM          (1 << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES  (1 << 6)
#define NBD_FLAG_SEND_DF            (1 << 7)
#define NBD_FLAG_CAN_MULTI_CONN     (1 << 8)
#define NBD_FLAG_SEND_RESIZE        (1 << 9)
#define NBD_FLAG_SEND_CACHE         (1 << 10)
#define NBD_FLAG_SEND_FAST_ZERO     (1 << 11)
#define NBD_FLAG_BLOCK_STAT_PAYLOAD (1 << 12)

/* Limits of this implementation, on strings and option payloads. */
#define NBD_MAX_STRING_SIZE     4096            /* names, queries */
#define NBD_MAX_OPTION_SIZE     (64 * 1024)     /* one option's data */
/* The largest READ/WRITE payload: advertised as the maximum block size
 * (NBD_INFO_BLOCK_SIZE), the same as QEMU's. */
#define NBD_MAX_BUFFER_SIZE     (32 * 1024 * 1024)

/* ---- transmission ------------------------------------------------- */

#define NBD_REQUEST_MAGIC           0x25609513
#define NBD_SIMPLE_REPLY_MAGIC      0x67446698
#define NBD_STRUCTURED_REPLY_MAGIC  0x668e33ef

/* Request header: magic u32, flags u16, type u16, cookie u64, offset u64,
 * length u32. */
#define NBD_REQUEST_SIZE        28
/* Simple reply: magic u32, error u32, cookie u64. */
#define NBD_SIMPLE_REPLY_SIZE   16
/* Structured reply chunk: magic u32, flags u16, type u16, cookie u64,
 * length u32, then length bytes of payload. */
#define NBD_STRUCTURED_REPLY_SIZE 20

/* Command flags */
#define NBD_CMD_FLAG_FUA        (1 << 0)
#define NBD_CMD_FLAG_NO_HOLE    (1 << 1)
#define NBD_CMD_FLAG_DF         (1 << 2)
#define NBD_CMD_FLAG_REQ_ONE    (1 << 3)
#define NBD_CMD_FLAG_FAST_ZERO  (1 << 4)
#define NBD_CMD_FLAG_PAYLOAD_LEN (1 << 5)

/* Commands */
#define NBD_CMD_READ            0
#define NBD_CMD_WRITE           1
#define NBD_CMD_DISC            2
#define NBD_CMD_FLUSH           3
#define NBD_CMD_TRIM            4
#define NBD_CMD_CACHE           5
#define NBD_CMD_WRITE_ZEROES    6
#define NBD_CMD_BLOCK_STATUS    7
#define NBD_CMD_RESIZE          8

/* Structured reply flags and chunk types */
#define NBD_REPLY_FLAG_DONE             (1 << 0)
#define NBD_REPLY_TYPE_NONE             0
#define NBD_REPLY_TYPE_OFFSET_DATA      1
#define NBD_REPLY_TYPE_OFFSET_HOLE      2
#define NBD_REPLY_TYPE_BLOCK_STATUS     5
#define NBD_REPLY_TYPE_BLOCK_STATUS_EXT 6
#define NBD_REPLY_TYPE_ERROR            ((1 << 15) + 1)
#define NBD_REPLY_TYPE_ERROR_OFFSET     ((1 << 15) + 2)

/* Errors on the wire (Linux's values, whatever the host's are) */
#define NBD_SUCCESS     0
#define NBD_EPERM       1
#define NBD_EIO         5
#define NBD_ENOMEM      12
#define NBD_EINVAL      22
#define NBD_ENOSPC      28
#define NBD_EOVERFLOW   75
#define NBD_ENOTSUP     95
#define NBD_ESHUTDOWN   108

/* Metadata contexts: base:allocation */
#define NBD_META_BASE_ALLOCATION    "base:allocation"
#define NBD_STATE_HOLE  (1 << 0)
#define NBD_STATE_ZERO  (1 << 1)

/* ---- byte order --------------------------------------------------- */

static inline uint16_t nbd_ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t nbd_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t nbd_ld64(const uint8_t *p)
{
    return (uint64_t)nbd_ld32(p) << 32 | nbd_ld32(p + 4);
}

static inline void nbd_st16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v;
}

static inline void nbd_st32(uint8_t *p, uint32_t v)
{
    nbd_st16(p, v >> 16);
    nbd_st16(p + 2, v);
}

static inline void nbd_st64(uint8_t *p, uint64_t v)
{
    nbd_st32(p, v >> 32);
    nbd_st32(p + 4, v);
}

#endif
