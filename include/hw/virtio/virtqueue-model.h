/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Test builds only: the shared-memory accessors of hw/virtio/virtqueue.c
 * when it is compiled with CONFIG_VIRTQUEUE_MODEL.  Each load, store and
 * full barrier on memory shared with the driver calls into the test
 * (tests/unit/test-virtqueue-tso.c), which runs it against a simulated
 * x86-TSO store buffer and may let the driver act in between.
 *
 * Acquire loads and release stores are plain loads and stores under TSO,
 * so the model treats them like the relaxed ones; only VQ_MB() drains the
 * store buffer.
 */
#ifndef HW_VIRTIO_VIRTQUEUE_MODEL_H
#define HW_VIRTIO_VIRTQUEUE_MODEL_H

uint64_t vq_model_load(const void *p, size_t size);
void vq_model_store(void *p, uint64_t v, size_t size);
void vq_model_mb(void);

#define VQ_LOAD(p) \
    ((__typeof__(*(p)))vq_model_load((p), sizeof(*(p))))
#define VQ_STORE(p, v) \
    vq_model_store((p), (uint64_t)(v), sizeof(*(p)))
#define VQ_LOAD_ACQUIRE(p)      VQ_LOAD(p)
#define VQ_STORE_RELEASE(p, v)  VQ_STORE(p, v)
#define VQ_MB()                 vq_model_mb()

#endif
