#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Stores through a shared mapping beside pwrite(2) into the same pages.

xfstests' holetest -w (generic/346): on a file sized with ftruncate, one
thread pwrites a marker at offset 0 of every page while another stores its
own at offset 8 of every page through a MAP_SHARED mapping
(test/integration/mmap_pwrite.c). Afterwards every page must hold both
markers, through the mapping, with pread(2), and again after msync. The
kernel holds the mapped pages, wbcfs its own copy; neither copy may
overwrite the other's bytes (a whole-page writeback of the kernel's page
carrying the old bytes of the pwrite, or an invalidation laundering such a
page). WBCFS_MMAP_PWRITE_RUNS runs (default 200) of
WBCFS_MMAP_PWRITE_PAGES pages (default 256), in WBCFS_MMAP_PWRITE_PROCS
processes (default 4) on as many files at once, so that faults, pwrites
and writebacks of different files overlap; every other one also starts
writeback of its file's dirty pages over and over while it runs (sync_file_range), so that the kernel's writeback of a page
meets the pwrite into it (WBCFS_MMAP_PWRITE_FLUSH_ALL: all of them).

Before the fix, over FUSE io_uring about half of the runs lost a marker;
over /dev/fuse about one in 300.

Every worker pauses 300 us between the kernel's copy of a request and
serving it (take_delay_us), as a worker preempted there would: a
writeback copied out before a pwrite's store into the kernel's page, and
served after that pwrite was answered, must still leave the pwrite's
bytes alone. Before the writeback counted from the copy (kstore_before_copy),
every run with that pause lost a marker, over io_uring and /dev/fuse
alike; without it, about one in 30.

After unmount, e2fsck -fn must be clean and the kernel's ext4 must see the
last run's bytes.

    WBCFS_BIN=build/wbcfs test/integration/test_mmap_pwrite.py [--kernel]
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, TFail, t_is_kernel, t_log, t_main, t_manifest,  # noqa: E402
                    t_step)

RUNS = int(os.environ.get("WBCFS_MMAP_PWRITE_RUNS", "200"))
PAGES = int(os.environ.get("WBCFS_MMAP_PWRITE_PAGES", "256"))
PROCS = int(os.environ.get("WBCFS_MMAP_PWRITE_PROCS", "4"))


def prog():
    p = os.environ.get("WBCFS_MMAP_PWRITE") or os.path.join(
        os.path.dirname(os.path.abspath(os.environ.get("WBCFS_BIN", "build/wbcfs"))),
        "test", "integration", "mmap_pwrite")
    if not os.access(p, os.X_OK):
        raise TFail("%s not built (meson compile builds it)" % p)
    return p


def body(env):
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, opts=("cache_size=256M", "take_delay_us=300"))
    t_step("%d processes, each %d runs of %d pages: pwrite and mmap stores "
           "into the same pages" % (PROCS, RUNS // PROCS, PAGES))
    procs = [subprocess.Popen([prog(), os.path.join(m.mnt, "f%d" % i), str(PAGES),
                               str(max(1, RUNS // PROCS))] + (["flush"] if i % 2 or os.environ.get("WBCFS_MMAP_PWRITE_FLUSH_ALL") else []),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True) for i in range(PROCS)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    bad = []
    for i, (p, out) in enumerate(zip(procs, outs)):
        lines = out.strip().splitlines()
        t_log("f%d: %s" % (i, lines[-1] if lines else "(no output)"))
        if p.returncode:
            bad.append("f%d (exit %d):\n%s" % (i, p.returncode, "\n".join(lines[-12:])))
    if bad:
        if not t_is_kernel():
            # which ordering rule met the lost marker: writebacks that kept
            # a write's bytes, and those older than a write the log forgot
            try:
                with open(os.path.join(m.mnt, ".wbcfs", "vmstat")) as f:
                    bad += [ln.strip() for ln in f if ln.startswith("nr_store_")]
            except OSError as e:
                bad.append("vmstat: %s" % e)
        raise TFail("markers lost or calls failed:\n" + "\n".join(bad))
    man = t_manifest(m.mnt)
    log = m.log
    env.umount(m)
    if not t_is_kernel():
        with open(log, errors="replace") as f:
            for line in f:
                if "nr_store_sent" in line:
                    t_log(line.strip())
    env.verify_after_umount(dev, man)


if __name__ == "__main__":
    t_main("mmap_pwrite", body, deadline_s=500)
