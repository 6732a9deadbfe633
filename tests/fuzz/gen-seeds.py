#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Write the hand-made seed inputs of the fuzz targets into corpus/<target>/.

Each seed is a small valid scenario (a well-formed request of each type, an
indirect chain, a crash with requests in flight, ...) from which libFuzzer
mutates.  The byte layouts documented here are the ones the harnesses
parse; keep the two in sync.  Run: tests/fuzz/gen-seeds.py [OUTDIR]
"""
import os
import struct
import sys

# virtio constants
VRING_DESC_F_NEXT, VRING_DESC_F_WRITE, VRING_DESC_F_INDIRECT = 1, 2, 4
T_IN, T_OUT, T_FLUSH, T_GET_ID, T_DISCARD, T_WRITE_ZEROES = 0, 1, 4, 8, 11, 13

# ---------------------------------------------------------------- virtqueue
#
# fuzz-virtqueue input:
#   u8  qsel      queue size: 1 << (qsel & 7); with bit 6, 256 << (qsel & 3);
#                 with bit 7, a u16 follows
#   [u16 num]
#   u8  flags     1 event-idx, 2 inflight region, 4 raw ring uvas,
#                 8 writethrough, bits 4-5 device (0 rw, 1 ro, 2 4K blocks),
#                 0x40 packed ring (desc = descriptor ring, avail = driver
#                 area, used = device area)
#   u16 base      initial last_avail_idx (packed: next avail and next used
#                 slot both, bit 15 both wrap counters)
#   ring addresses: 3 x u16 offsets in region A (desc, avail, used), or with
#                 flag 4, 3 x u64 VMM-virtual addresses
#   [u16 len, len bytes: start of the inflight region]   with flag 2
#   u16 len, len bytes: guest memory image from guest-physical 0
#   operations, each u8 opcode (mod 11) and its arguments:
#     0 POP u8 budget, 1 SUBMIT, 2 POP_SUBMIT u8 budget, 3 UNPOP u8 count,
#     4 POKE u32 gpa u8 len bytes, 5 NOTIFICATION u8 on, 6 HAS_AVAIL,
#     7 NOTIFY, 8 WRITEBACK u8 on, 9 RESTART, 10 CRASH u8 how [u16 base]

OP_POP, OP_SUBMIT, OP_POP_SUBMIT, OP_UNPOP, OP_POKE, OP_NOTIFICATION, \
    OP_HAS_AVAIL, OP_NOTIFY, OP_WRITEBACK, OP_RESTART, OP_CRASH = range(11)

F_EVENT_IDX, F_INFLIGHT, F_RAW_ADDR, F_WRITETHROUGH = 1, 2, 4, 8

DESC, AVAIL, USED = 0x0, 0x100, 0x140     # rings of a 16-entry queue
HDRS = 0x200                                # 16-byte headers, one per slot
STATUS = 0x600                              # status bytes, one per slot
INDIRECT = 0x700                            # indirect tables
DATA = 0x1000                               # data buffers (not in the image)


class Guest:
    """A driver's view of guest memory: descriptors, rings, headers."""

    def __init__(self, num=16):
        self.num = num
        self.mem = bytearray(HDRS)
        self.avail_idx = 0
        self.next_free = 0

    def put(self, off, data):
        if len(self.mem) < off + len(data):
            self.mem.extend(bytes(off + len(data) - len(self.mem)))
        self.mem[off:off + len(data)] = data

    def desc(self, i, addr, length, flags, nxt=0, table=DESC):
        self.put(table + 16 * i, struct.pack('<QIHH', addr, length, flags, nxt))

    def make_avail(self, head):
        self.put(AVAIL + 4 + 2 * (self.avail_idx % self.num),
                 struct.pack('<H', head))
        self.avail_idx += 1
        self.put(AVAIL + 2, struct.pack('<H', self.avail_idx))

    def header(self, slot, rtype, sector=0, payload=b''):
        self.put(HDRS + 64 * slot, struct.pack('<IIQ', rtype, 0, sector) +
                 payload)
        return HDRS + 64 * slot

    def request(self, rtype, sector=0, data_len=0, payload=b''):
        """A direct chain: header (+payload) out, data, status in."""
        slot = self.next_free
        hdr = self.header(slot, rtype, sector, payload)
        d = [(hdr, 16 + len(payload), 0)]
        if data_len and rtype == T_OUT:
            d.append((DATA + 0x1000 * slot, data_len, 0))
        elif data_len:
            d.append((DATA + 0x1000 * slot, data_len, VRING_DESC_F_WRITE))
        d.append((STATUS + slot, 1, VRING_DESC_F_WRITE))
        head = self.next_free
        for k, (addr, length, flags) in enumerate(d):
            last = k == len(d) - 1
            self.desc(head + k, addr, length,
                      flags | (0 if last else VRING_DESC_F_NEXT), head + k + 1)
        self.next_free += len(d)
        self.make_avail(head)
        return head


