# SPDX-License-Identifier: GPL-2.0-or-later
# vb_deb_build: build the Debian package of this tree once per tree content
# and print the .deb's path; for tests/functional/test-deb.sh and
# test-systemd-guest.sh.  Source it after lib.sh.
#
# The package is built with dpkg-buildpackage -b (no tests inside) from a
# copy of the files git tracks, as they are in the work tree (edits
# included), and kept in $VHOST_BLK_CACHE/deb/<hash of those files>: the
# second test of a run, or a rerun on an unchanged tree, takes the same
# .deb instead of spending minutes building it again.  flock serialises
# builders.  The build log is left beside the .deb (build.log).

vb_deb_build() {
    local cache=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}/deb key dir work deb
    if git -C "$VB_ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
        key=$( (cd "$VB_ROOT" && git ls-files -z | xargs -0 sha256sum 2>/dev/null) |
               sha256sum | cut -c1-16)
    else
        key=$( (cd "$VB_ROOT" && find . -path './build*' -prune -o -path './obj-*' -prune \
                    -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
               sha256sum | cut -c1-16)
    fi
    dir=$cache/$key
    mkdir -p "$cache" || return 1
    (
        flock 9
        if [ -f "$dir/.complete" ]; then
            exit 0
        fi
        work=$(mktemp -d "$cache/.work.XXXXXX") || exit 1
        mkdir -p "$work/vhost-blk"
        if git -C "$VB_ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
            (cd "$VB_ROOT" && git ls-files -z | tar --null -cf - -T -)
        else
            (cd "$VB_ROOT" && tar --exclude='./build*' --exclude='./obj-*' -cf - .)
        fi | tar -xf - -C "$work/vhost-blk" || { rm -rf "$work"; exit 1; }
        echo "# dpkg-buildpackage -b -us -uc (tree $key)" >&2
        if ! (cd "$work/vhost-blk" && DEB_BUILD_OPTIONS="nocheck parallel=2" \
                dpkg-buildpackage -b -us -uc > ../build.log 2>&1); then
            tail -n 30 "$work/build.log" | sed 's/^/#   /' >&2
            rm -rf "$work"
            exit 1
        fi
        rm -rf "$work/vhost-blk" "$work"/*-dbgsym_*.deb
        touch "$work/.complete"
        rm -rf "$dir"
        mv "$work" "$dir"
        # Keep the 3 newest trees' packages.
        ls -dt "$cache"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
    ) 9> "$cache/.lock" || return 1
    deb=$(ls "$dir"/vhost-blk_*_*.deb 2>/dev/null | head -n1)
    [ -f "$deb" ] || return 1
    echo "$deb"
}
