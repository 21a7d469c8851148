#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""dd of random data with 1 MiB and 4 KiB blocks, conv=fsync; checksums
through the mount, then after unmount through the kernel's ext4; e2fsck.

    WBCFS_BIN=build/wbcfs test/integration/test_dd.py [--kernel]
"""

import hashlib
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TSkip, t_eq, t_log, t_main, t_manifest,  # noqa: E402
                    t_run, t_sha256_file, t_step)

CASES = (("big-1M", "1M", 512), ("small-4k", "4k", 65536))


def dd_speed(out):
    m = re.search(r"copied, ([0-9.]+) s, ([0-9.,]+ [kMG]?B/s)", out)
    return m.group(2) if m else "?"


def body(env):
    if shutil.which("dd") is None:
        raise TSkip("dd not installed")
    src_dir = env.shm_dir("src")
    src = os.path.join(src_dir, "random.bin")
    t_step("random source file of 512 MiB on tmpfs")
    with open(src, "wb") as f:
        for _ in range(512):
            f.write(os.urandom(MIB))
    want = t_sha256_file(src)
    h = hashlib.sha256()
    with open(src, "rb") as f:
        for _ in range(256):
            h.update(f.read(MIB))
    want_256 = h.hexdigest()
    dev = env.new_fs(2 * GIB)
    m = env.mount(dev)
    sums = {}
    for name, bs, count in CASES:
        t_step("dd bs=%s count=%d conv=fsync" % (bs, count))
        dst = os.path.join(m.mnt, name)
        p = t_run(["dd", "if=" + src, "of=" + dst, "bs=" + bs,
                   "count=%d" % count, "conv=fsync"], timeout=600)
        t_log("dd bs=%s: %s" % (bs, dd_speed(p.stdout)))
        t_eq(os.stat(dst).st_size, 512 * MIB if bs == "1M" else 256 * MIB,
             "size of " + name)
        sums[name] = t_sha256_file(dst)
    t_step("checksums through the mount")
    t_eq(sums["big-1M"], want, "sha256 of big-1M")
    t_eq(sums["small-4k"], want_256, "sha256 of small-4k")
    t_step("read back with dd bs=1M ")
    p = t_run(["dd", "if=" + os.path.join(m.mnt, "big-1M"), "of=/dev/null",
               "bs=1M"], timeout=600)
    t_log("read: %s" % dd_speed(p.stdout))
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)
    t_step("sha256 through the kernel's ext4")
    k = env.kernel_ro(dev)
    try:
        t_eq(t_sha256_file(os.path.join(k.mnt, "big-1M")), want,
             "kernel sha256 of big-1M")
        t_eq(t_sha256_file(os.path.join(k.mnt, "small-4k")), want_256,
             "kernel sha256 of small-4k")
    finally:
        env.umount(k)


if __name__ == "__main__":
    t_main("dd", body, deadline_s=420)
