#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The control directory /.wbcfs: hidden from the root's readdir but found
by lookup, shadowing a real entry of that name; root-only (EACCES for
others); vmstat and bdi fields and their movement with writes, fsync and
writeback; every tunable reads its mount value, takes new values live
with /proc/sys/vm's rules and refuses bad ones keeping the old; lowering
dirty_expire/writeback_centisecs and the background threshold makes dirty
data go out without sync; reclaim counters move in a 16 MiB cache;
lockstat is off and zero until turned on, then counts fs_lock, and
reset zeroes it (-o lockstat: on from the mount); ctl_name=NAME renames
it; tools/wbcfs-stat.
Ends with e2fsck -fn and the kernel's ext4 seeing the same tree.

    WBCFS_BIN=build/wbcfs test/integration/test_ctl.py
"""

import errno
import os
import random
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TSkip, t_check, t_eq, t_errno, t_is_kernel,  # noqa: E402
                    t_as_user, t_log, t_main, t_manifest, t_run, t_step,
                    t_write_all)

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
CACHE_PAGES = 16384     # cache_size=64M
VMSTAT_FIELDS = ("nr_free_pages", "nr_file_pages", "nr_dirty", "nr_writeback",
                 "nr_dirtied", "nr_written", "nr_dirty_threshold",
                 "nr_dirty_background_threshold", "nr_vmscan_immediate_reclaim",
                 "nr_vmscan_write", "pgscan", "pgsteal", "nr_cache_pages",
                 "nr_write_errors", "nr_write_ios", "nr_syncs")
BDI_FIELDS = ("BdiWriteback", "BdiReclaimable", "BdiDirtyThresh", "DirtyThresh",
              "BackgroundThresh", "BdiDirtied", "BdiWritten", "BdiWriteBandwidth",
              "b_dirty", "b_io", "b_more_io", "state", "PdflushBusy")
# mount-time values, none of them the default, so reading them back proves
# the files show the mount's settings
MOUNT_TUNABLES = {
    "dirty_ratio": 40, "dirty_background_ratio": 20, "dirty_bytes": 0,
    "dirty_background_bytes": 0, "dirty_expire_centisecs": 6000,
    "dirty_writeback_centisecs": 700, "readahead_kb": 64,
    "min_ratio": 5, "max_ratio": 90, "max_pause_ms": 150, "strictlimit": 0,
    "fair_zone_alloc": 0, "zone_dirty": 0,
}
READ_ONLY = ("vmstat", "zoneinfo", "bdi", "trace", "journal", "transport", "flusher", "domain",
             "lockdep")
BAD_VALUES = {
    "dirty_ratio": (b"101\n", b"abc\n", b"\n", b"-1\n", b"5%\n", b"1 2\n"),
    "dirty_background_ratio": (b"1000\n", b"x\n"),
    "dirty_bytes": (b"4096\n", b"0\n", b"64M\n"),
    "dirty_background_bytes": (b"0\n", b"1.5\n"),
    "dirty_expire_centisecs": (b"864000001\n", b"soon\n"),
    "dirty_writeback_centisecs": (b"99999999999\n", b" \n"),
    "readahead_kb": (b"6\n", b"65540\n"),
    "min_ratio": (b"101\n", b"95\n"),          # 95: above max_ratio
    "max_ratio": (b"4\n", b"x\n"),              # 4: below min_ratio
    "max_pause_ms": (b"0\n", b"10001\n"),
    "strictlimit": (b"2\n", b"yes\n"),
    "fair_zone_alloc": (b"2\n", b"on\n"),
    "zone_dirty": (b"-1\n", b"10\n"),
}


class Ctl:
    def __init__(self, mnt, name=".wbcfs"):
        self.dir = os.path.join(mnt, name)

    def path(self, f):
        return os.path.join(self.dir, f)

    def read(self, f):
        with open(self.path(f), "rb") as fh:
            return fh.read().decode()

    def vmstat(self):
        out = {}
        for line in self.read("vmstat").splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out

    def bdi(self):
        out = {}
        for line in self.read("bdi").splitlines():
            k, v = line.split(":", 1)
            v = v.split()[0]
            out[k.strip()] = int(v, 16) if k == "state" else int(v)
        return out

    def get(self, f):
        s = self.read(f)
        t_check(s.endswith("\n"), "%s: %r does not end with a newline" % (f, s))
        return int(s)

    def put(self, f, data):
        fd = os.open(self.path(f), os.O_WRONLY | os.O_TRUNC)
        try:
            return os.write(fd, data)
        finally:
            os.close(fd)


def wait_for(what, cond, timeout):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            return None
        time.sleep(0.1)


def write_file(path, nbytes):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t_write_all(fd, os.urandom(nbytes))
    finally:
        os.close(fd)


def check_visibility(env, m, ctl):
    t_step("not in readdir of the root, found by lookup, shadows the real entry")
    names = os.listdir(m.mnt)
    t_check(".wbcfs" not in names, "readdir of the root shows .wbcfs: %r" % names)
    t_check("lost+found" in names, "readdir of the root lost lost+found: %r" % names)
    st = os.stat(ctl.dir)
    t_eq(oct(st.st_mode), oct(0o40700), "mode of .wbcfs")
    t_eq((st.st_uid, st.st_gid), (0, 0), "owner of .wbcfs")
    t_check(st.st_ino >= 1 << 32, "inode of .wbcfs %d collides with ext4's" % st.st_ino)
    want = set(READ_ONLY) | set(MOUNT_TUNABLES) | {"throttle", "lockstat", "cache_size",
                                                   "cache_min"}
    got = set(os.listdir(ctl.dir))
    t_eq(got, want, "entries of .wbcfs")
    t_check("hidden-by-ctl" not in got, "the shadowed directory shows through")
    inos = {st.st_ino}
    for f in got:
        s = os.stat(ctl.path(f))
        want_mode = 0o100400 if f in READ_ONLY else 0o100600
        t_eq(oct(s.st_mode), oct(want_mode), "mode of %s" % f)
        t_eq(s.st_size, 0, "size of %s" % f)
        t_check(s.st_ino >= 1 << 32, "inode of %s is %d" % (f, s.st_ino))
        inos.add(s.st_ino)
    t_eq(len(inos), len(got) + 1, "distinct inode numbers")
    t_errno(errno.ENOENT, os.stat, ctl.path("nope"))
    t_check("control directory hides it" in m.daemon_log(),
            "no warning about the shadowed /.wbcfs in the log:\n" + m.daemon_log())
    os.statvfs(ctl.dir)
    t_eq(os.listxattr(ctl.path("vmstat")), [], "xattrs of vmstat")


def check_refusals(m, ctl):
    t_step("nothing is created, removed, renamed or written where it must not be")
    t_errno((errno.EPERM, errno.EACCES), os.open, ctl.path("new"),
            os.O_WRONLY | os.O_CREAT, 0o644)
    t_errno(errno.EPERM, os.mkdir, ctl.path("d"))
    t_errno(errno.EPERM, os.unlink, ctl.path("vmstat"))
    t_errno(errno.EPERM, os.rename, ctl.dir, os.path.join(m.mnt, "moved"))
    t_errno(errno.EPERM, os.rmdir, ctl.dir)
    t_errno(errno.EPERM, os.link, ctl.path("vmstat"), os.path.join(m.mnt, "l"))
    t_errno(errno.EACCES, os.open, ctl.path("vmstat"), os.O_WRONLY)
    t_errno(errno.EACCES, os.open, ctl.path("bdi"), os.O_RDWR)
    t_errno(errno.EPERM, os.chmod, ctl.path("dirty_ratio"), 0o666)
    t_errno(errno.EPERM, os.chown, ctl.path("dirty_ratio"), 1, 1)
    t_check(not os.path.exists(os.path.join(m.mnt, "moved")), "rename happened")


def check_non_root(m, ctl):
    t_step("another user (uid 65534) gets EACCES; the rest of the mount works")
    with open(os.path.join(m.mnt, "public"), "w") as f:
        f.write("hello\n")
    os.chmod(os.path.join(m.mnt, "public"), 0o644)

    def read_public():
        with open(os.path.join(m.mnt, "public")) as f:
            return "ok" if f.read() == "hello\n" else "bad content"

    t_eq(t_as_user(65534, 65534, read_public), "ok", "non-root reads a normal file")
    t_eq(t_as_user(65534, 65534, lambda: os.listdir(m.mnt) and None), "ok", "non-root lists /")
    t_eq(t_as_user(65534, 65534, lambda: os.stat(ctl.dir) and None), "ok", "non-root stats .wbcfs")
    t_eq(t_as_user(65534, 65534, lambda: os.listdir(ctl.dir) and None), "errno:EACCES",
         "non-root lists .wbcfs")
    t_eq(t_as_user(65534, 65534, lambda: open(ctl.path("vmstat")).read() and None),
         "errno:EACCES", "non-root reads vmstat")
    t_eq(t_as_user(65534, 65534, lambda: ctl.put("dirty_ratio", b"5\n") and None),
         "errno:EACCES", "non-root writes dirty_ratio")
    t_eq(ctl.get("dirty_ratio"), MOUNT_TUNABLES["dirty_ratio"], "dirty_ratio after that")


def lockstat(ctl):
    """State ("on"/"off") and {class: (acquired, contended, wait_ms, hold_ms)}."""
    lines = ctl.read("lockstat").splitlines()
    t_check(lines[0].startswith("# lockstat "), "lockstat header %r" % lines[0])
    out = {}
    for line in lines[2:]:
        f = line.split()
        t_eq(len(f), 7, "fields of lockstat line %r" % line)
        out[f[0]] = (int(f[1]), int(f[2]), float(f[4]), float(f[6]))
    return lines[0].split()[2], out


def check_lockstat(m, ctl):
    t_step("lockstat: off and zero by default; on counts fs_lock; reset zeroes")
    state, classes = lockstat(ctl)
    t_eq(state, "off", "lockstat state at mount")
    for name in ("fs_lock", "itable_lock", "ilock(w)", "zone_lock", "bdi_lock"):
        t_check(name in classes, "class %s missing: %r" % (name, sorted(classes)))
    t_check(all(v == (0, 0, 0.0, 0.0) for v in classes.values()), "counts while off: %r" % classes)
    ctl.put("lockstat", b"on\n")
    for i in range(20):
        with open(os.path.join(m.mnt, "ls%d" % i), "w") as f:
            f.write("x")
    state, classes = lockstat(ctl)
    t_eq(state, "on", "lockstat state after 'on'")
    t_check(classes["fs_lock"][0] > 0, "fs_lock after 20 creates: %r" % (classes["fs_lock"],))
    t_check(classes["fs_lock"][3] > 0, "fs_lock hold time: %r" % (classes["fs_lock"],))
    t_errno(errno.EINVAL, ctl.put, "lockstat", b"maybe\n")
    ctl.put("lockstat", b"off\n")
    ctl.put("lockstat", b"reset\n")
    state, classes = lockstat(ctl)
    t_eq(state, "off", "lockstat state after 'off'")
    t_check(all(v == (0, 0, 0.0, 0.0) for v in classes.values()),
            "counts after reset: %r" % classes)
    for i in range(20):
        os.unlink(os.path.join(m.mnt, "ls%d" % i))


def check_vmstat_bdi(ctl):
    t_step("vmstat: every field, sane values; reads at offsets; zoneinfo; bdi fields")
    v = ctl.vmstat()
    missing = [f for f in VMSTAT_FIELDS if f not in v]
    t_check(not missing, "vmstat lacks %s" % missing)
    t_check(all(x >= 0 for x in v.values()), "negative counter in %r" % v)
    t_eq(v["nr_cache_pages"], CACHE_PAGES, "nr_cache_pages")
    t_check(v["nr_free_pages"] + v["nr_file_pages"] <= CACHE_PAGES,
            "free %d + file %d > cache" % (v["nr_free_pages"], v["nr_file_pages"]))
    t_check(v["nr_free_pages"] > CACHE_PAGES // 2, "nr_free_pages %d" % v["nr_free_pages"])
    t_check(0 < v["nr_dirty_background_threshold"] < v["nr_dirty_threshold"],
            "thresholds %d/%d" % (v["nr_dirty_background_threshold"],
                                  v["nr_dirty_threshold"]))
    # 40% and 20% of the dirtyable pages (free + file - reserve)
    t_check(CACHE_PAGES * 30 // 100 < v["nr_dirty_threshold"] <= CACHE_PAGES * 40 // 100,
            "nr_dirty_threshold %d for dirty_ratio=40" % v["nr_dirty_threshold"])
    with open(ctl.path("vmstat"), "rb") as f:
        whole = f.read()
        t_check(len(whole) > 200, "vmstat is %d bytes" % len(whole))
        t_eq(os.pread(f.fileno(), 30, 7), whole[7:37], "pread of vmstat at 7")
        t_eq(os.pread(f.fileno(), 100, len(whole)), b"", "pread at the end")
    z = ctl.read("zoneinfo").splitlines()
    t_eq(z[0], "Zone 0", "first line of zoneinfo")
    zi = {}
    for ln in z[1:]:
        k, _, val = ln.strip().rpartition(" ")
        zi[k.strip()] = int(val)
    t_eq(zi.get("present"), CACHE_PAGES, "zoneinfo present")
    t_check(0 < zi["min"] < zi["low"] < zi["high"] < CACHE_PAGES, "watermarks %r" % zi)
    t_check(zi["pages free"] > CACHE_PAGES // 2, "zoneinfo pages free %r" % zi)
    b = ctl.bdi()
    missing = [f for f in BDI_FIELDS if f not in b]
    t_check(not missing, "bdi lacks %s" % missing)
    # the one device's share: all of DirtyThresh (no other device completes
    # writeback, and an idle one gets at least (thresh - dirty) / 8), capped
    # at max_ratio=90 percent
    cap = b["DirtyThresh"] * MOUNT_TUNABLES["max_ratio"] // 100
    t_check(abs(b["BdiDirtyThresh"] - cap) <= 8,
            "BdiDirtyThresh %d, want max_ratio's cap %d of DirtyThresh %d"
            % (b["BdiDirtyThresh"], cap, b["DirtyThresh"]))
    t_check(b["BackgroundThresh"] < b["DirtyThresh"], "bdi thresholds %r" % b)
    t_check(b["state"] & 1, "bdi state %x lacks 'running'" % b["state"])
    t_check(b["BdiWriteBandwidth"] > 0, "BdiWriteBandwidth %d" % b["BdiWriteBandwidth"])


def check_dirty_counts(m, ctl):
    t_step("nr_dirty rises after writes without fsync, falls after fsync; nr_written grows")
    size = 4 * MIB
    pages = size // 4096
    before = ctl.vmstat()
    bdi_before = ctl.bdi()
    path = os.path.join(m.mnt, "dirty1")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t_write_all(fd, os.urandom(size))
        mid = ctl.vmstat()
        bdi_mid = ctl.bdi()
        t_log("nr_dirty %d -> %d, nr_dirtied %d -> %d" % (
            before["nr_dirty"], mid["nr_dirty"], before["nr_dirtied"], mid["nr_dirtied"]))
        t_check(mid["nr_dirty"] >= before["nr_dirty"] + pages,
                "nr_dirty %d -> %d after %d pages written" % (
                    before["nr_dirty"], mid["nr_dirty"], pages))
        t_check(mid["nr_dirtied"] >= before["nr_dirtied"] + pages, "nr_dirtied did not grow")
        t_check(bdi_mid["BdiReclaimable"] >= size // 1024, "BdiReclaimable %d kB"
                % bdi_mid["BdiReclaimable"])
        t_check(bdi_mid["b_dirty"] + bdi_mid["b_io"] + bdi_mid["b_more_io"] >= 1,
                "no inode on the bdi lists: %r" % bdi_mid)
        t_check(bdi_mid["state"] & 4, "state %x lacks dirty_io" % bdi_mid["state"])
        t_check(bdi_mid["BdiDirtied"] >= bdi_before["BdiDirtied"] + size // 1024,
                "BdiDirtied did not grow")
        os.fsync(fd)
    finally:
        os.close(fd)
    after = ctl.vmstat()
    bdi_after = ctl.bdi()
    t_log("after fsync: nr_dirty %d, nr_written %d -> %d" % (
        after["nr_dirty"], before["nr_written"], after["nr_written"]))
    t_check(after["nr_dirty"] < 64, "nr_dirty %d after fsync" % after["nr_dirty"])
    t_check(after["nr_written"] >= before["nr_written"] + pages,
            "nr_written %d -> %d for %d pages" % (before["nr_written"],
                                                  after["nr_written"], pages))
    t_check(bdi_after["BdiWritten"] >= bdi_before["BdiWritten"] + size // 1024,
            "BdiWritten %d -> %d" % (bdi_before["BdiWritten"], bdi_after["BdiWritten"]))
    t_check(after["nr_write_ios"] > before["nr_write_ios"], "nr_write_ios did not grow")
    t_eq(after["nr_write_errors"], 0, "nr_write_errors")
    t_step("sync -f brings nr_dirty to ~0 as well")
    write_file(os.path.join(m.mnt, "dirty2"), 2 * MIB)
    t_check(ctl.vmstat()["nr_dirty"] >= 512, "dirty2 not dirty")
    syncs = ctl.vmstat()["nr_syncs"]
    t_run(["sync", "-f", os.path.join(m.mnt, "dirty2")])
    t_check(ctl.vmstat()["nr_syncs"] > syncs, "nr_syncs did not count sync -f")
    t_check(ctl.vmstat()["nr_dirty"] < 64, "nr_dirty %d after sync -f"
            % ctl.vmstat()["nr_dirty"])


def check_tunables(ctl):
    t_step("every tunable reads its mount value; writes read back")
    for f, want in MOUNT_TUNABLES.items():
        t_eq(ctl.get(f), want, "mount value of " + f)
    for f, val in (("dirty_ratio", 35), ("dirty_background_ratio", 15),
                   ("dirty_expire_centisecs", 5000), ("dirty_writeback_centisecs", 600),
                   ("readahead_kb", 256)):
        t_eq(ctl.put(f, b"%d\n" % val), len(b"%d\n" % val), "write to " + f)
        t_eq(ctl.get(f), val, f + " after writing %d" % val)
    os.truncate(ctl.path("dirty_ratio"), 0)
    os.utime(ctl.path("dirty_ratio"))
    t_eq(ctl.get("dirty_ratio"), 35, "dirty_ratio after truncate and utime")
    t_errno(errno.EACCES, os.truncate, ctl.path("vmstat"), 0)
    with open(ctl.path("dirty_background_ratio"), "r+") as f:
        t_eq(f.read(), "15\n", "read through an O_RDWR handle")
        f.seek(0)
        f.write("16\n")
    t_eq(ctl.get("dirty_background_ratio"), 16, "after a write through O_RDWR")
    ctl.put("dirty_background_ratio", b"15\n")
    t_run(["sh", "-c", "echo 38 > '%s'" % ctl.path("dirty_ratio")])
    t_eq(ctl.get("dirty_ratio"), 38, "dirty_ratio after echo 38 >")
    v = ctl.vmstat()
    t_check(CACHE_PAGES * 28 // 100 < v["nr_dirty_threshold"] <= CACHE_PAGES * 38 // 100,
            "nr_dirty_threshold %d did not follow dirty_ratio=38" % v["nr_dirty_threshold"])

    t_step("a value in pieces, and without a newline")
    fd = os.open(ctl.path("dirty_ratio"), os.O_WRONLY)
    try:
        os.write(fd, b"2")
        os.write(fd, b"5\n")
    finally:
        os.close(fd)
    t_eq(ctl.get("dirty_ratio"), 25, "dirty_ratio after '2' + '5\\n'")
    ctl.put("dirty_ratio", b"33")
    t_eq(ctl.get("dirty_ratio"), 33, "dirty_ratio after '33' without newline")

    t_step("bad values: EINVAL, the old value stays")
    for f, bads in BAD_VALUES.items():
        old = ctl.get(f)
        for bad in bads:
            t_errno(errno.EINVAL, ctl.put, f, bad, what="write %r to %s" % (bad, f))
            t_eq(ctl.get(f), old, "%s after refused %r" % (f, bad))

    t_step("dirty_bytes and dirty_ratio zero each other (and the background pair)")
    ctl.put("dirty_bytes", b"33554432\n")
    t_eq(ctl.get("dirty_bytes"), 32 * MIB, "dirty_bytes")
    t_eq(ctl.get("dirty_ratio"), 0, "dirty_ratio after dirty_bytes")
    t_eq(ctl.vmstat()["nr_dirty_threshold"], 32 * MIB // 4096, "threshold from dirty_bytes")
    ctl.put("dirty_ratio", b"40\n")
    t_eq(ctl.get("dirty_bytes"), 0, "dirty_bytes after dirty_ratio")
    t_eq(ctl.get("dirty_ratio"), 40, "dirty_ratio")
    ctl.put("dirty_background_bytes", b"8388608\n")
    t_eq(ctl.get("dirty_background_ratio"), 0, "dirty_background_ratio after bytes")
    t_eq(ctl.vmstat()["nr_dirty_background_threshold"], 2048, "bg threshold from bytes")
    ctl.put("dirty_background_ratio", b"20\n")
    t_eq(ctl.get("dirty_background_bytes"), 0, "dirty_background_bytes after ratio")
    t_eq(ctl.get("dirty_ratio"), 40, "dirty_ratio untouched by the background pair")
    for f, val in MOUNT_TUNABLES.items():
        if val:
            ctl.put(f, b"%d\n" % val)
    for f, val in MOUNT_TUNABLES.items():
        t_eq(ctl.get(f), val, f + " restored")


def read_trace_nonblock(ctl):
    """Everything the trace has for a fresh reader, without blocking."""
    fd = os.open(ctl.path("trace"), os.O_RDONLY | os.O_NONBLOCK)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            t_check(chunk, "a trace read returned 0 bytes (EOF) instead of EAGAIN")
            out += chunk
    finally:
        os.close(fd)
    return out.decode()


def check_throttle(env, dev, m, ctl):
    t_step("throttle mode by name, live; the trace records each decision")
    t_eq(open(ctl.path("throttle")).read(), "ioless\n", "throttle file")
    ctl.put("throttle", b"simple\n")
    t_eq(open(ctl.path("throttle")).read(), "simple\n", "throttle after writing simple")
    t_errno(errno.EINVAL, ctl.put, "throttle", b"fast\n")
    t_eq(open(ctl.path("throttle")).read(), "simple\n", "throttle after a refused value")
    ctl.put("throttle", b"ioless\n")
    # a tiny limit so a 32 MiB write is throttled well past freerun
    ctl.put("dirty_bytes", b"2097152\n")
    ctl.put("dirty_background_bytes", b"1048576\n")
    # the daemon's writes held to 8 MB/s: writeback cannot keep the dirty
    # pages under the freerun ceiling, however fast the machine is (a
    # fast one kept them there, and nothing was evaluated)
    try:
        cg = env.blkio_cgroup()
    except TSkip as e:
        cg = None
        t_log("no blkio cgroup (%s): device not slowed" % e)
    if cg:
        cg.write_bps(dev, 8 * MIB)
        cg.add(m.pid)
    before = ctl.vmstat()
    try:
        write_file(os.path.join(m.mnt, "throttled"), 32 * MIB)
    finally:
        if cg:
            cg.write_bps(dev, 0)
    after = ctl.vmstat()
    t_check(after["nr_throttle_evaluations"] > before["nr_throttle_evaluations"],
            "no throttle evaluations for a 32 MiB write over a 2 MiB limit")
    t_check(after["throttle_pause_ms_max"] <= 150,
            "a pause of %d ms > max_pause_ms 150" % after["throttle_pause_ms_max"])
    recs = [l.split() for l in read_trace_nonblock(ctl).splitlines()]
    bdp = [dict(kv.split("=", 1) for kv in r[2:]) for r in recs
           if r[1] == "balance_dirty_pages"]
    t_check(bdp, "no balance_dirty_pages records in the trace: %r" % recs[:5])
    for r in bdp:
        for k in ("bdi", "limit", "setpoint", "dirty", "bdi_setpoint", "bdi_dirty",
                  "dirty_ratelimit", "task_ratelimit", "dirtied", "dirtied_pause",
                  "paused", "pause", "period", "think", "pid"):
            t_check(k in r, "bdp record without %s: %r" % (k, r))
        t_check(int(r["pause"]) <= 150, "bdp pause %s > max_pause_ms" % r["pause"])
    t_check(all(int(recs[i][0]) <= int(recs[i + 1][0]) + 1000 for i in range(len(recs) - 1)),
            "trace timestamps go backwards by more than a pause")
    t_eq(read_trace_nonblock(ctl).count("\n") >= len(recs), True, "a fresh reader sees them again")
    b = ctl.bdi()
    t_check("DirtyRatelimit" in b and "TaskRatelimit" in b, "bdi lacks the ratelimits: %r" % b)
    for f, val in (("dirty_ratio", MOUNT_TUNABLES["dirty_ratio"]),
                   ("dirty_background_ratio", MOUNT_TUNABLES["dirty_background_ratio"])):
        ctl.put(f, b"%d\n" % val)
    os.unlink(os.path.join(m.mnt, "throttled"))
    t_run(["sync", "-f", m.mnt])      # the next check counts dirty pages from zero


# What else writes dirty pages, or changes how many may stay dirty, while
# a check waits for them: sync(2) from any process on the machine reaches
# this mount too; reclaim writes dirty pages when memory runs short; and
# the memory watcher moves the cache's size, and with it the dirtyable
# pages, when other work on the machine puts memory under pressure.
DISTURBANCES = ("nr_syncs", "nr_vmscan_write", "cache_target_changes")


def without_syncs(ctl, what, attempt, tries=5):
    """Run attempt() (None on success, else why it failed) until one run
    sees none of DISTURBANCES change, which would make "still dirty" fail
    and "written by writeback" pass for the wrong reason."""
    for _ in range(tries):
        before = ctl.vmstat()
        err = attempt()
        after = ctl.vmstat()
        moved = ["%s %d -> %d" % (k, before[k], after[k]) for k in DISTURBANCES
                 if after[k] != before[k]]
        if not moved:
            if err:
                t_check(False, "%s (%s)" % (err, ", ".join(
                    "%s %d" % (k, after[k]) for k in DISTURBANCES)))
            return
        t_log("%s: disturbed from elsewhere meanwhile (%s); again" % (what, ", ".join(moved)))
    t_check(False, "%s: every one of %d tries was disturbed" % (what, tries))


def check_live_writeback(m, ctl):
    t_step("expire 60 s / interval 7 s: 4 MiB stay dirty for 3 s; then "
           "dirty_expire_centisecs=100, dirty_writeback_centisecs=50: written within 5 s")

    # Thresholds in bytes, not ratios: the ratios are of the cache's
    # dirtyable pages, which the memory watcher shrinks when the machine
    # is short of memory, and 20% of a shrunk cache is below 4 MiB: the
    # background flusher would write the file at once.
    def periodic():
        ctl.put("dirty_background_bytes", b"%d\n" % (32 * MIB))
        ctl.put("dirty_bytes", b"%d\n" % (48 * MIB))
        ctl.put("dirty_expire_centisecs", b"6000\n")
        ctl.put("dirty_writeback_centisecs", b"700\n")
        write_file(os.path.join(m.mnt, "aging"), 4 * MIB)
        if ctl.vmstat()["nr_dirty"] < 1024:
            return "aging not dirty"
        time.sleep(3)
        d = ctl.vmstat()["nr_dirty"]
        if d < 1024:
            return "nr_dirty %d: written before it expired" % d
        t0 = time.monotonic()
        ctl.put("dirty_expire_centisecs", b"100\n")
        ctl.put("dirty_writeback_centisecs", b"50\n")
        if not wait_for("nr_dirty < 64", lambda: ctl.vmstat()["nr_dirty"] < 64, 5):
            return "nr_dirty still %d after 5 s" % ctl.vmstat()["nr_dirty"]
        t_log("periodic writeback cleaned it in %.1fs" % (time.monotonic() - t0))
        return None

    without_syncs(ctl, "periodic writeback", periodic)
    ctl.put("dirty_expire_centisecs", b"6000\n")
    ctl.put("dirty_writeback_centisecs", b"700\n")

    t_step("dirty_background_bytes=1M below 4 MiB dirty: background writeback runs")

    def background():
        ctl.put("dirty_background_bytes", b"%d\n" % (32 * MIB))
        ctl.put("dirty_bytes", b"%d\n" % (48 * MIB))
        write_file(os.path.join(m.mnt, "bg"), 4 * MIB)
        if ctl.vmstat()["nr_dirty"] < 1024:
            return "bg not dirty"
        time.sleep(1)
        if ctl.vmstat()["nr_dirty"] < 1024:
            return "written before the threshold changed"
        ctl.put("dirty_background_bytes", b"1048576\n")
        if not wait_for("nr_dirty <= 256", lambda: ctl.vmstat()["nr_dirty"] <= 256, 5):
            return ("nr_dirty still %d after 5 s over a 1 MiB background threshold"
                    % ctl.vmstat()["nr_dirty"])
        return None

    without_syncs(ctl, "background writeback", background)
    ctl.put("dirty_background_ratio", b"20\n")
    ctl.put("dirty_ratio", b"40\n")


def check_reclaim(env, dev):
    t_step("cache_size=16M, dirty limits near the top, device at 8 MB/s: reclaim "
           "meets dirty pages, asks the flusher, and vmstat counts it")
    # throttle=simple lets writers fill the cache up to the limit; the
    # IO-less throttle keeps dirty pages at its setpoint and the flusher
    # ahead of reclaim, so reclaim would rarely meet a dirty page at all.
    # Written in order, a file is cleaned in the order reclaim scans it
    # (the flusher goes by offset, the LRU by time), so the inactive tail
    # stays clean. Written in shuffled 64 KiB pieces, the oldest pages lie
    # all over the file while the flusher works up from offset 0; with the
    # daemon's writes held to 8 MB/s, most of them are still dirty when
    # reclaim reaches them.
    try:
        cg = env.blkio_cgroup()
    except TSkip as e:          # no cgroup v1 blkio here
        cg = None
        t_log("no blkio cgroup (%s): device not slowed" % e)
    m = env.mount(dev, ["cache_size=16M", "dirty_bytes=15M", "dirty_background_bytes=14M",
                        "throttle=simple"])
    ctl = Ctl(m.mnt)
    if cg:
        cg.write_bps(dev, 8 * MIB)
        cg.add(m.pid)
    before = ctl.vmstat()
    data = os.urandom(MIB)
    path = os.path.join(m.mnt, "reclaim")
    size = 24
    piece = 64 * 1024
    order = list(range(size * MIB // piece))
    random.Random(11).shuffle(order)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for k in order:
            off = k * piece
            t_write_all(fd, data[off % MIB:off % MIB + piece], off)
    finally:
        os.close(fd)
    v = ctl.vmstat()
    t_log("pgscan %d pgsteal %d immediate %d vmscan_write %d allocstall %d" % (
        v["pgscan"] - before["pgscan"], v["pgsteal"] - before["pgsteal"],
        v["nr_vmscan_immediate_reclaim"] - before["nr_vmscan_immediate_reclaim"],
        v["nr_vmscan_write"] - before["nr_vmscan_write"], v["allocstall"]))
    for f in ("pgscan", "pgsteal", "nr_vmscan_immediate_reclaim"):
        t_check(v[f] > before[f], "%s did not grow under reclaim (%d)" % (f, v[f]))
    # pages the flusher wrote for reclaim's work items: whether any are left
    # for them once background writeback has run is timing (psync: often 0)
    t_check(before["nr_vmscan_write"] <= v["nr_vmscan_write"]
            <= v["nr_written"] - before["nr_written"] + before["nr_vmscan_write"],
            "nr_vmscan_write %d outside [%d, pages written since]"
            % (v["nr_vmscan_write"], before["nr_vmscan_write"]))
    # 24 MiB through a 16 MiB cache: at least 8 MiB less the free reserve
    t_check(v["pgsteal"] - before["pgsteal"] >= (size - 16) * 256 - 512,
            "pgsteal %d for %d MiB through a 16 MiB cache"
            % (v["pgsteal"] - before["pgsteal"], size))
    t_eq(v["nr_cache_pages"], 4096, "nr_cache_pages of a 16M cache")
    if cg:
        cg.write_bps(dev, 0)
    with open(path, "rb") as f:
        for i in range(size):
            t_check(f.read(MIB) == data, "reclaim: MiB %d read back wrong" % i)
    env.umount(m)
    env.fsck(dev)


def check_stat_tool(env, m, ctl_name):
    tool = os.path.join(TOOLS, "wbcfs-stat")
    t_step("tools/wbcfs-stat prints a header and a line per interval")
    base = [tool] + (["--ctl", ctl_name] if ctl_name != ".wbcfs" else [])
    p = t_run(base + ["--count", "3", m.mnt, "0.2"], timeout=30)
    lines = p.stdout.strip().splitlines()
    t_eq(len(lines), 4, "lines from wbcfs-stat:\n" + p.stdout)
    t_check("dirty_MB" in lines[0] and "free_MB" in lines[0], "header %r" % lines[0])
    for ln in lines[1:]:
        t_check(len(ln.split()) == 9 and all(float(x) >= 0 for x in ln.split()),
                "bad line %r" % ln)
    t_step("wbcfs-stat -m: the cache's memory, ten columns a line")
    p = t_run(base + ["-m", "--count", "2", m.mnt, "0.2"], timeout=30)
    lines = p.stdout.strip().splitlines()
    t_eq(len(lines), 3, "lines from wbcfs-stat -m:\n" + p.stdout)
    t_check("target_MB" in lines[0] and "ret_MB/s" in lines[0], "header %r" % lines[0])
    for ln in lines[1:]:
        v = ln.split()
        t_check(len(v) == 10 and all(float(x) >= 0 for x in v), "bad line %r" % ln)
        # target within [floor, ceiling], resident never above the ceiling
        t_check(float(v[2]) <= float(v[0]) <= float(v[1]) and float(v[3]) <= float(v[1]),
                "target/floor/ceiling/resident out of order in %r" % ln)
    p = t_run(base + ["-m", "-z", m.mnt], check=False)
    t_eq(p.returncode, 1, "wbcfs-stat -m -z")
    t_step("wbcfs-stat: SIGINT ends it with 0; not a wbcfs mount: exit 1 with a message")
    proc = subprocess.Popen(base + [m.mnt, "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    # SIGINT once it runs its loop (its header is out): a SIGINT while
    # python3 itself is still starting up is not the tool's to handle
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    t_check(ready, "wbcfs-stat printed nothing within 30 s")
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    out = first + out
    t_eq(proc.returncode, 0, "exit of wbcfs-stat after SIGINT:\n" + out.decode())
    t_check(b"Traceback" not in out, "traceback on SIGINT:\n" + out.decode())
    p = t_run([tool, env.tmp], check=False)
    t_eq(p.returncode, 1, "wbcfs-stat on a plain directory")
    t_check("not a" in p.stdout, "message: %r" % p.stdout)
    p = t_run([tool, "/proc"], check=False)
    t_eq(p.returncode, 1, "wbcfs-stat on /proc")
    t_check("not a wbcfs mount" in p.stdout, "message: %r" % p.stdout)


URING_SWITCH = "/sys/module/fuse/parameters/enable_uring"


def read_transport(m, ctl_name=".wbcfs"):
    with open(os.path.join(m.mnt, ctl_name, "transport")) as f:
        return f.read().split("\n")


def uring_switch(v=None):
    """The kernel's FUSE io_uring switch ("Y" or "N"); set it to v first."""
    if v is not None:
        with open(URING_SWITCH, "w") as f:
            f.write(v)
    with open(URING_SWITCH) as f:
        return f.read().strip()