F_PACKED = 0x40
PACKED_AVAIL, PACKED_USED = 1 << 7, 1 << 15


class PackedGuest(Guest):
    """A packed ring at DESC: buffers in consecutive slots, lap 1 first."""

    def __init__(self, num=16):
        super().__init__(num)
        self.slot = 0
        self.wrap = 1

    def request(self, rtype, sector=0, data_len=0, payload=b'', bid=None):
        bid = self.next_free if bid is None else bid
        hdr = self.header(bid, rtype, sector, payload)
        d = [(hdr, 16 + len(payload), 0)]
        if data_len:
            d.append((DATA + 0x1000 * bid, data_len,
                      0 if rtype == T_OUT else VRING_DESC_F_WRITE))
        d.append((STATUS + bid, 1, VRING_DESC_F_WRITE))
        self.put_buffer(bid, d)
        self.next_free += 1
        return bid

    def put_buffer(self, bid, d):
        for k, (addr, length, flags) in enumerate(d):
            last = k == len(d) - 1
            flags |= 0 if last else VRING_DESC_F_NEXT
            flags |= PACKED_AVAIL if self.wrap else PACKED_USED
            self.put(DESC + 16 * self.slot,
                     struct.pack('<QIHH', addr, length, bid, flags))
            self.slot += 1
            if self.slot == self.num:
                self.slot, self.wrap = 0, 1 - self.wrap


def vq_input(g, ops, flags=0, base=0, qsel=None, inflight=None):
    out = bytearray()
    if qsel is None:
        log2 = g.num.bit_length() - 1
        qsel = log2 if log2 < 8 else 0x40 | (log2 - 8)
    out += struct.pack('<B', qsel)
    if qsel & 0x80:
        out += struct.pack('<H', g.num)
    out += struct.pack('<BH', flags, base)
    out += struct.pack('<HHH', DESC, AVAIL, USED)
    if flags & F_INFLIGHT:
        blob = inflight or b''
        out += struct.pack('<H', len(blob)) + blob
    out += struct.pack('<H', len(g.mem)) + g.mem
    out += bytes(ops)
    return bytes(out)


def all_types(g):
    g.request(T_IN, 8, 512)
    g.request(T_OUT, 16, 1024)
    g.request(T_FLUSH)
    g.request(T_GET_ID, 0, 20)
    g.request(T_DISCARD, payload=struct.pack('<QII', 32, 8, 0))
    g.request(T_WRITE_ZEROES, payload=struct.pack('<QII', 64, 8, 1))


