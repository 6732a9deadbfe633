/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Common includes for every vhost-blk source file: include it first. */
#ifndef QEMU_OSDEP_H
#define QEMU_OSDEP_H

#include "config-host.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <glib.h>

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#ifndef container_of
#define container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define QEMU_IS_ALIGNED(n, m) (((n) % (m)) == 0)
#define QEMU_ALIGN_DOWN(n, m) ((n) / (m) * (m))
#define QEMU_ALIGN_UP(n, m) QEMU_ALIGN_DOWN((n) + (m) - 1, (m))
#define QEMU_PACKED __attribute__((packed))

/* Error domain for GError values produced by vhost-blk. */
#define VB_ERROR vb_error_quark()
GQuark vb_error_quark(void);

#endif
