/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Sized loads and stores for the virtqueue model tests: the tests' shadow
 * of shared memory is read and written with exactly the access size the
 * model hook was told, as the device did.
 */
#ifndef TESTS_UNIT_VQ_TEST_MEM_H
#define TESTS_UNIT_VQ_TEST_MEM_H

#include "qemu/osdep.h"

static inline uint64_t vq_test_mem_read(const void *p, size_t size)
{
    switch (size) {
    case 1:
        return *(const uint8_t *)p;
    case 2:
        return *(const uint16_t *)p;
    case 4:
        return *(const uint32_t *)p;
    case 8:
        return *(const uint64_t *)p;
    }
    g_assert_not_reached();
}

static inline void vq_test_mem_write(void *p, uint64_t v, size_t size)
{
    switch (size) {
    case 1:
        *(uint8_t *)p = v;
        return;
    case 2:
        *(uint16_t *)p = v;
        return;
    case 4:
        *(uint32_t *)p = v;
        return;
    case 8:
        *(uint64_t *)p = v;
        return;
    }
    g_assert_not_reached();
}

#endif /* TESTS_UNIT_VQ_TEST_MEM_H */