def virtqueue_seeds():
    seeds = {}

    g = Guest()
    all_types(g)
    seeds['all-types'] = vq_input(g, [OP_POP_SUBMIT, 63])
    seeds['all-types-event-idx'] = vq_input(
        g, [OP_POP, 1, OP_SUBMIT, OP_NOTIFICATION, 0, OP_POP_SUBMIT, 63,
            OP_NOTIFICATION, 1, OP_NOTIFY], flags=F_EVENT_IDX)
    seeds['all-types-readonly'] = vq_input(g, [OP_POP_SUBMIT, 63],
                                           flags=1 << 4)
    seeds['writethrough'] = vq_input(g, [OP_POP_SUBMIT, 63, OP_WRITEBACK, 1],
                                     flags=F_WRITETHROUGH)
    seeds['unpop'] = vq_input(g, [OP_POP, 3, OP_UNPOP, 2, OP_HAS_AVAIL,
                                  OP_POP_SUBMIT, 63])
    seeds['restart'] = vq_input(g, [OP_POP_SUBMIT, 2, OP_RESTART,
                                    OP_POP_SUBMIT, 63])
    # a back-end dies with three requests popped; the next one replays them
    seeds['inflight-crash'] = vq_input(
        g, [OP_POP, 3, OP_CRASH, 0, OP_POP_SUBMIT, 63],
        flags=F_INFLIGHT | F_EVENT_IDX)
    seeds['inflight-crash-base'] = vq_input(
        g, [OP_POP_SUBMIT, 1, OP_POP, 2, OP_CRASH, 1, 1, 0, OP_POP_SUBMIT, 63],
        flags=F_INFLIGHT)
    # an inflight region left by a previous instance: heads 0 and 3
    region = bytearray(struct.pack('<QHHHH', 0, 1, 16, 0, 0))
    for i in range(16):
        state = 1 if i in (0, 3) else 0
        region += struct.pack('<B5sHQ', state, bytes(5), 0, 10 + i)
    seeds['inflight-restore'] = vq_input(g, [OP_POP_SUBMIT, 63],
                                         flags=F_INFLIGHT, inflight=region)

    g = Guest()
    g.request(T_IN, 0, 4096)
    g.desc(g.next_free, 0x10000 - 0x100, 0x200, VRING_DESC_F_WRITE)
    g.make_avail(g.next_free)       # a write-only chain across A and B
    seeds['region-split'] = vq_input(g, [OP_POP_SUBMIT, 63])

    g = Guest()
    g.desc(0, INDIRECT, 3 * 16, VRING_DESC_F_INDIRECT)
    hdr = g.header(0, T_IN, 0)
    g.desc(0, hdr, 16, VRING_DESC_F_NEXT, 1, table=INDIRECT)
    g.desc(1, DATA, 512, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 2,
           table=INDIRECT)
    g.desc(2, STATUS, 1, VRING_DESC_F_WRITE, table=INDIRECT)
    g.make_avail(0)
    seeds['indirect'] = vq_input(g, [OP_POP_SUBMIT, 63], flags=F_EVENT_IDX)

    # 4K logical blocks: an aligned 8-sector read and a misaligned one
    g = Guest()
    g.request(T_IN, 8, 4096)
    g.request(T_IN, 1, 512)
    seeds['lbs-4096'] = vq_input(g, [OP_POP_SUBMIT, 63], flags=2 << 4)

    # the driver publishes a second request later (poke the avail ring)
    g = Guest()
    g.request(T_IN, 0, 512)
    g.request(T_GET_ID, 0, 20)
    g.put(AVAIL + 2, struct.pack('<H', 1))
    poke = [OP_POKE] + list(struct.pack('<IB', AVAIL + 2, 2)) + [2, 0]
    seeds['poke'] = vq_input(g, [OP_POP_SUBMIT, 63] + poke +
                             [OP_POP_SUBMIT, 63], flags=F_EVENT_IDX)

    # a large queue and a queue size that is not a power of two
    g = Guest(num=256)
    g.request(T_IN, 0, 512)
    seeds['queue-256'] = vq_input(g, [OP_POP_SUBMIT, 63])
    g = Guest(num=100)
    g.request(T_IN, 0, 512)
    seeds['queue-100'] = vq_input(g, [OP_POP_SUBMIT, 63], qsel=0x80)

    # packed rings: base 0x8000 = both wrap counters 1, slots 0
    g = PackedGuest()
    all_types(g)
    seeds['packed-all-types'] = vq_input(g, [OP_POP_SUBMIT, 63],
                                         flags=F_PACKED, base=0x8000)
    seeds['packed-event-idx'] = vq_input(
        g, [OP_POP, 1, OP_SUBMIT, OP_NOTIFICATION, 0, OP_POP_SUBMIT, 63,
            OP_NOTIFICATION, 1, OP_NOTIFY], flags=F_PACKED | F_EVENT_IDX,
        base=0x8000)
    seeds['packed-unpop-restart'] = vq_input(
        g, [OP_POP, 3, OP_UNPOP, 2, OP_POP_SUBMIT, 2, OP_RESTART,
            OP_POP_SUBMIT, 63], flags=F_PACKED, base=0x8000)
    seeds['packed-inflight-crash'] = vq_input(
        g, [OP_POP_SUBMIT, 1, OP_POP, 3, OP_CRASH, 0, OP_POP_SUBMIT, 63],
        flags=F_PACKED | F_INFLIGHT | F_EVENT_IDX, base=0x8000)

    g = PackedGuest()
    hdr = g.header(0, T_IN, 0)
    g.put(INDIRECT, struct.pack('<QIHH', hdr, 16, 0, 0) +
          struct.pack('<QIHH', DATA, 512, 0, VRING_DESC_F_WRITE) +
          struct.pack('<QIHH', STATUS, 1, 0, VRING_DESC_F_WRITE))
    g.put_buffer(0, [(INDIRECT, 3 * 16, VRING_DESC_F_INDIRECT)])
    g.next_free = 1
    g.request(T_OUT, 8, 512)
    seeds['packed-indirect'] = vq_input(g, [OP_POP_SUBMIT, 63],
                                        flags=F_PACKED | F_EVENT_IDX,
                                        base=0x8000)
    return seeds


