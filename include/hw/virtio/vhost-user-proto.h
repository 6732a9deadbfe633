/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user wire format (QEMU docs/interop/vhost-user.rst), shared by the
 * back-end server (hw/virtio/vhost-user-server.c) and the front-end library
 * (contrib/vhost-user-frontend/vhost-user-frontend.c).  All fields are
 * little-endian; this project only builds on little-endian hosts.
 */
#ifndef HW_VIRTIO_VHOST_USER_PROTO_H
#define HW_VIRTIO_VHOST_USER_PROTO_H

#include "qemu/osdep.h"

typedef enum VhostUserRequest {
    VHOST_USER_NONE = 0,
    VHOST_USER_GET_FEATURES = 1,
    VHOST_USER_SET_FEATURES = 2,
    VHOST_USER_SET_OWNER = 3,
    VHOST_USER_RESET_OWNER = 4,
    VHOST_USER_SET_MEM_TABLE = 5,
    VHOST_USER_SET_LOG_BASE = 6,
    VHOST_USER_SET_LOG_FD = 7,
    VHOST_USER_SET_VRING_NUM = 8,
    VHOST_USER_SET_VRING_ADDR = 9,
    VHOST_USER_SET_VRING_BASE = 10,
    VHOST_USER_GET_VRING_BASE = 11,
    VHOST_USER_SET_VRING_KICK = 12,
    VHOST_USER_SET_VRING_CALL = 13,
    VHOST_USER_SET_VRING_ERR = 14,
    VHOST_USER_GET_PROTOCOL_FEATURES = 15,
    VHOST_USER_SET_PROTOCOL_FEATURES = 16,
    VHOST_USER_GET_QUEUE_NUM = 17,
    VHOST_USER_SET_VRING_ENABLE = 18,
    VHOST_USER_SEND_RARP = 19,
    VHOST_USER_NET_SET_MTU = 20,
    VHOST_USER_SET_BACKEND_REQ_FD = 21,
    VHOST_USER_IOTLB_MSG = 22,
    VHOST_USER_SET_VRING_ENDIAN = 23,
    VHOST_USER_GET_CONFIG = 24,
    VHOST_USER_SET_CONFIG = 25,
    VHOST_USER_GET_INFLIGHT_FD = 31,
    VHOST_USER_SET_INFLIGHT_FD = 32,
    VHOST_USER_RESET_DEVICE = 34,
    VHOST_USER_GET_MAX_MEM_SLOTS = 36,
    VHOST_USER_ADD_MEM_REG = 37,
    VHOST_USER_REM_MEM_REG = 38,
    VHOST_USER_SET_STATUS = 39,
    VHOST_USER_GET_STATUS = 40,
    VHOST_USER_MAX
} VhostUserRequest;

/* Requests the back-end sends on the back-end channel (SET_BACKEND_REQ_FD) */
typedef enum VhostUserBackendRequest {
    VHOST_USER_BACKEND_NONE = 0,
    VHOST_USER_BACKEND_IOTLB_MSG = 1,
    VHOST_USER_BACKEND_CONFIG_CHANGE_MSG = 2,
} VhostUserBackendRequest;

/* Protocol feature bits (GET/SET_PROTOCOL_FEATURES) */
#define VHOST_USER_PROTOCOL_F_MQ                  0
#define VHOST_USER_PROTOCOL_F_LOG_SHMFD           1
#define VHOST_USER_PROTOCOL_F_REPLY_ACK           3
#define VHOST_USER_PROTOCOL_F_BACKEND_REQ         5
#define VHOST_USER_PROTOCOL_F_CONFIG              9
#define VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD     12
#define VHOST_USER_PROTOCOL_F_RESET_DEVICE       13
#define VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS 15
#define VHOST_USER_PROTOCOL_F_STATUS             16

/* Virtio feature bits used by vhost-user */
#define VHOST_USER_F_PROTOCOL_FEATURES 30
#define VHOST_F_LOG_ALL                26

/* Header flags */
#define VHOST_USER_VERSION_MASK  0x3u
#define VHOST_USER_VERSION       0x1u
#define VHOST_USER_REPLY_MASK    (1u << 2)
#define VHOST_USER_NEED_REPLY    (1u << 3)

/* SET_VRING_KICK/CALL/ERR payload */
#define VHOST_USER_VRING_IDX_MASK   0xffu
#define VHOST_USER_VRING_NOFD_MASK  (1u << 8)

#define VHOST_USER_MAX_FDS           8
#define VHOST_USER_MEM_REGIONS_MAX   8   /* SET_MEM_TABLE */
#define VHOST_USER_MAX_MEM_SLOTS     32  /* ADD_MEM_REG */
#define VHOST_USER_MAX_CONFIG_SIZE   256
#define VHOST_USER_HDR_SIZE          12

typedef struct VhostUserMemoryRegion {
    uint64_t guest_phys_addr;
    uint64_t memory_size;
    uint64_t userspace_addr;
    uint64_t mmap_offset;
} VhostUserMemoryRegion;

typedef struct VhostUserMemory {
    uint32_t nregions;
    uint32_t padding;
    VhostUserMemoryRegion regions[VHOST_USER_MEM_REGIONS_MAX];
} VhostUserMemory;

typedef struct VhostUserMemRegMsg {
    uint64_t padding;
    VhostUserMemoryRegion region;
} VhostUserMemRegMsg;

typedef struct VhostUserVringState {
    uint32_t index;
    uint32_t num;
} VhostUserVringState;

#define VHOST_VRING_F_LOG 0
typedef struct VhostUserVringAddr {
    uint32_t index;
    uint32_t flags;
    uint64_t desc_user_addr;
    uint64_t used_user_addr;
    uint64_t avail_user_addr;
    uint64_t log_guest_addr;
} VhostUserVringAddr;

typedef struct VhostUserConfig {
    uint32_t offset;
    uint32_t size;
    uint32_t flags;
    uint8_t region[VHOST_USER_MAX_CONFIG_SIZE];
} VhostUserConfig;

#define VHOST_USER_CONFIG_HDR_SIZE 12

typedef struct VhostUserInflight {
    uint64_t mmap_size;
    uint64_t mmap_offset;
    uint16_t num_queues;
    uint16_t queue_size;
} VhostUserInflight;

/* SET_LOG_BASE payload (with VHOST_USER_PROTOCOL_F_LOG_SHMFD) */
typedef struct VhostUserLog {
    uint64_t mmap_size;
    uint64_t mmap_offset;
} VhostUserLog;

typedef struct QEMU_PACKED VhostUserHeader {
    uint32_t request;
    uint32_t flags;
    uint32_t size;              /* payload bytes that follow */
} VhostUserHeader;

typedef union VhostUserPayload {
    uint64_t u64;
    VhostUserVringState state;
    VhostUserVringAddr addr;
    VhostUserMemory memory;
    VhostUserMemRegMsg memreg;
    VhostUserConfig config;
    VhostUserInflight inflight;
    VhostUserLog log;
} VhostUserPayload;

typedef struct QEMU_PACKED VhostUserMsg {
    VhostUserHeader hdr;
    VhostUserPayload payload;
} VhostUserMsg;

/*
 * Inflight region layout (split rings), owned by the back-end: it creates
 * the memfd in GET_INFLIGHT_FD and receives it back in SET_INFLIGHT_FD after
 * a reconnect.  One QueueRegionSplit per queue, each rounded up to 64 bytes.
 */
typedef struct VhostUserDescStateSplit {
    uint8_t inflight;           /* 1 while the request is in flight */
    uint8_t padding[5];
    uint16_t next;              /* list of requests done but not yet used */
    uint64_t counter;           /* submission order */
} VhostUserDescStateSplit;

typedef struct VhostUserQueueRegionSplit {
    uint64_t features;
    uint16_t version;
    uint16_t desc_num;
    uint16_t last_batch_head;
    uint16_t used_idx;
    VhostUserDescStateSplit desc[];
} VhostUserQueueRegionSplit;

static inline size_t vhost_user_inflight_queue_size(uint16_t queue_size)
{
    return QEMU_ALIGN_UP(sizeof(VhostUserQueueRegionSplit) +
                         sizeof(VhostUserDescStateSplit) * queue_size, 64);
}

