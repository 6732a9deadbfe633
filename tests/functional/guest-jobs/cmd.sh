# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: run one shell command line (sourced by /init); for debugging
# and one-off checks.  Kernel command-line words cannot hold spaces, so
# '+' in vbcmd stands for a space:
#   vbcmd=ls+-l+/sys/block/vda    passes if the command exits 0
[ -n "${vbcmd:-}" ] || vb_fail "vbcmd= is not set"
c=$(echo "$vbcmd" | tr '+' ' ')
vb_log "sh -c '$c'"
sh -c "$c" || vb_fail "command '$c' exited with status $?"
return 0
