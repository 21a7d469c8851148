#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The cache's size at run time, on a fresh 1 GiB loop device mounted with
default options (no cache_size: the cache grows on demand up to its
default ceiling, prefault=0).

1. Idle: the daemon's VmRSS is under 256 MiB right after mount; vmstat's
   cache_target_pages, cache_ceiling_pages and nr_cache_pages agree, and
   cache_resident_pages is far below the ceiling.
2. 400 MiB written and synced (the cache holds them clean); VmRSS grew.
3. `64M > /.wbcfs/cache_size`: cache_size reads 67108864, the target
   follows it; cache_resident_pages falls to the target or below
   (polled, generous timeout), pgreturned counts at least the pages given
   back, VmRSS dropped by at least 200 MiB, and the trace holds a cache
   record with target=16384 reason=ceiling.  Bad writes are refused with
   EINVAL and change nothing (cache_min below 4M or above cache_size,
   cache_size below cache_min, garbage).
4. The file reads back intact (sha256) through the 64 MiB cache.
5. The ceiling raised back: the target follows it, the file reads back
   intact again, and the cache grew again (resident above 64 MiB,
   pgregrown moved).
Ends with e2fsck -fn.  Asserts states, not speeds (the time the shrink
took is logged).  Runs once, with the default io engine.

    WBCFS_BIN=build/wbcfs test/integration/test_elastic.py