/*
 * Inflight region layout for packed rings (vhost-user specification,
 * "Inflight I/O tracking"): a packed ring overwrites in-flight descriptors
 * with used ones, so each fetched descriptor is copied into an entry taken
 * from a free list; a buffer's entries are linked by @next from its head
 * entry (@num of them, @last the final one).  The old_* fields are the
 * state after the last completed update, rolled back to on a restart.
 */
typedef struct VhostUserDescStatePacked {
    uint8_t inflight;           /* head entry: 1 while in flight */
    uint8_t padding;
    uint16_t next;              /* next free entry / next of the buffer */
    uint16_t last;              /* head entry: last entry of the buffer */
    uint16_t num;               /* head entry: descriptors of the buffer */
    uint64_t counter;           /* head entry: fetch order */
    uint16_t id;                /* buffer id */
    uint16_t flags;             /* descriptor flags */
    uint32_t len;
    uint64_t addr;
} VhostUserDescStatePacked;

typedef struct VhostUserQueueRegionPacked {
    uint64_t features;
    uint16_t version;
    uint16_t desc_num;
    uint16_t free_head;
    uint16_t old_free_head;
    uint16_t used_idx;
    uint16_t old_used_idx;
    uint8_t used_wrap_counter;
    uint8_t old_used_wrap_counter;
    uint8_t padding[7];
    VhostUserDescStatePacked desc[];
} VhostUserQueueRegionPacked;

static inline size_t vhost_user_inflight_queue_size_packed(uint16_t queue_size)
{
    return QEMU_ALIGN_UP(sizeof(VhostUserQueueRegionPacked) +
                         sizeof(VhostUserDescStatePacked) * queue_size, 64);
}

/* Bytes of one queue's part of the region, for either ring format. */
static inline size_t vhost_user_inflight_queue_size_fmt(uint16_t queue_size,
                                                        bool packed)
{
    return packed ? vhost_user_inflight_queue_size_packed(queue_size)
                  : vhost_user_inflight_queue_size(queue_size);
}

/*
 * Device state after the queue regions (this back-end's own addition: the
 * specification leaves the region's layout to the back-end).  The front-end
 * keeps the region across back-end restarts and hands it back with
 * SET_INFLIGHT_FD, so a restarted back-end finds there what the driver
 * told the old process and the front-end will not repeat (the write-cache
 * mode of a virtio-blk device).  It starts at
 * vhost_user_inflight_state_offset() and is read back only when the
 * header matches exactly: magic, version, the geometry of the region it
 * ends, and a data_len that fits.  The data bytes belong to the device,
 * which checks them again.  Host byte order (the region never leaves
 * the host).
 *
 * No checksum on purpose: the data is updated in place, one byte per
 * field, so a back-end killed at any instant leaves either the old or the
 * new value; a checksum stored apart would make such a kill look like a
 * corrupt area, and the choice would be lost.  The fields other than
 * data[] never change after the region was made.
 */
#define VHOST_USER_INFLIGHT_STATE_MAGIC     0x53444256u  /* "VBDS" */
#define VHOST_USER_INFLIGHT_STATE_VERSION   1
#define VHOST_USER_INFLIGHT_STATE_DATA_MAX  48

typedef struct VhostUserInflightState {
    uint32_t magic;
    uint16_t version;
    uint16_t data_len;          /* valid bytes of data[] */
    uint16_t num_queues;        /* geometry of the region it ends */
    uint16_t queue_size;
    uint32_t reserved;          /* 0 */
    uint8_t data[VHOST_USER_INFLIGHT_STATE_DATA_MAX];
} VhostUserInflightState;

/* Bytes the device-state area takes at the end of the region. */
#define VHOST_USER_INFLIGHT_STATE_SIZE \
    QEMU_ALIGN_UP(sizeof(VhostUserInflightState), 64)

static inline size_t vhost_user_inflight_state_offset(uint16_t num_queues,
                                                      uint16_t queue_size)
{
    return (size_t)num_queues * vhost_user_inflight_queue_size(queue_size);
}

static inline size_t vhost_user_inflight_state_offset_fmt(uint16_t num_queues,
                                                          uint16_t queue_size,
                                                          bool packed)
{
    return (size_t)num_queues *
           vhost_user_inflight_queue_size_fmt(queue_size, packed);
}

const char *vhost_user_request_name(uint32_t request);

#endif
