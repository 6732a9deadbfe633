#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The man pages (docs/man) agree with the programs' --help: every long
# option that --help shows appears in the man page, and every option the
# man page defines (the item line after a .TP) appears in --help.  Also:
# --help carries no dated changelog text, and each man page's header has
# meson's project version.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM

version=$(sed -n "s/^ *version: '\([^']*\)',/\1/p" "$VB_ROOT/meson.build" | head -n1)

# help_opts FILE: the long options a --help text mentions, one per line.
help_opts() {
    grep -oE -- '(^|[^a-z0-9-])--[a-z][a-z0-9-]*' "$1" | sed 's/^[^-]*//' | sort -u
}
# man_defs FILE: the long options a man page defines (.TP item lines).
man_defs() {
    awk 'prev == ".TP" { print } { prev = $0 }' "$1" | sed 's/\\-/-/g' |
        grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}
# man_all FILE: every long option the man page mentions.
man_all() {
    sed 's/\\-/-/g' "$1" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

for pair in vhost-blkd:vhost-blkd.8 vhost-blk-ctl:vhost-blk-ctl.8 \
            vhost-blk-bench:vhost-blk-bench.1; do
    prog=${pair%%:*}
    man=$VB_ROOT/docs/man/${pair#*:}
    bin=$(vb_bin "$prog") || { vb_not_ok "$prog is built" "not in $VHOST_BLK_BUILD"; continue; }
    "$bin" --help > "$VB_TMP/$prog.help" 2>&1 ||
        vb_not_ok "$prog --help exits 0"
    help_opts "$VB_TMP/$prog.help" > "$VB_TMP/$prog.h"
    man_all "$man" > "$VB_TMP/$prog.mall"
    man_defs "$man" > "$VB_TMP/$prog.mdef"
    missing=$(comm -23 "$VB_TMP/$prog.h" "$VB_TMP/$prog.mall" | tr '\n' ' ')
    vb_check_eq "$prog: every long option in --help is in ${man##*/}" "$missing" ""
    extra=$(comm -13 "$VB_TMP/$prog.h" "$VB_TMP/$prog.mdef" | tr '\n' ' ')
    vb_check_eq "$prog: every option ${man##*/} defines is in --help" "$extra" ""
    vb_check "$prog: --help has no dated changelog text" \
        sh -c "! grep -nE '(19|20)[0-9][0-9]-[01][0-9]-[0-3][0-9]|before [0-9]' '$VB_TMP/$prog.help'"
    vb_check "${man##*/}: its header says vhost-blk $version" \
        grep -q "^\.TH .*\"vhost-blk $version\"" "$man"
done

vb_done
