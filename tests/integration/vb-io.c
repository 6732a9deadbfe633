/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vb-io: a scriptable virtio-blk "guest" for shell tests.  It connects the
 * front-end library to one vhost-user-blk socket and runs the commands given
 * on the command line in order, in one session, printing one line per
 * command; it exits 1 if a command's status differs from the expected one.
 *
 *   vb-io SOCKET CMD...
 *     write:SECTOR:BYTES[:SEED][=STATUS]   pattern SEED (default 1)
 *     read:SECTOR:BYTES[:SEED][=STATUS]    with SEED: data checked too
 *     flush[=STATUS]
 *     fill:SECTOR:BYTES[:SEED]   write BYTES-sized chunks (pattern SEED+i)
 *                                from SECTOR until a request fails or the
 *                                disk ends; SECTOR "F" in later commands
 *                                is the sector of the failed chunk
 *     unlink:PATH                remove a file (e.g. free space)
 *     sleep:MS
 *     waitcfg:BYTES          wait (60 s at most) for the back-end's
 *                            CONFIG_CHANGE_MSG, then check that the config
 *                            space's capacity is BYTES (a resize); asks for
 *                            the back-end channel when given
 *     ready                  print "ready" and flush (a script can act
 *                            once the session is up)
 *   STATUS: ok (default), ioerr, unsupp, any.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

static uint64_t vbio_fail_sector = UINT64_MAX;

static const char *vbio_status_name(int st)
{
    switch (st) {
    case VIRTIO_BLK_S_OK:
        return "ok";
    case VIRTIO_BLK_S_IOERR:
        return "ioerr";
    case VIRTIO_BLK_S_UNSUPP:
        return "unsupp";
    default:
        return st == -ETIMEDOUT ? "timeout" : "error";
    }
}

/* Split "BODY=STATUS"; returns the expected status or -1 for "any". */
static int vbio_expect(char *cmd)
{
    char *eq = strrchr(cmd, '=');

    if (!eq) {
        return VIRTIO_BLK_S_OK;
    }
    *eq = '\0';
    if (!strcmp(eq + 1, "ok")) {
        return VIRTIO_BLK_S_OK;
    } else if (!strcmp(eq + 1, "ioerr")) {
        return VIRTIO_BLK_S_IOERR;
    } else if (!strcmp(eq + 1, "unsupp")) {
        return VIRTIO_BLK_S_UNSUPP;
    } else if (!strcmp(eq + 1, "any")) {
        return -1;
    }
    fprintf(stderr, "vb-io: bad status '%s' (ok, ioerr, unsupp, any)\n",
            eq + 1);
    exit(2);
}

static uint64_t vbio_num(const char *s, const char *what)
{
    char *end;
    uint64_t v;

    if (!strcmp(s, "F") && !strcmp(what, "sector")) {
        if (vbio_fail_sector == UINT64_MAX) {
            fprintf(stderr, "vb-io: sector F used before a fill failed\n");
            exit(2);
        }
        return vbio_fail_sector;
    }
    v = g_ascii_strtoull(s, &end, 0);
    if (end == s) {
        fprintf(stderr, "vb-io: bad %s '%s'\n", what, s);
        exit(2);
    }
    switch (*end) {
    case 'k': case 'K':
        v <<= 10;
        break;
    case 'M':
        v <<= 20;
        break;
    default:
        break;
    }
    return v;
}

