#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Cache zones: per-zone dirty limits and fair zone allocation, on a fresh
1 GiB loop device mounted with cache_size=128M,zones=16M:112M and
dirty_bytes=32M.  A 400 MiB file is written through the kernel's ext4
before wbcfs first mounts it.

(c) fair_zone_alloc=1: over a cold read of the 400 MiB file, zone 0 takes
    16/128 of the page allocations (pgalloc_zone0 / pgalloc within 5%,
    relative, of 0.125).  With fair_zone_alloc=0 (second mount) the share
    is logged, not checked.
(a) zone_dirty=1 (the cache full of the big file's clean pages): 4 writers
    write 100 MiB each of random data.  zoneinfo, sampled every 100 ms:
    zone 0's nr_dirty + nr_writeback never exceeds its dirty_limit by more
    than 64 pages + 1% while zone 1 had room (its own dirty + writeback
    under its dirty_limit); vmstat's nr_zone_dirty_skips moved.  After a
    remount every file has the sha256 of what was written.
(d) writing 0 and 1 to /.wbcfs/zone_dirty and /.wbcfs/fair_zone_alloc
    reads back; 2 gives EINVAL and changes nothing.  tools/wbcfs-stat -z
    prints a column group per zone.
(b) zone_dirty=0, fair_zone_alloc=0 (second mount): the same writes; zone
    0's most dirty pages against its dirty limit and its share of all
    dirty pages are logged, not checked; nr_zone_dirty_skips stays put.
Device writes are limited to 100 MB/s by a blkio cgroup holding the daemon,
so dirty pages pile up and each write phase lasts seconds.
Ends with e2fsck -fn.  Runs once, with the default io engine.

    WBCFS_BIN=build/wbcfs test/integration/test_zones.py
"""

import errno
import hashlib
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TSkip, t_check, t_eq, t_errno,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_run, t_sha256_file,
                    t_step, t_write_all)
import wbtrace  # noqa: E402
import wbbench  # noqa: E402

# readahead_kb=128: (c) needs samples (every 50 ms) before reclaim begins;
# with the device's read_ahead_kb (2560 KiB on a loop device) the cold
# read fills the 128 MiB cache before the first one
OPTS = ["cache_size=128M", "zones=16M:112M", "dirty_bytes=32M", "readahead_kb=128"]
ZONE0_SHARE = 16 / 128
BIG = 400 * MIB
WRITERS, PER_WRITER, BS = 4, 100 * MIB, 128 * 1024
SLACK_PAGES = 64
WBCFS_STAT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "..", "tools", "wbcfs-stat")
# writes to the device are limited (blkio cgroup holding the daemon), so
# that dirty pages pile up against the limits and each 400 MiB write phase
# lasts seconds, not a fraction of one
WRITE_BPS = 100 * 1000 * 1000


def write_files(d, prefix):
    """WRITERS threads (each its own task for the throttle) write
    PER_WRITER bytes of random data to d/PREFIX<i>; {path: sha256}."""
    sums, errs = {}, []

    def writer(i):
        path = os.path.join(d, "%s%d" % (prefix, i))
        base = bytearray(os.urandom(BS))
        stamp = i << 32
        h = hashlib.sha256()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for k in range(PER_WRITER // BS):
                    base[:8] = (stamp + k).to_bytes(8, "little")
                    t_write_all(fd, base)
                    h.update(base)
            finally:
                os.close(fd)
            sums[path] = h.hexdigest()
        except OSError as e:
            errs.append("%s: %s" % (path, e))
    ths = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    t_check(not errs, "writers failed: %s" % errs)
    return sums


def dirty_wb(z):
    return z["nr_dirty"] + z["nr_writeback"]


def sampled_writes(mnt, d, prefix):
    """write_files under a 100 ms zoneinfo+vmstat sampler; (sums,
    samples, vmstat delta)."""
    v0 = wbtrace.vmstat(mnt)
    smp = wbtrace.ZoneSampler(mnt, 0.1, with_vmstat=True)
    try:
        sums = write_files(d, prefix)
    finally:
        samples = smp.stop()
    v1 = wbtrace.vmstat(mnt)
    t_check(smp.error is None, "zoneinfo sampler: %s" % smp.error)
    t_check(len(samples) >= 5, "only %d zoneinfo samples" % len(samples))
    return sums, samples, {k: v1.get(k, 0) - v0.get(k, 0) for k in v1}


def zone_dirty_report(samples):
    """Zone 0 (lowest) against the last zone over the samples: the worst
    overshoot of zone 0's dirty limit while the last zone had room, and
    regardless; zone 0's largest share of the dirty pages; the most dirty
    + writeback pages of all zones against the global threshold."""
    worst_room, worst_any, share, over_room = None, None, 0.0, []
    prev_ign, tot_max = None, (0, 0)
    for t, zs, v in samples:
        z0, zn = zs[0], zs[-1]
        d0, lim0 = dirty_wb(z0), z0["dirty_limit"]
        room = dirty_wb(zn) < zn["dirty_limit"]
        ign = v.get("nr_zone_dirty_ignored", 0)
        over = d0 - lim0
        worst_any = over if worst_any is None else max(worst_any, over)
        if room:
            worst_room = over if worst_room is None else max(worst_room,
                                                              over)
            if over > SLACK_PAGES + lim0 // 100:
                over_room.append((round(t, 1), d0, lim0, dirty_wb(zn),
                                  zn["dirty_limit"], zn["pages free"],
                                  zn["low"],
                                  ign - prev_ign if prev_ign is not None
                                  else None))
        prev_ign = ign
        tot = sum(dirty_wb(z) for z in zs)
        if tot:
            share = max(share, d0 / tot)
        tot_max = max(tot_max, (tot, v.get("nr_dirty_threshold", 0)))
    t_log("most dirty + writeback pages of all zones %d, global threshold "
          "%d then" % tot_max)
    return worst_room, worst_any, share, over_room


def alloc_share(mnt, path):
    """Read path whole; zone 0's share of the pages allocated meanwhile,
    and of those allocated before reclaim began (pgsteal still 0: the
    cache's free pages, where only the fair batches decide)."""
    v0 = wbtrace.vmstat(mnt)
    smp = wbtrace.ZoneSampler(mnt, 0.05, with_vmstat=True)
    try:
        secs = wbbench.cat([path])
    finally:
        samples = smp.stop()
    v1 = wbtrace.vmstat(mnt)
    for k in ("pgalloc_zone0", "pgalloc", "pgsteal"):
        t_check(k in v1, "vmstat has no %s" % k)
    a0 = v1["pgalloc_zone0"] - v0["pgalloc_zone0"]
    tot = v1["pgalloc"] - v0["pgalloc"]
    t_check(tot >= BIG // 4096, "pgalloc moved by %d over a %d MiB read"
            % (tot, BIG // MIB))
    free = [v for _, _, v in samples if v["pgsteal"] == v0["pgsteal"]]
    f0 = free[-1]["pgalloc_zone0"] - v0["pgalloc_zone0"] if free else 0
    ft = free[-1]["pgalloc"] - v0["pgalloc"] if free else 0
    t_log("read %d MiB in %.1f s: pgalloc %d, zone 0 %d (%.4f); before "
          "reclaim began %d, zone 0 %d (%.4f); fair batch resets %d, "
          "pgsteal %d, zone 0 %d" % (
              BIG // MIB, secs, tot, a0, a0 / tot, ft, f0,
              f0 / ft if ft else 0.0,
              v1.get("nr_fair_batch_resets", 0) -
              v0.get("nr_fair_batch_resets", 0),
              v1["pgsteal"] - v0["pgsteal"],
              v1.get("pgsteal_zone0", 0) - v0.get("pgsteal_zone0", 0)))
    return a0 / tot, (f0 / ft if ft >= 4096 else None)


def toggles(mnt):
    ctl = os.path.join(mnt, ".wbcfs")

    def get(f):
        with open(os.path.join(ctl, f)) as fh:
            return fh.read()

    def put(f, data):
        fd = os.open(os.path.join(ctl, f), os.O_WRONLY | os.O_TRUNC)
        try:
            return os.write(fd, data)
        finally:
            os.close(fd)
    for f in ("zone_dirty", "fair_zone_alloc"):
        t_eq(get(f), "1\n", "%s at mount" % f)
        for val in (b"0\n", b"1\n", b"0\n"):
            put(f, val)
            t_eq(get(f), val.decode(), "%s after writing %r" % (f, val))
        t_errno(errno.EINVAL, put, f, b"2\n", what="write 2 to %s" % f)
        t_eq(get(f), "0\n", "%s after the refused 2" % f)
        put(f, b"1\n")
        t_eq(get(f), "1\n", "%s restored" % f)


def body(env):
    if t_is_kernel():
        raise TSkip("cache zones are wbcfs's own")
    failures = []

    def check(cond, msg):
        """A failed oracle is reported at the end, after the others ran."""
        t_log(("ok: " if cond else "FAILED: ") + msg)
        if not cond:
            failures.append(msg)
    dev = env.new_fs(1 * GIB)
    t_step("a %d MiB file through the kernel's ext4" % (BIG // MIB))
    wbbench.kernel_fill(env, dev, {"big": BIG})

    cg = env.blkio_cgroup()
    cg.write_bps(dev, WRITE_BPS)
    m = env.mount(dev, OPTS + ["zone_dirty=1", "fair_zone_alloc=1"])
    cg.add(m.pid)
    zi = wbtrace.zoneinfo(m.mnt)
    t_eq(len(zi), 2, "zones in zoneinfo")
    t_eq([z["present"] for z in zi], [16 * MIB // 4096, 112 * MIB // 4096],
         "zones' present pages")
    t_step("(c) fair_zone_alloc=1: zone 0 takes 16/128 of a cold read's "
           "allocations")
    share1, free1 = alloc_share(m.mnt, os.path.join(m.mnt, "big"))
    check(free1 is not None and
          abs(free1 - ZONE0_SHARE) <= 0.05 * ZONE0_SHARE,
          "(c) fair_zone_alloc=1: zone 0's share of the allocations before "
          "reclaim began %s, want %.4f +- 5%%" % (free1, ZONE0_SHARE))
    check(abs(share1 - ZONE0_SHARE) <= 0.05 * ZONE0_SHARE,
          "(c) fair_zone_alloc=1: zone 0's share of pgalloc %.4f, want "
          "%.4f +- 5%%" % (share1, ZONE0_SHARE))

    t_step("(a) zone_dirty=1: zone 0 stays within its dirty limit")
    d = os.path.join(m.mnt, "a")
    os.mkdir(d)
    sums, samples, dv = sampled_writes(m.mnt, d, "a")
    worst_room, worst_any, share, over = zone_dirty_report(samples)
    lim0 = max(z[0]["dirty_limit"] for _, z, _ in samples)
    t_log("(a) %d samples: zone 0 dirty+writeback over its limit (max %d "
          "pages) by at most %s while zone 1 had room, %s at all; zone 0's "
          "largest share of the dirty pages %.3f; skips %d, ignored %d, "
          "pgalloc zone 0 %d of %d"
          % (len(samples), lim0, worst_room, worst_any, share,
             dv.get("nr_zone_dirty_skips", 0),
             dv.get("nr_zone_dirty_ignored", 0),
             dv.get("pgalloc_zone0", 0), dv.get("pgalloc", 0)))
    check(not over, "(a) zone 0 over its dirty limit by more than %d pages + "
            "1%% while zone 1 had room, %d sample(s) (t, z0 dirty+wb, z0 "
            "limit, z1 dirty+wb, z1 limit, z1 free, z1 low, ignored since "
          "the last sample): %s" % (SLACK_PAGES, len(over), over[:5]))
    check(dv.get("nr_zone_dirty_skips", 0) > 0,
          "(a) nr_zone_dirty_skips moved: %r"
          % {k: v for k, v in dv.items() if "zone" in k})

    t_step("(d) live zone_dirty and fair_zone_alloc")
    toggles(m.mnt)
    t_step("tools/wbcfs-stat -z: a column group per zone")
    p = t_run([WBCFS_STAT, "-z", "--count", "2", m.mnt, "0.2"], timeout=30)
    lines = p.stdout.splitlines()
    t_eq(len(lines), 3, "lines from wbcfs-stat -z:\n" + p.stdout)
    t_eq(lines[0].split(), ["%d:%s" % (z, c) for z in (0, 1) for c in (
        "free", "dirty", "wback", "alloc/s", "scan/s", "immed/s")],
        "wbcfs-stat -z header")
    for ln in lines[1:]:
        t_eq(len(ln.split()), 12, "columns of %r" % ln)
    old_mnt = m.mnt
    env.umount(m)

    m = env.mount(dev, OPTS + ["zone_dirty=0", "fair_zone_alloc=0"])
    cg.add(m.pid)
    t_step("(a) after a remount the files hold what was written")
    for p, want in sorted(sums.items()):
        p = os.path.join(m.mnt, os.path.relpath(p, old_mnt))
        t_eq(t_sha256_file(p), want, "sha256 of %s" % p)
        os.unlink(p)
    t_step("(c) fair_zone_alloc=0: zone 0's share of a cold read (logged)")
    share0, free0 = alloc_share(m.mnt, os.path.join(m.mnt, "big"))
    t_log("(c) zone 0's share of pgalloc: fair_zone_alloc=1 %.4f (%s before "
          "reclaim), 0 %.4f (%s before reclaim)"
          % (share1, free1, share0, free0))

    t_step("(b) zone_dirty=0, fair_zone_alloc=0: zone 0's dirty pages "
           "(logged)")
    d = os.path.join(m.mnt, "b")
    os.mkdir(d)
    _, samples, dv = sampled_writes(m.mnt, d, "b")
    worst_room, worst_any, share, over = zone_dirty_report(samples)
    mx = max(samples, key=lambda s: dirty_wb(s[1][0]))
    t_log("(b) %d samples: zone 0 dirty+writeback max %d against a limit "
          "of %d then (over by at most %s while zone 1 had room, %s at "
          "all); zone 0's largest share of the dirty pages %.3f; skips %d, "
          "ignored %d, pgalloc zone 0 %d of %d"
          % (len(samples), dirty_wb(mx[1][0]), mx[1][0]["dirty_limit"],
             worst_room, worst_any, share,
             dv.get("nr_zone_dirty_skips", 0),
             dv.get("nr_zone_dirty_ignored", 0),
             dv.get("pgalloc_zone0", 0), dv.get("pgalloc", 0)))
    check(dv.get("nr_zone_dirty_skips", 0) == 0,
          "(b) zone_dirty=0: nr_zone_dirty_skips did not move (%d)"
          % dv.get("nr_zone_dirty_skips", 0))
    env.umount(m)
    env.fsck(dev)
    t_check(not failures, "%d check(s) failed:\n  %s"
            % (len(failures), "\n  ".join(failures)))


if __name__ == "__main__":
    t_main("zones", body, deadline_s=110)