# --------------------------------------------------------------- virtio-blk
#
# fuzz-virtio-blk input:
#   u8 flags     bits 0-1 device (0 null rw, 1 null ro, 2 file, 3 null 4K),
#                bit 2 writethrough
#   u16 out_num, u16 in_num
#   (u16 offset, u16 length) per out iovec, then per in iovec
#   buffer contents (8 KiB at most)

BLK_NULL, BLK_RO, BLK_FILE, BLK_4K = range(4)


def blk_input(dev, out, inn, buf, writethrough=False):
    b = bytearray(struct.pack('<BHH', dev | (4 if writethrough else 0),
                              len(out), len(inn)))
    for off, length in out + inn:
        b += struct.pack('<HH', off, length)
    return bytes(b + buf)


def blk_buf(rtype, sector=0, payload=b'', size=64):
    buf = bytearray(size)
    hdr = struct.pack('<IIQ', rtype, 0, sector) + payload
    buf[:len(hdr)] = hdr
    return buf


def virtio_blk_seeds():
    seeds = {}
    for dev, name in ((BLK_NULL, 'null'), (BLK_FILE, 'file')):
        seeds[f'read-{name}'] = blk_input(
            dev, [(0, 16)], [(512, 1024), (4000, 1)], blk_buf(T_IN, 2))
        seeds[f'write-{name}'] = blk_input(
            dev, [(0, 16), (512, 512)], [(4000, 1)], blk_buf(T_OUT, 4))
        seeds[f'flush-{name}'] = blk_input(
            dev, [(0, 16)], [(4000, 1)], blk_buf(T_FLUSH))
        seeds[f'discard-{name}'] = blk_input(
            dev, [(0, 32)], [(4000, 1)],
            blk_buf(T_DISCARD, payload=struct.pack('<QII', 8, 8, 0)))
        seeds[f'write-zeroes-{name}'] = blk_input(
            dev, [(0, 32)], [(4000, 1)],
            blk_buf(T_WRITE_ZEROES, payload=struct.pack('<QII', 16, 8, 1)))
    seeds['write-file-writethrough'] = blk_input(
        BLK_FILE, [(0, 16), (512, 512)], [(4000, 1)], blk_buf(T_OUT, 4),
        writethrough=True)
    seeds['get-id'] = blk_input(BLK_NULL, [(0, 16)], [(100, 20), (4000, 1)],
                                blk_buf(T_GET_ID))
    # header split over three iovecs; status shares the data iovec
    seeds['split-header'] = blk_input(
        BLK_FILE, [(0, 3), (3, 9), (12, 4)], [(512, 513)], blk_buf(T_IN, 0))
    seeds['no-status'] = blk_input(BLK_NULL, [(0, 16)], [], blk_buf(T_IN))
    seeds['short-header'] = blk_input(BLK_NULL, [(0, 10)], [(4000, 1)],
                                      blk_buf(T_IN))
    seeds['readonly-write'] = blk_input(
        BLK_RO, [(0, 16), (512, 512)], [(4000, 1)], blk_buf(T_OUT))
    seeds['read-4k'] = blk_input(BLK_4K, [(0, 16)], [(512, 4096), (4700, 1)],
                                 blk_buf(T_IN, 8))
    seeds['unsupported'] = blk_input(BLK_NULL, [(0, 16)], [(4000, 1)],
                                     blk_buf(99))
    return seeds


# -------------------------------------------------------------- vhost-user
#
# fuzz-vhost-user input: messages, each
#   u8 request, u8 sel (bit 0 NEED_REPLY, bit 7: u32 raw flags follows),
#   [u32 flags], u16 payload size, payload, u8 fd count, per fd u8 kind
#   (0 memfd + u8 pages, 1 eventfd, 2 pipe)

(GET_FEATURES, SET_FEATURES, SET_OWNER, RESET_OWNER, SET_MEM_TABLE) = 1, 2, 3, 4, 5
SET_LOG_BASE, SET_LOG_FD = 6, 7
(SET_VRING_NUM, SET_VRING_ADDR, SET_VRING_BASE, GET_VRING_BASE,
 SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR) = 8, 9, 10, 11, 12, 13, 14
GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES, GET_QUEUE_NUM = 15, 16, 17
SET_VRING_ENABLE, GET_CONFIG, SET_CONFIG = 18, 24, 25
GET_INFLIGHT_FD, SET_INFLIGHT_FD, RESET_DEVICE = 31, 32, 34
GET_MAX_MEM_SLOTS, ADD_MEM_REG, REM_MEM_REG = 36, 37, 38
SET_STATUS, GET_STATUS = 39, 40
FD_MEMFD, FD_EVENTFD, FD_PIPE = 0, 1, 2
UVA = 0x7f0000000000
PROTO = (1 << 0) | (1 << 3) | (1 << 9) | (1 << 12) | (1 << 15) | (1 << 16)


def vu_msg(req, payload=b'', fds=(), reply=False):
    b = bytearray(struct.pack('<BBH', req, 1 if reply else 0, len(payload)))
    b += payload
    b += struct.pack('<B', len(fds))
    for kind in fds:
        if isinstance(kind, tuple):
            b += struct.pack('<BB', *kind)
        else:
            b += struct.pack('<B', kind)
    return bytes(b)


def u64(v):
    return struct.pack('<Q', v)


def handshake():
    return [vu_msg(GET_FEATURES), vu_msg(SET_FEATURES, u64((1 << 32) | (1 << 30))),
            vu_msg(GET_PROTOCOL_FEATURES),
            vu_msg(SET_PROTOCOL_FEATURES, u64(PROTO)), vu_msg(SET_OWNER),
            vu_msg(GET_QUEUE_NUM), vu_msg(GET_MAX_MEM_SLOTS)]


def mem_table():
    region = struct.pack('<QQQQ', 0, 16 * 4096, UVA, 0)
    return vu_msg(SET_MEM_TABLE, struct.pack('<II', 1, 0) + region,
                  [(FD_MEMFD, 16)], reply=True)


def vring(q=0, num=16):
    return [vu_msg(SET_VRING_NUM, struct.pack('<II', q, num)),
            vu_msg(SET_VRING_ADDR, struct.pack('<IIQQQQ', q, 0, UVA,
                                               UVA + 0x2000, UVA + 0x1000, 0)),
            vu_msg(SET_VRING_BASE, struct.pack('<II', q, 0)),
            vu_msg(SET_VRING_CALL, u64(q), [FD_EVENTFD]),
            vu_msg(SET_VRING_KICK, u64(q), [FD_EVENTFD]),
            vu_msg(SET_VRING_ENABLE, struct.pack('<II', q, 1))]


def vhost_user_seeds():
    seeds = {}
    seeds['handshake'] = b''.join(handshake())
    seeds['start-queue'] = b''.join(handshake() + [mem_table()] + vring() +
                                    [vu_msg(GET_VRING_BASE,
                                            struct.pack('<II', 0, 0))])
    seeds['two-queues'] = b''.join(handshake() + [mem_table()] + vring(0) +
                                   vring(1, 64) + [vu_msg(RESET_DEVICE)])
    seeds['config'] = b''.join(handshake() + [
        vu_msg(GET_CONFIG, struct.pack('<III', 0, 16, 0) + bytes(16)),
        vu_msg(SET_CONFIG, struct.pack('<III', 8, 1, 0) + b'\x01', reply=True),
        vu_msg(SET_STATUS, u64(15)), vu_msg(GET_STATUS)])
    seeds['inflight'] = b''.join(handshake() + [
        vu_msg(GET_INFLIGHT_FD, struct.pack('<QQHH', 0, 0, 2, 16)),
        vu_msg(SET_INFLIGHT_FD, struct.pack('<QQHH', 4096, 0, 2, 16),
               [(FD_MEMFD, 1)])] + [mem_table()] + vring())
    seeds['mem-slots'] = b''.join(handshake() + [
        vu_msg(ADD_MEM_REG, u64(0) + struct.pack('<QQQQ', 0, 8 * 4096, UVA, 0),
               [(FD_MEMFD, 8)], reply=True),
        vu_msg(ADD_MEM_REG, u64(0) + struct.pack('<QQQQ', 0x100000, 4096,
                                                 UVA + 0x100000, 0),
               [(FD_MEMFD, 1)]),
        vu_msg(REM_MEM_REG, u64(0) + struct.pack('<QQQQ', 0x100000, 4096,
                                                 UVA + 0x100000, 0))] +
        vring())
    # dirty logging as QEMU starts it: log base, LOG_ALL, rings with
    # VHOST_VRING_F_LOG; the queue then starts with logging on
    log_proto = PROTO | (1 << 1)
    seeds['dirty-log'] = b''.join([
        vu_msg(GET_FEATURES), vu_msg(GET_PROTOCOL_FEATURES),
        vu_msg(SET_PROTOCOL_FEATURES, u64(log_proto)), vu_msg(SET_OWNER),
        mem_table(),
        vu_msg(SET_LOG_BASE, struct.pack('<QQ', 8, 0), [(FD_MEMFD, 1)]),
        vu_msg(SET_LOG_FD, b'', [FD_EVENTFD]),
        vu_msg(SET_FEATURES, u64((1 << 32) | (1 << 30) | (1 << 26)),
               reply=True)] + vring()[:1] + [
        vu_msg(SET_VRING_ADDR, struct.pack('<IIQQQQ', 0, 1, UVA, UVA + 0x2000,
                                           UVA + 0x1000, 0x2000))] +
        vring()[2:] + [vu_msg(GET_VRING_BASE, struct.pack('<II', 0, 0))])
    seeds['bad-fds'] = b''.join(handshake() + [
        vu_msg(SET_VRING_KICK, u64(0), [FD_PIPE]),
        vu_msg(SET_VRING_CALL, u64(1 << 8), [FD_EVENTFD, FD_EVENTFD]),
        vu_msg(SET_VRING_ERR, u64(0), [FD_EVENTFD]),
        vu_msg(RESET_OWNER)])
    return seeds


