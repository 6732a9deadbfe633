/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: the input is what one NBD client sends, from its
 * client flags on (the server's greeting is not part of it).  It goes
 * through the server's option parser (LIST, INFO, GO, EXPORT_NAME,
 * STRUCTURED_REPLY, LIST/SET_META_CONTEXT, STARTTLS refused: no TLS
 * here, ABORT, anything else) and, once an export is chosen, the request
 * parser and the requests themselves on a 1 MiB null-co node ("disk",
 * writable), answered through a socket whose other end the harness
 * drains.  The connection ends at the input's end (EOF) or when the
 * server closes it; either way the harness waits until the server has
 * let it go, so a connection that leaks, hangs or touches memory it
 * should not shows up as a hang or a sanitizer report.
 *
 * Seeds (tests/fuzz/corpus/fuzz-nbd-server/): a full session with
 * structured replies and base:allocation (every command), one with
 * NBD_OPT_EXPORT_NAME and simple replies, one with NBD_OPT_INFO and
 * NBD_OPT_ABORT, one with STARTTLS refused, written by
 * tests/fuzz/gen-seeds.py.
 *
 * Threads: the fuzzer's only (it runs the main context; the export's
 * context is the same).
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "block/null.h"
#include "nbd/server.h"
#include "fuzz-common.h"

static AioContext *fn_ctx;
static BlockBackend *fn_blk;
static NbdServer *fn_srv;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    BlockOptions o;
    BlockNullOptions no;
    NbdServerOptions so = { .listen_fd = -1 };
    NbdExportOptions eo = { 0 };
    GError *err = NULL;

    fn_ctx = aio_context_new(&err);
    if (!fn_ctx) {
        fprintf(stderr, "aio_context_new: %s\n", err->message);
        abort();
    }
    aio_context_acquire_thread(fn_ctx);
    blk_options_init(&o);
    blk_null_options(&o, &no, 1024 * 1024, true);
    fn_blk = blk_open(&o, &err);
    if (!fn_blk) {
        fprintf(stderr, "blk_open: %s\n", err->message);
        abort();
    }
    so.main_ctx = fn_ctx;
    fn_srv = nbd_server_new(&so, &err);
    eo.name = "disk";
    eo.description = "fuzz";
    eo.blk = fn_blk;
    eo.writable = true;
    eo.ctx = &fn_ctx;
    eo.n_ctx = 1;
    if (!fn_srv || !nbd_export_new(fn_srv, &eo, &err)) {
        fprintf(stderr, "nbd: %s\n", err->message);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nbd_server_fuzz_input(fn_srv, data, size);
    /* Every request the connection made has completed. */
    fuzz_check(nbd_server_num_clients(fn_srv) == 0,
               "a connection outlived its input");
    return 0;
}
