/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Shared helpers of the libFuzzer harnesses: a cursor that takes typed
 * values from the fuzzer's byte string (zero once it runs dry, so every
 * input, even an empty one, is a valid test) and the invariant check that
 * reports a violation as a crash.
 *
 * Threads: the harnesses are single-threaded (the fuzzer's thread owns the
 * AioContext); nothing here is thread-safe.
 */
#ifndef TESTS_FUZZ_FUZZ_COMMON_H
#define TESTS_FUZZ_FUZZ_COMMON_H

#include "qemu/osdep.h"

typedef struct FuzzInput {
    const uint8_t *data;
    size_t len;
} FuzzInput;

static inline void fuzz_input_init(FuzzInput *in, const uint8_t *data,
                                   size_t len)
{
    in->data = data;
    in->len = len;
}

static inline size_t fuzz_remaining(const FuzzInput *in)
{
    return in->len;
}

/* Copy up to @n bytes into @dst, zero-fill the rest; returns bytes taken. */
static inline size_t fuzz_bytes(FuzzInput *in, void *dst, size_t n)
{
    size_t take = MIN(n, in->len);

    if (take) {
        memcpy(dst, in->data, take);
    }
    if (take < n) {
        memset((uint8_t *)dst + take, 0, n - take);
    }
    in->data += take;
    in->len -= take;
    return take;
}

/* Skip up to @n bytes and return a pointer to them (@n shrinks to what is
 * left). */
static inline const uint8_t *fuzz_take(FuzzInput *in, size_t *n)
{
    const uint8_t *p = in->data;

    *n = MIN(*n, in->len);
    in->data += *n;
    in->len -= *n;
    return p;
}

static inline uint8_t fuzz_u8(FuzzInput *in)
{
    uint8_t v;

    fuzz_bytes(in, &v, sizeof(v));
    return v;
}

/* Multi-byte values are little-endian in the input, like the rings. */
static inline uint16_t fuzz_u16(FuzzInput *in)
{
    uint16_t v;

    fuzz_bytes(in, &v, sizeof(v));
    return GUINT16_FROM_LE(v);
}

static inline uint32_t fuzz_u32(FuzzInput *in)
{
    uint32_t v;

    fuzz_bytes(in, &v, sizeof(v));
    return GUINT32_FROM_LE(v);
}

static inline uint64_t fuzz_u64(FuzzInput *in)
{
    uint64_t v;

    fuzz_bytes(in, &v, sizeof(v));
    return GUINT64_FROM_LE(v);
}

/* An invariant of the code under test does not hold: print why and crash,
 * so libFuzzer saves the input.  (Harness-only: production code must never
 * abort on guest input.) */
#define fuzz_check(cond, ...)                                           \
    do {                                                                \
        if (unlikely(!(cond))) {                                        \
            fprintf(stderr, "fuzz invariant violated at %s:%d: %s\n",   \
                    __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, "  " __VA_ARGS__);                          \
            fputc('\n', stderr);                                        \
            abort();                                                    \
        }                                                               \
    } while (0)

/* Entry points every harness defines (the libFuzzer interface). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