# ------------------------------------------------------------- export-opts
#
# fuzz-export-opts input: text, one --export argument per line (the lines
# go to one list, so a repeated socket= is refused).  The harness runs in a
# directory holding disk0.img, d.img and base.img; the examples of
# docs/user-guide.md use those names instead of their absolute paths.

def export_opts_seeds():
    ok = {
        'guide-basic': 'socket=/run/vhost-blk/vm1-disk0.sock,file=disk0.img',
        'guide-queues': 'socket=/run/vhost-blk/vm1-disk0.sock,file=disk0.img,'
                        'num-queues=4',
        'guide-4k': 'socket=/run/vhost-blk/d.sock,file=d.img,'
                    'logical-block-size=4096,serial=vm1-data,aio=native',
        'guide-null': 'socket=/run/vhost-blk/null.sock,driver=null,size=10G,'
                      'num-queues=2',
        'guide-queue-size': 'socket=/run/vhost-blk/d.sock,file=d.img,'
                            'queue-size=256',
        'guide-readonly': 'socket=/run/vhost-blk/ro.sock,file=base.img,'
                          'readonly=on',
        'guide-group': 'socket=/run/vhost-blk/vm1.sock,file=disk0.img,'
                       'num-queues=4,socket-mode=0660,socket-group=root',
        'owner': 'socket=o.sock,driver=null,size=16M,socket-mode=0660,'
                 'socket-owner=root,socket-group=0',
        'all-keys': 'socket=all.sock,file=disk0.img,driver=file,'
                    'num-queues=64,queue-size=1024,aio=threads,'
                    'cache=writeback,readonly=off,serial=12345678901234567890,'
                    'logical-block-size=512,discard=off,write-zeroes=no,'
                    'batch=false,iothread=255,socket-mode=0777',
        'inject': 'socket=i.sock,driver=null,size=1M,inject-error=read+write,'
                  'inject-sector=8-15,inject-after=2,inject-count=3,'
                  'inject-errno=ENOSPC',
        'sizes': 'socket=s.sock,driver=null,size=0x1000\n'
                 'socket=t.sock,driver=null,size=16EiB\n'
                 'socket=u.sock,driver=null,size=1TiB,queue-size=2\n'
                 'socket=v.sock,driver=null,size=4kB,,',
        'two-exports': 'socket=a.sock,file=disk0.img\n'
                       'socket=b.sock,driver=null,size=1G,iothread=1',
        'duplicate': 'socket=a.sock,driver=null,size=1G\n'
                     'socket=a.sock,driver=null,size=1G',
    }
    bad = {
        # the error examples of docs/user-guide.md
        'guide-nonexist': 'socket=a.sock,file=/nonexist',
        'guide-unknown': 'socket=a.sock,file=disk0.img,colour=red',
        'guide-bad-size': 'socket=a.sock,driver=null,size=12Q',
        'guide-no-size': 'socket=a.sock,driver=null',
        'no-file': 'socket=a.sock',
        'no-socket': 'file=disk0.img',
        'empty-socket': 'socket=,file=disk0.img',
        'not-kv': 'socket=a.sock,file',
        'edges': 'socket=q.sock,driver=null,size=1,queue-size=2048\n'
                 'socket=q.sock,driver=null,size=1,queue-size=96\n'
                 'socket=q.sock,driver=null,size=1,num-queues=0\n'
                 'socket=q.sock,driver=null,size=1,num-queues=65\n'
                 'socket=q.sock,driver=null,size=1,logical-block-size=1024\n'
                 'socket=q.sock,driver=null,size=0\n'
                 'socket=q.sock,driver=null,size=18446744073709551616\n'
                 'socket=q.sock,driver=null,size=16384P\n'
                 'socket=q.sock,driver=null,size=1,socket-mode=999\n'
                 'socket=q.sock,driver=null,size=1,socket-mode=01000\n'
                 'socket=q.sock,driver=null,size=1,iothread=256\n'
                 'socket=q.sock,driver=null,size=1,serial=123456789012345678901\n'
                 'socket=q.sock,driver=null,size=1,socket-group=no-such-group-vb\n'
                 'socket=q.sock,driver=null,size=1,socket-owner=no-such-user-vb\n'
                 'socket=q.sock,driver=null,size=1,inject-error=sideways\n'
                 'socket=q.sock,driver=nbd,size=1',
    }
    seeds = {}
    for name, text in list(ok.items()) + list(bad.items()):
        seeds[name] = text.encode()
    return seeds


