#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Install every Debian package that vhost-blk's build, tests and benchmarks
# need.  Idempotent: when everything is present it prints nothing and
# exits 0.  Must run as root (or with sudo available) on Debian 12.
set -euo pipefail

PKGS=(
    # build
    gcc pkg-config meson ninja-build libglib2.0-dev liburing-dev libaio-dev
    libjson-glib-dev libseccomp-dev libpcre2-dev
    libmicrohttpd-dev   # vhost-blkd --metrics (Prometheus endpoint)
    zlib1g-dev libzstd-dev  # qcow2 compressed clusters (block/qcow2-format.c)
    libgnutls28-dev     # TLS of the NBD server (nbd/tls.c)
    # tests and the guest harness
    qemu-system-x86 qemu-utils qemu-system-data seabios ipxe-qemu fio busybox-static
    cpio zstd xz-utils kmod dpkg-dev util-linux e2fsprogs strace
    python3     # QMP client of tests/functional/test-migration.sh
    # NBD clients we did not write, and certificates for the TLS cases
    # (tests/integration/test-nbd-server.py); an NBD server we did not
    # write either, with filters that take commands away (its nozero
    # case)
    libnbd-bin gnutls-bin nbdkit
    # promtool and a Prometheus server for tests/functional/test-metrics.sh;
    # the tests run their own instance (own config, data dir and port) and
    # neither use nor disturb a system prometheus service
    prometheus
    # guest assets (scripts/guest/build-assets.sh): kernel unpacking, static fio
    lz4 gzip binutils make zlib1g-dev apt
    libvirt-clients libvirt-daemon libvirt-daemon-system libxml2-utils
    # sanitizer and fuzz builds
    clang libclang-rt-14-dev
    # the patched QEMU (scripts/build-qemu.sh)
    ccache libpixman-1-dev libfdt-dev dpkg-dev
    # the Debian package (debian/, tests/functional/test-deb.sh)
    debhelper lintian
    # the systemd guest (scripts/guest/build-systemd-image.sh)
    debootstrap
    # benchmarks
    valgrind gnuplot-nox procps
    genisoimage  # seed-table.sh --cloud-image: the NoCloud "cidata" seed
    # Ceph RBD: librbd for block/rbd.c, a single-node test cluster
    # (scripts/ceph-cluster.sh: ceph-mon, ceph-osd, the ceph/rbd/rados CLIs),
    # QEMU's rbd block driver for the qemu-storage-daemon comparisons and
    # fio (above) whose Debian build has ioengine=rbd
    librbd-dev ceph-mon ceph-osd ceph-common qemu-block-extra iproute2
    # the NBD client driver (block/nbd.c) on libnbd; its tests use
    # qemu-nbd (qemu-utils, above) as the server, openssl to make the
    # TLS test's certificates; nbdinfo to inspect by hand
    libnbd-dev libnbd-bin openssl
)

missing=()
for p in "${PKGS[@]}"; do
    # grep -x, not -q: with pipefail an early exit could SIGPIPE dpkg-query
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
        grep -x 'install ok installed' > /dev/null || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
    SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# An old or absent package list makes apt-get install fail: refresh it once.
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
