#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""dd of random data with 1 MiB and 4 KiB blocks, conv=fsync; checksums
through the mount, then after unmount through the kernel's ext4; e2fsck.
Then readahead, on a fresh mount (cold cache): a sequential read of the
1 MiB file has its windows read by the readahead threads (vmstat
nr_ra_async) and reads back intact, with windows of 4 MiB
(readahead_kb=4096, larger than one device read) as with the default
(the device's read_ahead_kb, when readahead_kb is not given); the 4 KiB
file is truncated to 40 MiB while it is read sequentially past 32 MiB
(with readahead in flight), the reader sees its data up to 40 MiB and
then the end, and extended again it reads zeros from 40 MiB (no page
read ahead survives the truncation);
the 1 MiB file, unlinked while open and closed 8 MiB into a read, has its
512 MiB freed (its last reference may be a readahead job's); e2fsck clean
and the kernel's ext4 sees the same.

    WBCFS_BIN=build/wbcfs test/integration/test_dd.py [--kernel]
"""

import hashlib
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wbtrace  # noqa: E402
from wbtest import (GIB, MIB, TSkip, t_check, t_eq, t_log, t_main, t_manifest,  # noqa: E402
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
    readahead(env, dev, src)


def readahead(env, dev, src):
    # a window larger than one device read (1 MiB) is read in parts, and
    # its marker page still starts the next one: asynchronous windows
    t_step("cold sequential read with readahead_kb=4096: windows past 1 MiB read ahead")
    m = env.mount(dev, opts=("readahead_kb=4096",))
    before = wbtrace.vmstat(m.mnt).get("nr_ra_async", 0)
    t_eq(t_sha256_file(os.path.join(m.mnt, "big-1M")), t_sha256_file(src),
         "sha256 of big-1M read cold, readahead_kb=4096")
    got = wbtrace.vmstat(m.mnt).get("nr_ra_async", 0) - before
    with open(os.path.join(m.mnt, ".wbcfs", "readahead_kb")) as f:
        t_eq(int(f.read()), 4096, "/.wbcfs/readahead_kb as given")
    t_log("readahead parts read asynchronously: %d" % got)
    t_check(got >= 64, "at least 64 parts of 512 MiB read by the readahead threads: %d" % got)
    env.umount(m)

    m = env.mount(dev)
    t_step("readahead_kb not given: the device's read_ahead_kb")
    want_kb = 128
    if os.path.basename(dev).startswith("loop"):
        with open("/sys/block/%s/queue/read_ahead_kb" % os.path.basename(dev)) as f:
            want_kb = min(65536, int(f.read()) // 4 * 4)
    with open(os.path.join(m.mnt, ".wbcfs", "readahead_kb")) as f:
        t_eq(int(f.read()), want_kb, "/.wbcfs/readahead_kb of a default mount")
    t_step("cold sequential read: windows read by the readahead threads")
    before = wbtrace.vmstat(m.mnt).get("nr_ra_async", 0)
    t_eq(t_sha256_file(os.path.join(m.mnt, "big-1M")), t_sha256_file(src),
         "sha256 of big-1M read cold")
    got = wbtrace.vmstat(m.mnt).get("nr_ra_async", 0) - before
    t_log("readahead windows read asynchronously: %d" % got)
    t_check(got > 0, "vmstat nr_ra_async grew during a cold sequential read")

    t_step("truncate to 40 MiB during a sequential read past 32 MiB")
    small = os.path.join(m.mnt, "small-4k")
    with open(src, "rb") as f:
        want = f.read(40 * MIB)
    data = bytearray()
    fd = os.open(small, os.O_RDONLY)
    try:
        while len(data) < 32 * MIB:
            data += os.read(fd, MIB)
        os.truncate(small, 40 * MIB)
        while True:
            b = os.read(fd, MIB)
            if not b:
                break
            data += b
    finally:
        os.close(fd)
    t_eq(len(data), 40 * MIB, "bytes read across the truncation")
    t_check(bytes(data) == want, "what was read matches the source up to 40 MiB")
    t_step("extended to 64 MiB: zeros from 40 MiB")
    os.truncate(small, 64 * MIB)
    with open(small, "rb") as f:
        t_check(f.read(40 * MIB) == want, "the first 40 MiB unchanged")
        t_check(f.read() == bytes(24 * MIB), "24 MiB of zeros after the old end")

    t_step("unlinked, read, closed with readahead in flight: its blocks are freed")
    big = os.path.join(m.mnt, "big-1M")
    st = os.statvfs(m.mnt)
    free0 = st.f_bfree * st.f_frsize
    fd = os.open(big, os.O_RDONLY)
    os.unlink(big)
    try:
        for _ in range(8):
            os.read(fd, MIB)
    finally:
        os.close(fd)
    # the last reference may be a readahead job's: the inode goes with it
    for _ in range(100):
        st = os.statvfs(m.mnt)
        if st.f_bfree * st.f_frsize - free0 >= 500 * MIB:
            break
        time.sleep(0.1)
    t_check(st.f_bfree * st.f_frsize - free0 >= 500 * MIB,
            "512 MiB freed: %d MiB" % ((st.f_bfree * st.f_frsize - free0) // MIB))
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


if __name__ == "__main__":
    t_main("dd", body, deadline_s=420)