# ----------------------------------------------------------------- inflight
#
# fuzz-inflight input (see tests/fuzz/fuzz-inflight.c):
#   u8 flags (1 packed, 2 event-idx), u8 qlog (size 1 << (qlog % 7)),
#   u32 base, u16 used->idx (split), u8 nflips + nflips x (u16 offset,
#   u8 value) written into the region between the restore's checks and
#   its use, the whole region of one queue, then guest memory from gpa 0
#   (split: descriptors 0x0, avail 0x1000, used 0x2000; packed: ring 0x0).

def align64(n):
    return (n + 63) & ~63


def inflight_hdr(packed, qlog, base=0, used_idx=0, flips=()):
    h = struct.pack('<BBIHB', (1 if packed else 0), qlog, base, used_idx,
                    len(flips))
    for off, val in flips:
        h += struct.pack('<HB', off, val)
    return h


def split_region(num, inflight=(), used_idx=0, last_batch_head=0):
    """inflight: (head, counter) pairs."""
    r = bytearray(align64(16 + 16 * num))
    struct.pack_into('<QHHHH', r, 0, 0, 1, num, last_batch_head, used_idx)
    for head, counter in inflight:
        struct.pack_into('<B5xHQ', r, 16 + 16 * head, 1, 0, counter)
    return bytes(r)


def split_image(num, heads):
    """A descriptor per head: 512 writable bytes at 0x4000 + 0x200 * head."""
    img = bytearray(16 * num)
    for h in heads:
        struct.pack_into('<QIHH', img, 16 * h, 0x4000 + 0x200 * h, 512,
                         VRING_DESC_F_WRITE, 0)
    return bytes(img)


def packed_region(num, bufs=(), used_idx=0, wrap=1):
    """bufs: (id, ndesc, counter); their chains take entries from 0 on,
    the rest is the free list."""
    r = bytearray(align64(32 + 32 * num))
    e = 0
    entries = []
    for bid, ndesc, counter in bufs:
        chain = list(range(e, e + ndesc))
        e += ndesc
        for k, x in enumerate(chain):
            nxt = chain[k + 1] if k + 1 < ndesc else 0
            flags = VRING_DESC_F_WRITE if k == ndesc - 1 else 0
            head = k == 0
            entries.append((x, 1 if head else 0, nxt,
                            chain[-1] if head else 0,
                            ndesc if head else 0, counter if head else 0,
                            bid, flags, 512, 0x4000 + 0x200 * x))
    free = list(range(e, num))
    for k, x in enumerate(free):
        entries.append((x, 0, free[k + 1] if k + 1 < len(free) else num,
                        0, 0, 0, 0, 0, 0, 0))
    free_head = free[0] if free else num
    struct.pack_into('<QHHHHHHBB', r, 0, 0, 1, num, free_head, free_head,
                     used_idx, used_idx, wrap, wrap)
    for x, infl, nxt, last, n, counter, bid, flags, ln, addr in entries:
        struct.pack_into('<BxHHHQHHIQ', r, 32 + 32 * x, infl, nxt, last, n,
                         counter, bid, flags, ln, addr)
    return bytes(r)


