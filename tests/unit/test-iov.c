/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for the iovec helpers. */
#include "qemu/osdep.h"
#include "qemu/iov.h"

/* Three buffers of 3, 0 and 5 bytes: "abc" + "" + "defgh". */
static char b0[3], b2[5];
static struct iovec base[3];

static void iov_fixture(void)
{
    memcpy(b0, "abc", 3);
    memcpy(b2, "defgh", 5);
    base[0] = (struct iovec){ b0, 3 };
    base[1] = (struct iovec){ NULL, 0 };
    base[2] = (struct iovec){ b2, 5 };
}

static void test_size(void)
{
    struct iovec huge[2] = { { NULL, SIZE_MAX }, { NULL, 2 } };

    iov_fixture();
    g_assert_cmpuint(iov_size(base, 3), ==, 8);
    g_assert_cmpuint(iov_size(base, 0), ==, 0);
    g_assert_cmpuint(iov_size(huge, 2), ==, SIZE_MAX);
}

static void test_to_from_buf(void)
{
    char buf[16] = { 0 };

    iov_fixture();
    g_assert_cmpuint(iov_to_buf(base, 3, 0, buf, sizeof(buf)), ==, 8);
    g_assert_cmpmem(buf, 8, "abcdefgh", 8);
    memset(buf, 0, sizeof(buf));
    g_assert_cmpuint(iov_to_buf(base, 3, 2, buf, 3), ==, 3);
    g_assert_cmpmem(buf, 3, "cde", 3);
    g_assert_cmpuint(iov_to_buf(base, 3, 8, buf, 3), ==, 0);
    g_assert_cmpuint(iov_to_buf(base, 3, 100, buf, 3), ==, 0);

    g_assert_cmpuint(iov_from_buf(base, 3, 1, "XYZW", 4), ==, 4);
    g_assert_cmpmem(b0, 3, "aXY", 3);
    g_assert_cmpmem(b2, 5, "ZWfgh", 5);
    /* Clipped at the end. */
    g_assert_cmpuint(iov_from_buf(base, 3, 6, "1234", 4), ==, 2);
    g_assert_cmpmem(b2, 5, "ZWf12", 5);
}

static void test_memset(void)
{
    iov_fixture();
    g_assert_cmpuint(iov_memset(base, 3, 2, 'z', 2), ==, 2);
    g_assert_cmpmem(b0, 3, "abz", 3);
    g_assert_cmpmem(b2, 5, "zefgh", 5);
    g_assert_cmpuint(iov_memset(base, 3, 4, 0, SIZE_MAX), ==, 4);
    g_assert_cmpmem(b2, 5, "z\0\0\0\0", 5);
}

static void test_copy(void)
{
    struct iovec dst[3];
    char buf[8];
    int n;

    iov_fixture();
    n = iov_copy(dst, 3, base, 3, 1, 5);
    g_assert_cmpint(n, ==, 2);
    g_assert_true(dst[0].iov_base == b0 + 1);
    g_assert_cmpuint(dst[0].iov_len, ==, 2);
    g_assert_true(dst[1].iov_base == b2);
    g_assert_cmpuint(dst[1].iov_len, ==, 3);
    g_assert_cmpuint(iov_to_buf(dst, n, 0, buf, sizeof(buf)), ==, 5);
    g_assert_cmpmem(buf, 5, "bcdef", 5);

    /* "The rest" from an offset. */
    n = iov_copy(dst, 3, base, 3, 4, SIZE_MAX);
    g_assert_cmpint(n, ==, 1);
    g_assert_cmpuint(dst[0].iov_len, ==, 4);

    /* Does not fit into one element. */
    g_assert_cmpint(iov_copy(dst, 1, base, 3, 0, 8), ==, -1);
    /* Offset past the end: nothing. */
    g_assert_cmpint(iov_copy(dst, 3, base, 3, 50, 1), ==, 0);
}

static void test_discard(void)
{
    struct iovec copy[3], *p;
    unsigned int cnt;

    iov_fixture();
    memcpy(copy, base, sizeof(base));
    p = copy;
    cnt = 3;
    g_assert_cmpuint(iov_discard_front(&p, &cnt, 4), ==, 4);
    g_assert_cmpuint(cnt, ==, 1);
    g_assert_true(p->iov_base == b2 + 1);
    g_assert_cmpuint(iov_size(p, cnt), ==, 4);

    g_assert_cmpuint(iov_discard_back(p, &cnt, 1), ==, 1);
    g_assert_cmpuint(cnt, ==, 1);
    g_assert_cmpuint(p->iov_len, ==, 3);
    g_assert_cmpuint(iov_discard_back(p, &cnt, 10), ==, 3);
    g_assert_cmpuint(cnt, ==, 0);

    memcpy(copy, base, sizeof(base));
    cnt = 3;
    g_assert_cmpuint(iov_discard_back(copy, &cnt, 5), ==, 5);
    g_assert_cmpuint(cnt, ==, 2);   /* the empty middle element stays */
    g_assert_cmpuint(iov_size(copy, cnt), ==, 3);
    p = copy;
    g_assert_cmpuint(iov_discard_front(&p, &cnt, 100), ==, 3);
    g_assert_cmpuint(cnt, ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/iov/size", test_size);
    g_test_add_func("/iov/to-from-buf", test_to_from_buf);
    g_test_add_func("/iov/memset", test_memset);
    g_test_add_func("/iov/copy", test_copy);
    g_test_add_func("/iov/discard", test_discard);
    return g_test_run();
}
