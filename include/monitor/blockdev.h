/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Named nodes (monitor/blockdev.c): blockdev-add / --blockdev, and the
 * legacy --export socket=...,file=... syntax's node.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_BLOCKDEV_H
#define MONITOR_BLOCKDEV_H

#include "monitor/state.h"
#include "block/block.h"

/* blockdev-add / --blockdev. */
VbNode *vb_blockdev_add(VbState *s, JsonObject *args, bool keyval,
                        GError **errp);
/* The legacy syntax: a node named @name opened with @opts, whose
 * exports treat a discard as @discard says. */
VbNode *vb_node_open(VbState *s, const char *name, const BlockOptions *opts,
                     BlockDiscardMode discard, GError **errp);
/* The legacy syntax's format=qcow2: a format node @name opened with
 * @opts over @file, a node opened before (it stays open, below). */
VbNode *vb_node_open_format(VbState *s, const char *name, VbNode *file,
                            const BlockOptions *opts,
                            BlockDiscardMode discard, GError **errp);

#endif
