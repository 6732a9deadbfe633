/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Helpers for struct iovec arrays: size, copy to/from flat buffers, fill,
 * sub-range copy and trimming.  Pure functions: any thread, no allocation.
 * Every function is bounded by the arrays and sizes it is given, so it is
 * safe on iovecs built from guest descriptors (after the memory map checked
 * each element).
 */
#ifndef QEMU_IOV_H
#define QEMU_IOV_H

#include "qemu/osdep.h"

/* Total bytes in @iov[0..@iov_cnt) (saturates at SIZE_MAX). */
size_t iov_size(const struct iovec *iov, unsigned int iov_cnt);

/* Copy up to @bytes from @iov, starting @offset bytes in, to @buf.
 * Returns the number of bytes copied (less if the iovec ends first). */
size_t iov_to_buf(const struct iovec *iov, unsigned int iov_cnt,
                  size_t offset, void *buf, size_t bytes);

/* Copy up to @bytes from @buf into @iov at @offset.  Returns bytes copied. */
size_t iov_from_buf(const struct iovec *iov, unsigned int iov_cnt,
                    size_t offset, const void *buf, size_t bytes);

/* Fill up to @bytes of @iov from @offset with @fillc.  Returns bytes set. */
size_t iov_memset(const struct iovec *iov, unsigned int iov_cnt,
                  size_t offset, int fillc, size_t bytes);

/*
 * Describe bytes [@offset, @offset + @bytes) of @iov (clipped to the end of
 * @iov; @bytes may be SIZE_MAX for "the rest") in @dst_iov, without copying
 * data.  Returns the number of elements written to @dst_iov, or -1 if more
 * than @dst_iov_cnt would be needed.
 */
int iov_copy(struct iovec *dst_iov, unsigned int dst_iov_cnt,
             const struct iovec *iov, unsigned int iov_cnt,
             size_t offset, size_t bytes);

/*
 * Drop @bytes from the front of the array *@iov / *@iov_cnt: advances *@iov
 * past emptied elements, shortens the first remaining one and updates
 * *@iov_cnt.  Modifies the array elements, so work on a copy.  Returns the
 * number of bytes dropped (less than @bytes if the array was shorter).
 */
size_t iov_discard_front(struct iovec **iov, unsigned int *iov_cnt,
                         size_t bytes);

/* Drop @bytes from the back: shortens the last elements and *@iov_cnt.
 * Modifies the array elements.  Returns the number of bytes dropped. */
size_t iov_discard_back(struct iovec *iov, unsigned int *iov_cnt,
                        size_t bytes);

#endif
