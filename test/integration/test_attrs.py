#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Inode attributes as the kernel's ext4 keeps them: sizes, modes, owners
and times that two paths write (libext2fs and wbcfs's in-memory inode).

(a) Directories of 300, 3000 and 30000 entries, grown while chmod, chown
    and utime change them: stat through the mount shows the size the
    directory has on disk (e2fsck -fn clean, the kernel's ext4 mounting
    the device read-only sees the same size), and the last mode, owner
    and times set.

    WBCFS_BIN=build/wbcfs test/integration/test_attrs.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, t_check, t_eq, t_log, t_main,  # noqa: E402
                    t_step)

NAME = "file_with_a_longish_name_%d"
UID, GID = 1000, 1000


def attrs_of(st):
    return {"size": st.st_size, "mode": st.st_mode, "uid": st.st_uid,
            "gid": st.st_gid, "mtime_ns": st.st_mtime_ns,
            "atime_ns": st.st_atime_ns}


def grow_dirs(mnt):
    """(a): big directories grown around chmod/chown/utime; {name: attrs}."""
    seen = {}
    for n in (300, 3000, 30000):
        d = os.path.join(mnt, "d%d" % n)
        t_step("a directory grown to %d entries keeps its size, mode, owner, times"
               % n)
        os.mkdir(d, 0o700)
        step = max(n // 8, 1)
        for i in range(n):
            os.mknod(os.path.join(d, NAME % i), 0o600)
            if i % step == step - 1:
                k = i // step
                os.chmod(d, 0o700 | (k % 8) << 3)
                os.chown(d, UID + k, GID + k)
                os.utime(d, ns=(10**18 + k, 10**18 + 2 * k))
        st = os.stat(d)
        blocks = st.st_size // 4096
        t_check(blocks > 1, "%s: %d entries in a %d-byte directory"
                % (d, n, st.st_size))
        t_eq(len(os.listdir(d)), n, "%s entries" % d)
        # the final state: the last of each change wins
        os.chmod(d, 0o755)
        os.chown(d, UID, GID)
        os.utime(d, ns=(1500000000123456789, 1600000000987654321))
        st = os.stat(d)
        t_eq(st.st_mode & 0o7777, 0o755, "%s mode" % d)
        t_eq((st.st_uid, st.st_gid), (UID, GID), "%s owner" % d)
        t_eq(st.st_mtime_ns, 1600000000987654321, "%s mtime" % d)
        t_eq(st.st_atime_ns, 1500000000123456789, "%s atime" % d)
        t_check(st.st_size >= blocks * 4096,
                "%s: size %d after chmod/chown/utime, %d before"
                % (d, st.st_size, blocks * 4096))
        seen[os.path.basename(d)] = attrs_of(st)
        t_log("%s: %d entries, %d bytes" % (d, n, st.st_size))
    return seen


def body(env):
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, ["cache_size=64M"])
    seen = grow_dirs(m.mnt)
    env.umount(m)
    env.fsck(dev)
    t_step("the kernel's ext4 (ro) sees the sizes, modes, owners and times")
    k = env.kernel_ro(dev)
    try:
        for name, want in seen.items():
            got = attrs_of(os.stat(os.path.join(k.mnt, name)))
            t_eq(got, want, "kernel ext4: %s" % name)
    finally:
        env.umount(k)


if __name__ == "__main__":
    t_main("attrs", body, deadline_s=300)