def inflight_seeds():
    s = {}
    s['split-fresh'] = inflight_hdr(False, 4) + bytes(align64(16 + 16 * 16))
    s['split-replay'] = (inflight_hdr(False, 4, base=3, used_idx=3) +
                         split_region(16, [(5, 2), (1, 3), (9, 1)], 3) +
                         split_image(16, [5, 1, 9]))
    s['split-torn-push'] = (inflight_hdr(False, 4, base=4, used_idx=4) +
                            split_region(16, [(2, 1), (7, 2)], 3, 7) +
                            split_image(16, [2, 7]))
    s['split-flip'] = (inflight_hdr(False, 4, used_idx=4,
                                    flips=[(12, 0xff), (13, 0xff)]) +
                       split_region(16, [(2, 1)], 3, 2) +
                       split_image(16, [2]))
    s['packed-fresh'] = inflight_hdr(True, 4) + bytes(align64(32 + 32 * 16))
    s['packed-replay'] = (inflight_hdr(True, 4, base=0x80008000) +
                          packed_region(16, [(7, 3, 2), (2, 1, 1)]))
    s['packed-full'] = (inflight_hdr(True, 2) +
                        packed_region(4, [(0, 2, 1), (3, 2, 2)]))
    s['packed-qsize1'] = (inflight_hdr(True, 0) +
                          packed_region(1, [(0, 1, 5)]))
    s['packed-flip'] = (inflight_hdr(True, 4,
                                     flips=[(12, 0xff), (13, 0xff),
                                            (16, 0xff), (17, 0xff),
                                            (20, 0xff)]) +
                        packed_region(16, [(4, 2, 1)], used_idx=3))
    s['packed-free-short'] = (inflight_hdr(True, 4) +
                              packed_region(16, [(1, 1, 1)])[:32 + 32 * 3])
    return s


# ---- fuzz-nbd-server: what one NBD client sends, after the greeting ----

def nbd_opt(opt, data=b''):
    return struct.pack('>QII', 0x49484156454F5054, opt, len(data)) + data


def nbd_req(cmd, offset, length, flags=0, cookie=1, payload=b''):
    return struct.pack('>IHHQQI', 0x25609513, flags, cmd, cookie, offset,
                       length) + payload


def nbd_name(name):
    return struct.pack('>I', len(name)) + name


def nbd_server_seeds():
    meta = (nbd_name(b'disk') + struct.pack('>I', 1) +
            nbd_name(b'base:allocation'))
    go = nbd_opt(7, nbd_name(b'disk') + struct.pack('>HHH', 2, 1, 3))
    cmds = (nbd_req(0, 0, 4096, cookie=1) +
            nbd_req(1, 4096, 512, flags=1, cookie=2, payload=b'\xab' * 512) +
            nbd_req(3, 0, 0, cookie=3) +
            nbd_req(4, 8192, 4096, cookie=4) +
            nbd_req(6, 16384, 4096, flags=2, cookie=5) +
            nbd_req(6, 16384, 4096, flags=16, cookie=6) +
            nbd_req(7, 0, 1 << 20, cookie=7) +
            nbd_req(7, 0, 1 << 20, flags=8, cookie=8) +
            nbd_req(0, (1 << 20) - 512, 1024, cookie=9) +
            nbd_req(2, 0, 0))
    s = {}
    s['go-structured'] = (struct.pack('>I', 3) + nbd_opt(3) + nbd_opt(8) +
                          nbd_opt(9, nbd_name(b'disk') +
                                  struct.pack('>I', 0)) +
                          nbd_opt(10, meta) + go + cmds)
    s['export-name'] = (struct.pack('>I', 1) + nbd_opt(1, b'disk') +
                        nbd_req(1, 0, 1024, payload=b'\x01' * 1024) +
                        nbd_req(0, 0, 1024, cookie=2) + nbd_req(2, 0, 0))
    s['info-abort'] = (struct.pack('>I', 3) +
                       nbd_opt(6, nbd_name(b'disk') +
                               struct.pack('>HHH', 2, 1, 2)) +
                       nbd_opt(6, nbd_name(b'nope') + struct.pack('>H', 0)) +
                       nbd_opt(42, b'xyz') + nbd_opt(2))
    s['starttls-refused'] = (struct.pack('>I', 3) + nbd_opt(5) + go +
                             nbd_req(0, 0, 512))
    return s


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
    for target, seeds in (('fuzz-virtqueue', virtqueue_seeds()),
                          ('fuzz-virtio-blk', virtio_blk_seeds()),
                          ('fuzz-vhost-user', vhost_user_seeds()),
                          ('fuzz-export-opts', export_opts_seeds()),
                          ('fuzz-inflight', inflight_seeds()),
                          ('fuzz-nbd-server', nbd_server_seeds())):
        d = os.path.join(outdir, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), 'wb') as f:
                f.write(data)
        print(f'{d}: {len(seeds)} seeds')


if __name__ == '__main__':
    main()
