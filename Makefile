# SPDX-License-Identifier: GPL-2.0-or-later
# Convenience targets; the build itself is meson (./configure && ninja -C build).
BUILD ?= build

.PHONY: all deps check check-unit check-asan demo bench qemu clean

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)

$(BUILD)/build.ninja:
	./configure --builddir=$(BUILD)

deps:
	scripts/install-deps.sh

check:
	scripts/check.sh --builddir $(BUILD)

check-unit: all
	meson test -C $(BUILD) --suite unit --suite integration

check-asan:
	scripts/check.sh --builddir build-asan --sanitizers --no-guest

demo:
	scripts/demo.sh

bench:
	scripts/bench/compare.sh

bench-engines:
	scripts/bench/investigations/engines.sh

# The patched QEMU with -device vhost-pci-blk-pci (build/qemu/).
qemu:
	scripts/build-qemu.sh

clean:
	rm -rf $(BUILD) build-asan
