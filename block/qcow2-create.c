/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A new, empty qcow2 image file, as 'qemu-img create -f qcow2 [-b
 * BACKING -F FORMAT] FILE SIZE' makes one with its defaults (version 3,
 * 64 KiB clusters, 16-bit refcounts, no extra features): the overlay of
 * blockdev-snapshot-sync with mode=absolute-paths.  Written from the
 * format's specification (QEMU's docs/interop/qcow2.txt).
 *
 * Layout, one cluster each unless said: 0 the header, its extensions
 * (the backing file's format) and the backing file's name; 1 the
 * refcount table; 2 its one refcount block (which covers the first
 * 32768 clusters, far more than an empty image has); 3 and on the L1
 * table, all zeroes (nothing allocated: every read goes to the backing
 * file, or reads zeroes).  Every cluster of the file has refcount 1.
 */
#include "qemu/osdep.h"
#include "block/qcow2.h"
#include "block/qcow2-options.h"

#define CREATE_CLUSTER_BITS 16
#define CREATE_CLUSTER_SIZE (1u << CREATE_CLUSTER_BITS)
#define CREATE_REFCOUNT_ORDER 4         /* 16-bit refcounts */

static void st_be32(uint8_t *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, 4);
}

bool qcow2_create_file(const char *path, uint64_t size, const char *backing,
                       const char *backing_fmt, GError **errp)
{
    uint64_t per_l1 = (uint64_t)CREATE_CLUSTER_SIZE *
                      (CREATE_CLUSTER_SIZE / 8);   /* bytes per L1 entry */
    uint64_t l1_size, l1_clusters, nclusters;
    g_autofree uint8_t *buf = NULL;
    size_t pos = QCOW2_V3_HEADER_LENGTH;
    size_t blen = backing ? strlen(backing) : 0;
    size_t flen = backing_fmt ? strlen(backing_fmt) : 0;
    int fd;

    if (!size || size % 512 || size > QCOW2_MAX_VIRTUAL_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "%s: a qcow2 image's size must be a "
                    "non-zero multiple of 512 bytes (%" PRIu64 " given)",
                    path, size);
        return false;
    }
    if (blen > QCOW2_MAX_BACKING_NAME || flen > 16) {
        g_set_error(errp, VB_ERROR, 0, "%s: the backing file's name (at "
                    "most %u bytes) or format name is too long", path,
                    QCOW2_MAX_BACKING_NAME);
        return false;
    }
    l1_size = (size + per_l1 - 1) / per_l1;
    if (l1_size > QCOW2_MAX_L1_ENTRIES) {
        g_set_error(errp, VB_ERROR, 0, "%s: %" PRIu64 " bytes is too big "
                    "for an image with 64 KiB clusters", path, size);
        return false;
    }
    l1_clusters = (l1_size * 8 + CREATE_CLUSTER_SIZE - 1) / CREATE_CLUSTER_SIZE;
    nclusters = 3 + l1_clusters;
    buf = g_malloc0(nclusters * CREATE_CLUSTER_SIZE);

    /* The header. */
    st_be32(buf + 0, QCOW2_MAGIC);
    st_be32(buf + 4, 3);
    st_be32(buf + 20, CREATE_CLUSTER_BITS);
    qcow2_st_be64(buf + 24, size);
    st_be32(buf + 32, QCOW2_CRYPT_NONE);
    st_be32(buf + 36, l1_size);
    qcow2_st_be64(buf + 40, 3ull * CREATE_CLUSTER_SIZE);
    qcow2_st_be64(buf + 48, 1ull * CREATE_CLUSTER_SIZE);
    st_be32(buf + 56, 1);
    /* No snapshots, no incompatible/compatible/autoclear features. */
    st_be32(buf + 96, CREATE_REFCOUNT_ORDER);
    st_be32(buf + 100, QCOW2_V3_HEADER_LENGTH);
    /* Extensions: the backing format, then the end marker. */
    if (backing_fmt) {
        st_be32(buf + pos, QCOW2_EXT_BACKING_FORMAT);
        st_be32(buf + pos + 4, flen);
        memcpy(buf + pos + 8, backing_fmt, flen);
        pos += 8 + QEMU_ALIGN_UP(flen, 8);
    }
    st_be32(buf + pos, QCOW2_EXT_END);
    st_be32(buf + pos + 4, 0);
    pos += 8;
    if (backing) {
        qcow2_st_be64(buf + 8, pos);
        st_be32(buf + 16, blen);
        memcpy(buf + pos, backing, blen);
    }

    /* The refcount table names the block; the block counts every
     * cluster of the file once. */
    qcow2_st_be64(buf + CREATE_CLUSTER_SIZE, 2ull * CREATE_CLUSTER_SIZE);
    for (uint64_t i = 0; i < nclusters; i++) {
        uint8_t *p = buf + 2 * CREATE_CLUSTER_SIZE + i * 2;

        p[0] = 0;
        p[1] = 1;
    }

    /* A new file only: an existing one may be somebody's disk. */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;

        g_set_error(errp, VB_ERROR, 0, "Could not create '%s': %s%s", path,
                    g_strerror(e), e == EEXIST ? " (to use an existing "
                    "image, give mode=existing)" : "");
        return false;
    }
    for (size_t done = 0, len = nclusters * CREATE_CLUSTER_SIZE;
         done < len;) {
        ssize_t n = write(fd, buf + done, len - done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;

            g_set_error(errp, VB_ERROR, 0, "Could not write '%s': %s",
                        path, g_strerror(e));
            close(fd);
            unlink(path);
            return false;
        }
        done += n;
    }
    if (fsync(fd) < 0) {
        int e = errno;

        g_set_error(errp, VB_ERROR, 0, "Could not write '%s': %s", path,
                    g_strerror(e));
        close(fd);
        unlink(path);
        return false;
    }
    close(fd);
    return true;
}
