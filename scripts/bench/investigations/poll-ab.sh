#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Moved to scripts/bench/poll-ab.sh (its cells are named there: see
# --help); this path stays for the commands in docs/bench/archive/.
exec "$(dirname "$0")/../poll-ab.sh" "$@"