"""

import errno
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TSkip, t_check, t_eq, t_errno,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_step, t_write_all)

FILE_MB = 400


def ctl_path(m, f):
    return os.path.join(m.mnt, ".wbcfs", f)


def vmstat(m):
    with open(ctl_path(m, "vmstat")) as f:
        return {k: int(v) for k, v in (ln.split() for ln in f.read().splitlines())}


def ctl_get(m, f):
    with open(ctl_path(m, f)) as f_:
        return int(f_.read())


def ctl_put(m, f, data):
    fd = os.open(ctl_path(m, f), os.O_WRONLY | os.O_TRUNC)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def trace_text(m):
    """Everything the trace has buffered, without blocking."""
    fd = os.open(ctl_path(m, "trace"), os.O_RDONLY | os.O_NONBLOCK)
    out = b""
    try:
        while True:
            try:
                b = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not b:
                break
            out += b
    finally:
        os.close(fd)
    return out.decode()


def write_file(path, mb):
    h = hashlib.sha256()
    seed = os.urandom(1 * MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(mb):
            chunk = i.to_bytes(8, "little") + seed[8:]
            t_write_all(fd, chunk)
            h.update(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return h.hexdigest()


def read_hash(path):
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        # the kernel's copy goes: the reads reach the daemon's cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while True:
            b = os.read(fd, 4 * MIB)
            if not b:
                break
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()


def wait_resident_at_target(m, timeout=120):
    t0 = time.monotonic()
    while True:
        v = vmstat(m)
        if v["cache_resident_pages"] <= v["cache_target_pages"]:
            return v, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError("resident %d pages still above the target %d after %d s"
                                 % (v["cache_resident_pages"], v["cache_target_pages"],
                                    timeout))
        time.sleep(0.05)


def body(env):
    if t_is_kernel():
        raise TSkip("the cache's size is wbcfs's own")
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, [])
    t_check(m.pid, "no daemon pid")

    t_step("1. idle: a default mount is small")
    time.sleep(0.5)
    rss0 = vm_rss_kb(m.pid)
    v = vmstat(m)
    t_log("idle default mount: VmRSS %d kB; ceiling %d pages, target %d, resident %d"
          % (rss0, v["cache_ceiling_pages"], v["cache_target_pages"],
             v["cache_resident_pages"]))
    t_check(rss0 < 256 * 1024, "idle VmRSS %d kB is not under 256 MiB" % rss0)
    t_eq(v["cache_target_pages"], v["cache_ceiling_pages"], "target of a fresh mount")
    t_eq(v["nr_cache_pages"], v["cache_ceiling_pages"], "nr_cache_pages is the ceiling")
    t_check(v["cache_resident_pages"] < v["cache_ceiling_pages"] // 4,
            "resident %d of %d pages at mount" % (v["cache_resident_pages"],
                                                  v["cache_ceiling_pages"]))
    ceiling = ctl_get(m, "cache_size")
    t_eq(ceiling, v["cache_ceiling_pages"] * 4096, "cache_size in bytes")
    t_check(ctl_get(m, "cache_min") <= ceiling, "cache_min above cache_size")

    t_step("2. %d MiB written and synced" % FILE_MB)
    path = os.path.join(m.mnt, "big")
    want = write_file(path, FILE_MB)
    v1 = vmstat(m)
    rss1 = vm_rss_kb(m.pid)
    t_log("after the write: VmRSS %d kB, resident %d pages, dirty %d"
          % (rss1, v1["cache_resident_pages"], v1["nr_dirty"]))
    t_check(v1["cache_resident_pages"] >= FILE_MB * 256 * 3 // 4,
            "resident %d pages after writing %d MiB" % (v1["cache_resident_pages"], FILE_MB))
    t_check(rss1 > rss0 + FILE_MB * 1024 // 2, "VmRSS %d kB did not grow" % rss1)

    t_step("3. 64M > cache_size: the pages go back")
    t_errno(errno.EINVAL, ctl_put, m, "cache_min", b"1M\n", what="cache_min=1M")
    t_errno(errno.EINVAL, ctl_put, m, "cache_size", b"lots\n", what="cache_size=lots")
    t_errno(errno.EINVAL, ctl_put, m, "cache_min", b"%d\n" % (ceiling + 4096),
            what="cache_min above cache_size")
    t_eq(ctl_get(m, "cache_size"), ceiling, "cache_size after refused writes")
    t_eq(ctl_put(m, "cache_min", b"32M\n"), 4, "write 32M to cache_min")
    t_eq(ctl_get(m, "cache_min"), 32 * MIB, "cache_min")
    t_errno(errno.EINVAL, ctl_put, m, "cache_size", b"16M\n", what="cache_size below cache_min")
    t_eq(ctl_put(m, "cache_size", b"64M\n"), 4, "write 64M to cache_size")
    t_eq(ctl_get(m, "cache_size"), 64 * MIB, "cache_size read back")
    v2, secs = wait_resident_at_target(m)
    time.sleep(0.2)
    rss2 = vm_rss_kb(m.pid)
    t_log("shrink to 64M: resident %d -> %d pages in %.2f s (polled), pgreturned %d, "
          "VmRSS %d -> %d kB"
          % (v1["cache_resident_pages"], v2["cache_resident_pages"], secs, v2["pgreturned"],
             rss1, rss2))
    t_eq(v2["cache_target_pages"], 16384, "target after cache_size=64M")
    t_eq(v2["cache_ceiling_pages"], 16384, "ceiling after cache_size=64M")
    t_check(v2["pgreturned"] >= v1["cache_resident_pages"] - 16384 - v1["pgreturned"],
            "pgreturned %d" % v2["pgreturned"])
    t_check(v2["cache_target_changes"] > v1["cache_target_changes"], "cache_target_changes")
    t_check(rss2 < rss1 - 200 * 1024, "VmRSS %d kB did not drop from %d kB" % (rss2, rss1))
    t_check(v2["nr_dirty_threshold"] <= 16384 * 20 // 100 + 1,
            "dirty threshold %d above 20%% of the target" % v2["nr_dirty_threshold"])
    tr = [ln for ln in trace_text(m).splitlines() if " cache " in ln]
    t_check(any("target=16384 " in ln and "reason=ceiling" in ln for ln in tr),
            "no cache trace record of the shrink: %r" % tr[-5:])

    t_step("4. the file reads back intact through the 64 MiB cache")
    t_eq(read_hash(path), want, "sha256 of the file at 64M")
    v3 = vmstat(m)
    t_check(v3["cache_resident_pages"] <= 16384 + 512,
            "resident %d pages after reading at 64M" % v3["cache_resident_pages"])

    t_step("5. the ceiling raised back: the cache grows again")
    t_eq(ctl_put(m, "cache_size", b"%d\n" % ceiling), len(b"%d\n" % ceiling),
         "write the old cache_size")
    v4 = vmstat(m)
    t_eq(v4["cache_target_pages"], ceiling // 4096, "target follows the ceiling up")
    t_eq(read_hash(path), want, "sha256 of the file after regrowing")
    v5 = vmstat(m)
    t_check(v5["cache_resident_pages"] > 16384 + 8192,
            "resident %d pages after re-reading" % v5["cache_resident_pages"])
    t_check(v5["pgregrown"] > v3["pgregrown"], "pgregrown did not move")
    t_log("regrown: resident %d pages, pgregrown %d, VmRSS %d kB"
          % (v5["cache_resident_pages"], v5["pgregrown"], vm_rss_kb(m.pid)))
    env.umount(m)
    env.fsck(dev)


if __name__ == "__main__":
    t_main("elastic", body, deadline_s=280)
