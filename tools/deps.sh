# SPDX-License-Identifier: GPL-2.0-or-later
# Sourced by tools/demo and tools/test: install the Debian 12 packages that
# are missing (apt-get only when something is), load the fuse and loop
# modules if their devices are absent.

# libnbd-dev: the NBD device layer (io_engine=nbd); libnbd-bin: nbdfuse,
# which -o fsck runs e2fsck through on an NBD export, and nbdcopy; nbdkit:
# the servers of test_nbd and bench/peers -d nbd. gdb: the tests print a
# hung daemon's backtraces. ceph-mon ceph-mgr ceph-osd ceph-common: the
# throwaway cluster of tools/ceph-dev (test_rbd); librbd-dev: rbd: devices.
WBCFS_PKGS=(build-essential meson ninja-build pkg-config libfuse3-dev fuse3
	liburing-dev libaio-dev libext2fs-dev comerr-dev check e2fsprogs dbench
	util-linux mount python3 attr acl gnuplot-nox gdb libnbd-dev libnbd-bin nbdkit
	ceph-mon ceph-mgr ceph-osd ceph-common librbd-dev)

wbcfs_install_deps() {
	local missing=() p
	for p in "${WBCFS_PKGS[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	if ((${#missing[@]})); then
		echo "installing: ${missing[*]}"
		if [[ $EUID -ne 0 ]]; then
			echo "error: packages missing and not root: ${missing[*]}" >&2
			return 1
		fi
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q || return 1
		# no service may start at install (the ceph daemons would, on a
		# machine with an init that runs them): a policy-rc.d refuses
		local guard=""
		if [[ ! -e /usr/sbin/policy-rc.d ]]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d &&
				chmod 755 /usr/sbin/policy-rc.d && guard=1
		fi
		apt-get install -y -q --no-install-recommends "${missing[@]}" \
			</dev/null
		local rc=$?
		[[ -z $guard ]] || rm -f /usr/sbin/policy-rc.d
		((rc == 0)) || return 1
	fi
	[[ -e /dev/fuse ]] || modprobe fuse 2>/dev/null || true
	[[ -e /dev/loop-control ]] || modprobe loop 2>/dev/null || true
	return 0
}