TURNED_ON = "FUSE over io_uring turned on"


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def check_transport(env, dev):
    t_step("transport: /dev/fuse when asked; a root daemon turns the kernel's "
           "io_uring switch on for auto and uring, in one line; transport=uring "
           "refused in one line when it cannot")
    if not os.path.exists(URING_SWITCH):
        m = env.mount(dev, ["cache_size=64M", "transport=dev"])
        t_eq(read_transport(m)[0], "dev", "transport with transport=dev")
        env.umount(m)
        t_log("no FUSE over io_uring in this kernel: the rest is skipped")
        return
    # the switch only matters to daemons that ask for io_uring in INIT (and
    # a connection that has io_uring keeps it): put it back as it was
    was = uring_switch()
    try:
        uring_switch("N")
        m = env.mount(dev, ["cache_size=64M", "transport=dev"])
        t_eq(read_transport(m)[0], "dev", "transport with transport=dev")
        t_eq(uring_switch(), "N", "the switch after a transport=dev mount")
        env.umount(m)
        t_check(TURNED_ON not in m.daemon_log(), "transport=dev: %r" % m.daemon_log())

        # not root: nothing to turn on with; refused before the device is opened
        rc, out = env.mount(dev, ["cache_size=64M", "transport=uring"], expect_fail=True,
                            preexec=as_nobody)
        lines = [l for l in out.splitlines() if l.strip()]
        t_check(rc != 0, "transport=uring, not root, with the switch off exited %d" % rc)
        t_eq(len(lines), 1, "lines of the refusal %r" % out)
        t_check("enable_uring" in lines[0], "the refusal says how to enable it: %r" % out)
        t_eq(uring_switch(), "N", "the switch after a refused mount")

        for tra in ("auto", "uring"):
            uring_switch("N")
            m = env.mount(dev, ["cache_size=64M", "transport=" + tra])
            got = read_transport(m)
            t_eq(got[0], "uring", "transport=%s as root with the switch off" % tra)
            t_check(any(l.startswith("queues ") for l in got), "queues in %r" % got)
            t_eq(uring_switch(), "Y", "the switch after a transport=%s mount" % tra)
            env.umount(m)
            said = [l for l in m.daemon_log().splitlines() if TURNED_ON in l]
            t_eq(len(said), 1, "transport=%s: lines saying the switch was turned on" % tra)
        # already on: nothing to say
        m = env.mount(dev, ["cache_size=64M", "transport=auto"])
        t_eq(read_transport(m)[0], "uring", "transport=auto with the switch on")
        env.umount(m)
        t_check(TURNED_ON not in m.daemon_log(), "switch already on: %r" % m.daemon_log())
    finally:
        uring_switch(was)
    env.fsck(dev)