int main(int argc, char **argv)
{
    VhostUserFrontendOptions opts = { .connect_timeout_ms = 10000,
                                      .mem_size = 80 << 20 };
    struct virtio_blk_config cfg;
    g_autoptr(GError) err = NULL;
    VhostUserFrontend *fe;
    size_t buf_size = 64 << 20;
    uint8_t *buf;
    int failed = 0;

    if (argc < 3) {
        fprintf(stderr, "usage: vb-io SOCKET CMD... (see the source)\n");
        return 2;
    }
    opts.socket_path = argv[1];
    for (int i = 2; i < argc; i++) {
        if (g_str_has_prefix(argv[i], "waitcfg:")) {
            opts.protocol_features = (1ULL << VHOST_USER_PROTOCOL_F_MQ) |
                (1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
                (1ULL << VHOST_USER_PROTOCOL_F_CONFIG) |
                (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) |
                (1ULL << VHOST_USER_PROTOCOL_F_BACKEND_REQ);
        }
    }
    fe = vhost_user_frontend_new(&opts, &err);
    if (!fe || !vhost_user_frontend_start(fe, &err) ||
        !vhost_user_frontend_get_blk_config(fe, &cfg, &err)) {
        fprintf(stderr, "vb-io: %s: %s\n", argv[1], err->message);
        return 2;
    }
    buf = vhost_user_frontend_mem_alloc(fe, buf_size, 4096, &err);
    if (!buf) {
        fprintf(stderr, "vb-io: %s\n", err->message);
        return 2;
    }

    for (int i = 2; i < argc; i++) {
        g_autofree char *cmd = g_strdup(argv[i]);
        int want = vbio_expect(cmd);
        g_auto(GStrv) a = g_strsplit(cmd, ":", 4);
        guint n = g_strv_length(a);
        int st = VIRTIO_BLK_S_OK;
        bool data_ok = true;

        if (!strcmp(a[0], "write") || !strcmp(a[0], "read")) {
            bool in = a[0][0] == 'r';
            uint64_t sector, len;
            uint32_t seed;

            if (n < 3) {
                fprintf(stderr, "vb-io: %s: use %s:SECTOR:BYTES[:SEED]\n",
                        argv[i], a[0]);
                return 2;
            }
            sector = vbio_num(a[1], "sector");
            len = vbio_num(a[2], "length");
            seed = n > 3 ? vbio_num(a[3], "seed") : 1;
            if (len > buf_size) {
                fprintf(stderr, "vb-io: %s: at most 64M\n", argv[i]);
                return 2;
            }
            if (in) {
                memset(buf, 0, len);
            } else {
                vb_fill_pattern(buf, len, seed);
            }
            st = vb_req(fe, 0, in ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT,
                        sector, buf, len, in, NULL);
            if (in && n > 3 && st == VIRTIO_BLK_S_OK) {
                data_ok = vb_check_pattern(buf, len, seed);
            }
        } else if (!strcmp(a[0], "flush")) {
            st = vb_req(fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false, NULL);
        } else if (!strcmp(a[0], "fill")) {
            uint64_t sector, len, chunks = 0;
            uint32_t seed;

            if (n < 3) {
                fprintf(stderr, "vb-io: %s: use fill:SECTOR:BYTES[:SEED]\n",
                        argv[i]);
                return 2;
            }
            sector = vbio_num(a[1], "sector");
            len = vbio_num(a[2], "length");
            seed = n > 3 ? vbio_num(a[3], "seed") : 1;
            if (len > buf_size || len % 512 || !len) {
                fprintf(stderr, "vb-io: %s: chunk must be 512..64M, whole "
                        "sectors\n", argv[i]);
                return 2;
            }
            for (; sector + len / 512 <= cfg.capacity;
                 sector += len / 512, chunks++) {
                vb_fill_pattern(buf, len, seed + chunks);
                st = vb_req(fe, 0, VIRTIO_BLK_T_OUT, sector, buf, len, false,
                            NULL);
                if (st != VIRTIO_BLK_S_OK) {
                    vbio_fail_sector = sector;
                    break;
                }
            }
            printf("fill: %" PRIu64 " chunk(s) of %" PRIu64 " bytes ok, "
                   "then %s at sector %" PRIu64 "\n", chunks, len,
                   st == VIRTIO_BLK_S_OK ? "end of disk" :
                   vbio_status_name(st), sector);
            /* a fill expects to stop on an error unless told otherwise */
            if (!strchr(argv[i], '=')) {
                want = VIRTIO_BLK_S_IOERR;
            }
        } else if (!strcmp(a[0], "unlink") && n >= 2) {
            g_autofree char *path = g_strjoinv(":", a + 1);

            if (unlink(path) < 0) {
                printf("%s: %s\n", argv[i], g_strerror(errno));
                failed = 1;
            } else {
                printf("%s: done\n", argv[i]);
            }
            continue;
        } else if (!strcmp(a[0], "waitcfg") && n == 2) {
            uint64_t want_bytes = vbio_num(a[1], "length");
            g_autoptr(GError) werr = NULL;
            int req = vhost_user_frontend_wait_backend_msg(fe, 60000, &werr);

            if (req != VHOST_USER_BACKEND_CONFIG_CHANGE_MSG ||
                !vhost_user_frontend_get_blk_config(fe, &cfg, &werr)) {
                printf("%s: %s\n", argv[i], werr ? werr->message :
                       "another back-end message came");
                failed = 1;
                continue;
            }
            printf("%s: capacity %" PRIu64 " sectors%s\n", argv[i],
                   (uint64_t)cfg.capacity,
                   cfg.capacity * 512 == want_bytes ? "" : " (UNEXPECTED)");
            if (cfg.capacity * 512 != want_bytes) {
                failed = 1;
            }
            continue;
        } else if (!strcmp(a[0], "ready")) {
            printf("ready\n");
            fflush(stdout);
            continue;
        } else if (!strcmp(a[0], "sleep") && n == 2) {
            g_usleep(vbio_num(a[1], "milliseconds") * 1000);
            continue;
        } else {
            fprintf(stderr, "vb-io: unknown command '%s'\n", argv[i]);
            return 2;
        }
        printf("%s: %s%s%s\n", argv[i], vbio_status_name(st),
               data_ok ? "" : ", DATA MISMATCH",
               (want >= 0 && st != want) ? " (UNEXPECTED)" : "");
        if (!data_ok || (want >= 0 && st != want)) {
            failed = 1;
        }
    }
    fflush(stdout);
    vhost_user_frontend_free(fe);
    return failed;
}
