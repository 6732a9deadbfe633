/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A main() for the fuzz harnesses in builds without libFuzzer: runs every
 * file named on the command line (or found in a directory named there)
 * through LLVMFuzzerTestOneInput() once, so the seed corpus and the saved
 * crash reproducers are replayed as a plain test.
 */
#include "qemu/osdep.h"
#include "fuzz-common.h"

#include <dirent.h>
#include <sys/stat.h>

static unsigned int fuzz_replay_count;

static void fuzz_replay_file(const char *path)
{
    g_autofree gchar *data = NULL;
    g_autoptr(GError) err = NULL;
    gsize len;

    if (!g_file_get_contents(path, &data, &len, &err)) {
        fprintf(stderr, "fuzz-replay: %s\n", err->message);
        exit(1);
    }
    printf("replaying %s (%zu bytes)\n", path, (size_t)len);
    fflush(stdout);
    LLVMFuzzerTestOneInput((const uint8_t *)data, len);
    fuzz_replay_count++;
}

static int fuzz_replay_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void fuzz_replay_dir(const char *dir)
{
    g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) err = NULL;
    GDir *d = g_dir_open(dir, 0, &err);
    const char *name;
    unsigned int i;

    if (!d) {
        /* an absent directory (no reproducers yet) is not an error */
        return;
    }
    while ((name = g_dir_read_name(d))) {
        if (name[0] != '.') {
            g_ptr_array_add(names, g_build_filename(dir, name, NULL));
        }
    }
    g_dir_close(d);
    qsort(names->pdata, names->len, sizeof(gpointer), fuzz_replay_cmp);
    for (i = 0; i < names->len; i++) {
        if (g_file_test(names->pdata[i], G_FILE_TEST_IS_DIR)) {
            fuzz_replay_dir(names->pdata[i]);
        } else {
            fuzz_replay_file(names->pdata[i]);
        }
    }
}

int main(int argc, char **argv)
{
    int i;

    LLVMFuzzerInitialize(&argc, &argv);
    for (i = 1; i < argc; i++) {
        if (g_file_test(argv[i], G_FILE_TEST_IS_DIR)) {
            fuzz_replay_dir(argv[i]);
        } else if (g_file_test(argv[i], G_FILE_TEST_EXISTS)) {
            fuzz_replay_file(argv[i]);
        }
    }
    printf("%u input(s) replayed without a crash\n", fuzz_replay_count);
    return 0;
}