def body(env):
    if t_is_kernel():
        raise TSkip("the control directory is wbcfs's own")
    dev = env.new_fs(512 * MIB)
    t_step("a real /.wbcfs in the filesystem, to be shadowed")
    t_run(["debugfs", "-w", "-R", "mkdir /.wbcfs", dev])
    t_run(["debugfs", "-w", "-R", "mkdir /.wbcfs/hidden-by-ctl", dev])
    opts = ["cache_size=64M"] + ["%s=%d" % kv for kv in MOUNT_TUNABLES.items()
                                 if not kv[0].endswith("bytes")]
    m = env.mount(dev, opts)
    ctl = Ctl(m.mnt)
    check_visibility(env, m, ctl)
    check_refusals(m, ctl)
    check_non_root(m, ctl)
    check_vmstat_bdi(ctl)
    check_lockstat(m, ctl)
    check_tunables(ctl)
    check_throttle(env, dev, m, ctl)
    check_dirty_counts(m, ctl)
    check_live_writeback(m, ctl)
    check_stat_tool(env, m, ".wbcfs")
    env.umount(m)
    env.fsck(dev)
    check_reclaim(env, dev)
    check_transport(env, dev)

    t_step("ctl_name=.ctl: the control directory moves, the real /.wbcfs shows")
    m = env.mount(dev, ["cache_size=64M", "ctl_name=.ctl", "lockstat"])
    ctl = Ctl(m.mnt, ".ctl")
    names = os.listdir(m.mnt)
    t_check(".wbcfs" in names and ".ctl" not in names, "root entries %r" % names)
    t_eq(os.listdir(os.path.join(m.mnt, ".wbcfs")), ["hidden-by-ctl"], "the real /.wbcfs")
    t_eq(oct(os.stat(ctl.dir).st_mode), oct(0o40700), "mode of .ctl")
    t_eq(ctl.get("dirty_ratio"), 20, "dirty_ratio (default) under .ctl")
    t_check("nr_dirty" in ctl.vmstat(), "vmstat under .ctl")
    state, classes = lockstat(ctl)
    t_eq(state, "on", "lockstat state with -o lockstat")
    t_check(classes["fs_lock"][0] > 0, "fs_lock taken at mount: %r" % (classes["fs_lock"],))
    t_check("control directory hides it" not in m.daemon_log(), "warning without a shadow")
    check_stat_tool(env, m, ".ctl")
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


if __name__ == "__main__":
    t_main("ctl", body, deadline_s=300)
