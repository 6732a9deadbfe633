/* SPDX-License-Identifier: GPL-2.0-or-later */
/* struct iovec helpers (see include/qemu/iov.h). */
#include "qemu/osdep.h"
#include "qemu/iov.h"

/* Any thread. */
size_t iov_size(const struct iovec *iov, unsigned int iov_cnt)
{
    size_t total = 0;
    unsigned int i;

    for (i = 0; i < iov_cnt; i++) {
        if (iov[i].iov_len > SIZE_MAX - total) {
            return SIZE_MAX;
        }
        total += iov[i].iov_len;
    }
    return total;
}

/* Find the element holding byte @offset; *skip gets the offset inside it.
 * Returns iov_cnt if @offset is at or past the end. */
static unsigned int iov_seek(const struct iovec *iov, unsigned int iov_cnt,
                             size_t offset, size_t *skip)
{
    unsigned int i;

    for (i = 0; i < iov_cnt; i++) {
        if (offset < iov[i].iov_len) {
            break;
        }
        offset -= iov[i].iov_len;
    }
    *skip = offset;
    return i;
}

/* Any thread. */
size_t iov_to_buf(const struct iovec *iov, unsigned int iov_cnt,
                  size_t offset, void *buf, size_t bytes)
{
    size_t skip, done = 0;
    unsigned int i = iov_seek(iov, iov_cnt, offset, &skip);

    for (; i < iov_cnt && done < bytes; i++) {
        size_t len = MIN(iov[i].iov_len - skip, bytes - done);

        if (len) {
            memcpy((char *)buf + done, (char *)iov[i].iov_base + skip, len);
        }
        done += len;
        skip = 0;
    }
    return done;
}

/* Any thread. */
size_t iov_from_buf(const struct iovec *iov, unsigned int iov_cnt,
                    size_t offset, const void *buf, size_t bytes)
{
    size_t skip, done = 0;
    unsigned int i = iov_seek(iov, iov_cnt, offset, &skip);

    for (; i < iov_cnt && done < bytes; i++) {
        size_t len = MIN(iov[i].iov_len - skip, bytes - done);

        if (len) {
            memcpy((char *)iov[i].iov_base + skip, (const char *)buf + done,
                   len);
        }
        done += len;
        skip = 0;
    }
    return done;
}

/* Any thread. */
size_t iov_memset(const struct iovec *iov, unsigned int iov_cnt,
                  size_t offset, int fillc, size_t bytes)
{
    size_t skip, done = 0;
    unsigned int i = iov_seek(iov, iov_cnt, offset, &skip);

    for (; i < iov_cnt && done < bytes; i++) {
        size_t len = MIN(iov[i].iov_len - skip, bytes - done);

        if (len) {
            memset((char *)iov[i].iov_base + skip, fillc, len);
        }
        done += len;
        skip = 0;
    }
    return done;
}

/* Any thread. */
int iov_copy(struct iovec *dst_iov, unsigned int dst_iov_cnt,
             const struct iovec *iov, unsigned int iov_cnt,
             size_t offset, size_t bytes)
{
    size_t skip;
    unsigned int i = iov_seek(iov, iov_cnt, offset, &skip);
    unsigned int n = 0;

    for (; i < iov_cnt && bytes > 0; i++) {
        size_t len = MIN(iov[i].iov_len - skip, bytes);

        if (len == 0) {
            continue;           /* keep empty source elements out */
        }
        if (n == dst_iov_cnt || n == INT_MAX) {
            return -1;
        }
        dst_iov[n].iov_base = (char *)iov[i].iov_base + skip;
        dst_iov[n].iov_len = len;
        n++;
        bytes -= len;
        skip = 0;
    }
    return n;
}

/* Any thread. */
size_t iov_discard_front(struct iovec **iov, unsigned int *iov_cnt,
                         size_t bytes)
{
    struct iovec *cur = *iov;
    unsigned int cnt = *iov_cnt;
    size_t done = 0;

    while (cnt > 0 && done < bytes) {
        size_t want = bytes - done;

        if (cur->iov_len > want) {
            cur->iov_base = (char *)cur->iov_base + want;
            cur->iov_len -= want;
            done += want;
            break;
        }
        done += cur->iov_len;
        cur++;
        cnt--;
    }
    *iov = cur;
    *iov_cnt = cnt;
    return done;
}

/* Any thread. */
size_t iov_discard_back(struct iovec *iov, unsigned int *iov_cnt,
                        size_t bytes)
{
    unsigned int cnt = *iov_cnt;
    size_t done = 0;

    while (cnt > 0 && done < bytes) {
        struct iovec *last = &iov[cnt - 1];
        size_t want = bytes - done;

        if (last->iov_len > want) {
            last->iov_len -= want;
            done += want;
            break;
        }
        done += last->iov_len;
        cnt--;
    }
    *iov_cnt = cnt;
    return done;
}
