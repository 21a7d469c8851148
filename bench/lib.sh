# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash disable=SC2034  # its globals are the benches'
# bench/lib.sh: what the shell benches (peers, contention, autoda) share,
# sourced from the top of the tree: long options, the build, one loop
# device and mount point under a temporary directory undone on exit, the
# wait for a mount's daemon, mkfs on a device just released, dbench, and
# the per-round figures with their medians and ratios. The Python benches
# share test/integration/wbbench.py instead.
#
# Globals a bench reads: TMP (the temporary directory), LOOP (its loop
# device), WBCFS (the daemon built), PID (the daemon of the mount at
# $TMP/m, while mounted), SRC (what that mount was made from, when not
# $LOOP), SECS (dbench's seconds), DB_WRAP (a command dbench runs under).

# bench_args LONG=S... -- ARGS...: ARGS in BENCH_ARGS with --LONG made -S,
# and, for a LONG=S: (an option with a value), --LONG=VALUE made -S VALUE,
# for getopts. Then: set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
bench_args() {
	local -A short=()
	local a o
	while [[ $1 != -- ]]; do
		short[${1%%=*}]=${1#*=}
		shift
	done
	shift
	BENCH_ARGS=()
	for a; do
		o=${a#--}
		o=${o%%=*}
		if [[ $a == --$o && -n ${short[$o]:-} ]]; then
			BENCH_ARGS+=("-${short[$o]%:}")
		elif [[ $a == --$o=* && ${short[$o]:-} == ?: ]]; then
			BENCH_ARGS+=("-${short[$o]%:}" "${a#*=}")
		else
			BENCH_ARGS+=("$a")
		fi
	done
}

# SYSTEMS is ,a,b,c, (set by the bench): is $1 one of them?
on() { [[ $SYSTEMS == *,$1,* ]]; }

# The daemon, built now (WBCFS).
bench_build() {
	{ [[ -d build ]] || meson setup build >/dev/null; } && meson compile -C build >/dev/null || exit 1
	WBCFS=$PWD/build/wbcfs
}

# bench_setup NAME SIZE: TMP=/tmp/wbcfs-NAME.XXXXXX with the mount point
# m and a sparse image of SIZE (truncate -s) behind LOOP, all undone on
# exit. A bench may define bench_on_exit (run first: what it started
# beside the mount) and bench_on_exit_device (run once the daemon has
# exited, before the loop device goes: what else holds it).
bench_setup() {
	TMP=$(mktemp -d "/tmp/wbcfs-$1.XXXXXX") LOOP='' PID=''
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir "$TMP/m"
	truncate -s "$2" "$TMP/img"
	LOOP=$(losetup --direct-io=on --find --show "$TMP/img") || exit 1
}

bench_cleanup() {
	[[ $(type -t bench_on_exit) == function ]] && bench_on_exit
	mountpoint -q "$TMP/m" && { umount "$TMP/m" 2>/dev/null || umount -l "$TMP/m"; }
	# the daemon holds the loop device until it exits
	[[ -n $PID ]] && kill "$PID" 2>/dev/null && wait_unmounted
	[[ $(type -t bench_on_exit_device) == function ]] && bench_on_exit_device
	[[ -n $LOOP ]] && losetup -d "$LOOP"
	rm -rf "$TMP"
}

# After a mount command: wait for $TMP/m, and PID is the daemon that
# serves it (none for the kernel's ext4), found by its command line.
wait_mounted() {
	local pat
	for _ in $(seq 100); do mountpoint -q "$TMP/m" && break; sleep 0.1; done
	pat=$(sed 's/[][\\.*^$?+(){}|]/\\&/g' <<<"${SRC:-$LOOP} $TMP/m")
	PID=$(pgrep -n -f "$pat" || true)
}
# After umount: the daemon has written everything back and exited.
wait_unmounted() { for _ in $(seq 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done; PID=''; }

# A device just unmounted can be held a moment longer (a mount namespace
# made meanwhile by another program on a shared machine, a udev probe):
# mkfs refuses a busy device, so try again for a while.
# lazy_itable_init=0: the kernel's ext4 would otherwise zero the inode
# tables from a background thread during its own measurements.
mkfs_retry() {	# mkfs.ext4 options...
	for _ in $(seq 40); do
		mkfs.ext4 -q -F -E lazy_itable_init=0 "$@" "$LOOP" 2>"$TMP/mkfs.err" && return 0
		sleep 0.5
	done
	cat "$TMP/mkfs.err" >&2
	return 1
}

# dbench CLIENTS [dbench options...] in $TMP/m for SECS seconds (under
# DB_WRAP, when set): prints its throughput, MB/s; its whole output stays
# in $TMP/dbench.out.
db() {
	local n=$1
	shift
	(cd "$TMP/m" && ${DB_WRAP[@]+"${DB_WRAP[@]}"} dbench "$@" -D "$TMP/m" -t "$SECS" \
		-c /usr/share/dbench/client.txt "$n" 2>&1) |
		tee "$TMP/dbench.out" | sed -n 's/^Throughput \([0-9.]*\) MB\/sec.*/\1/p'
}

# R[system,case]: that figure of every round, space-separated.
declare -A R
put() { [[ -n $3 ]] && R[$1,$2]+="$3 "; }
# The median of a system's figures for a case, or nothing.
get() {
	tr ' ' '\n' <<<"${R[$1,$2]:-}" | sed '/^$/d' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# a / b to two decimals, or - when either is missing or b is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }
