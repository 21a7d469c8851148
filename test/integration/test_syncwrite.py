#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Synchronous writes are durable when they return.

Files are opened direct_io: the kernel sends no fsync after an O_DSYNC,
O_SYNC, RWF_DSYNC or RWF_SYNC write, it passes the flag in the WRITE and
leaves durability to the daemon. Each round below mounts with the journal
commit interval at an hour and periodic writeback off, so that only what
the operations themselves make durable is on the device, does them, kills
the daemon with SIGKILL at once, then checks the device twice: a copy
replayed by the kernel's ext4 (a read-write mount), and the device itself
replayed by wbcfs; each is then e2fsck -fn clean.

  flags       the issue's case: 12800 bytes, syncfs, then an O_DSYNC pwrite
              of 1024 bytes at 54208 (it was a hole after the crash); a
              file created O_SYNC and written (it was missing); pwritev2
              RWF_DSYNC onto a synced file, RWF_SYNC onto a new one;
              posix_fallocate through an O_DSYNC descriptor (its size);
              chattr +S: a plain write and a truncation of such a file;
              chattr +D: a create and a rename in such a directory.
  sync        -o sync: a new file written with plain writes, in a new
              directory, then renamed.
  dirsync     -o dirsync: mkdir, create, rename and unlink.

  powercut    (wbcfs only) the flags round's four writes under -o write_log:
              tools/wbcfs-crash checks every state a power cut could leave
              (flushes and prefixes between them, a random subset each)
              against them, each recorded as an fsync when it returned.

The vmstat counters nr_sync_writes, nr_dirsync_ops and nr_sync_metadata
show that the flags reached the daemon over the transport in use.

  errors      (wbcfs only, -o fault_inject) an RWF_DSYNC write to a file
              whose data writes fail returns EIO, as does an O_DSYNC one;
              once the fault is cleared, fsync of the same descriptor
              succeeds (the error was reported once, by the write), while
              another descriptor open since before reports it once. With
              every device write failing (fault_rate=1000), an RWF_DSYNC
              write returns EIO.

    WBCFS_BIN=build/wbcfs test/integration/test_syncwrite.py [--kernel]
Env: WBCFS_SYNCWRITE_ROUNDS (default flags,sync,dirsync,errors,powercut).
"""

import ctypes
import errno
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_syncfs, t_pattern, MIB, Mount, t_check, t_eq, t_errno, t_is_kernel,  # noqa: E402
                    t_is_mounted, t_log, t_main, t_run, t_step, t_write_all)

FAULT = "trusted.wbcfs.fault"
# nothing reaches the device unless the operations ask for it
QUIET = ["cache_size=64M", "commit=3600", "dirty_writeback_centisecs=0"]
IMG_BYTES = 128 * MIB

_libc = ctypes.CDLL(None, use_errno=True)


def write_new(path, content, flags=0):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | flags, 0o644)
    try:
        t_write_all(fd, content)
    finally:
        os.close(fd)


def vmstat(mnt):
    if t_is_kernel():
        return {}
    out = {}
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        for line in f:
            k, v = line.split()
            out[k] = int(v)
    return out


def counters_since(mnt, before, want):
    """Read now, checked by the returned function (after the data checks,
    which say more): each counter of @want grew by at least that much
    (wbcfs only)."""
    after = vmstat(mnt)

    def check():
        for k, n in want.items():
            if t_is_kernel():
                continue
            got = after.get(k, 0) - before.get(k, 0)
            t_log("vmstat %s: +%d" % (k, got))
            t_check(got >= n, "vmstat %s grew by %d, not %d or more: the daemon did not "
                    "see the synchronous operations" % (k, got, n))
    return check


def chattr(path, flags):
    t_run(["chattr", flags, path])


# -- the kill and the two replays

def kill_daemon(env, m):
    """SIGKILL the daemon and take down the dead mount (kernel: umount)."""
    env.kill(m)


def check_tree(root, want, what):
    """@want: rel -> bytes (content), int (size), "dir", "file" (exists)
    or None (absent). Every difference is listed."""
    bad = []
    for rel, w in sorted(want.items()):
        p = os.path.join(root, rel)
        if w is None:
            if os.path.lexists(p):
                bad.append("%s still exists" % rel)
        elif not os.path.lexists(p):
            bad.append("%s is missing" % rel)
        elif w == "dir":
            if not os.path.isdir(p):
                bad.append("%s is not a directory" % rel)
        elif w == "file":
            if not os.path.isfile(p):
                bad.append("%s is not a file" % rel)
        elif isinstance(w, int):
            if os.stat(p).st_size != w:
                bad.append("%s: size %d, want %d" % (rel, os.stat(p).st_size, w))
        else:
            with open(p, "rb") as f:
                got = f.read()
            if got != w:
                first = next((i for i in range(min(len(got), len(w))) if got[i] != w[i]),
                             min(len(got), len(w)))
                bad.append("%s: %d bytes, want %d, first difference at %d"
                           % (rel, len(got), len(w), first))
    t_check(not bad, "%s: %s" % (what, "; ".join(bad)))
    t_log("%s: %d entries as written" % (what, len(want)))


def check_replays(env, img, dev, want, tag):
    """The crashed device @dev (backed by @img): a copy replayed by the
    kernel's ext4, then @dev replayed by wbcfs; e2fsck -fn clean after each."""
    copy = os.path.join(env.tmp, tag + "-copy.img")
    t_run(["cp", "--sparse=always", img, copy])
    kdev = env.loop(copy)
    t_step("%s: the kernel's ext4 replays the journal" % tag)
    kmnt = env.mkdir("k-" + tag)
    t_run(["mount", "-t", "ext4", kdev, kmnt])
    k = Mount(kmnt, kdev, "kernel")
    env.mounts.append(k)
    try:
        check_tree(kmnt, want, "%s after the kernel's replay" % tag)
    finally:
        env.umount(k)
    env.fsck(kdev)
    env.detach(kdev)
    os.unlink(copy)
    t_step("%s: wbcfs replays the journal" % tag)
    m = env.mount(dev, ["ro"] if t_is_kernel() else ["cache_size=64M"])
    try:
        check_tree(m.mnt, want, "%s after wbcfs's replay" % tag)
    finally:
        env.umount(m)
    env.fsck(dev)


def new_dev(env, tag):
    img = env.image(IMG_BYTES, tag + ".img")
    dev = env.loop(img)
    env.mkfs(dev)
    return img, dev


def mount_quiet(env, dev, extra=()):
    opts = list(QUIET) + list(extra)
    if t_is_kernel():
        opts = [o for o in extra]   # the kernel's ext4 commits every 5 s
        mnt = env.mkdir("mnt-%d" % len(env.mounts))
        t_run(["mount", "-t", "ext4"] + (["-o", ",".join(opts)] if opts else []) + [dev, mnt])
        m = Mount(mnt, dev, "kernel")
        env.mounts.append(m)
        return m
    return env.mount(dev, opts)


# -- the rounds

def round_flags(env):
    t_step("flags: O_DSYNC, O_SYNC, RWF_DSYNC, RWF_SYNC, chattr +S and +D, then kill -9")
    img, dev = new_dev(env, "flags")
    m = mount_quiet(env, dev)
    mnt = m.mnt
    want = {}
    p = lambda rel: os.path.join(mnt, rel)  # noqa: E731

    # before the syncfs: the files the synchronous operations then change
    a0 = t_pattern(b"a", 12800)
    write_new(p("a"), a0)
    c0 = t_pattern(b"c", 8192)
    write_new(p("c"), c0)
    write_new(p("f"), t_pattern(b"f", 5000))
    write_new(p("s"), t_pattern(b"s", 20000))
    write_new(p("t"), t_pattern(b"t", 20000))
    os.mkdir(p("dd"))
    write_new(p("dd/old"), b"")
    chattr(p("s"), "+S")
    chattr(p("t"), "+S")
    chattr(p("dd"), "+D")
    t_syncfs(mnt)
    before = vmstat(mnt)

    t_step("O_DSYNC pwrite of 1024 bytes at 54208 (the issue's reproduction)")
    a1 = t_pattern(b"a1", 1024)
    fd = os.open(p("a"), os.O_WRONLY | os.O_DSYNC)
    t_eq(os.pwrite(fd, a1, 54208), 1024, "O_DSYNC pwrite")
    os.close(fd)
    want["a"] = a0 + bytes(54208 - len(a0)) + a1

    t_step("a file created O_SYNC and written")
    b = t_pattern(b"b", 5000)
    write_new(p("b"), b, os.O_SYNC)
    want["b"] = b

    t_step("pwritev2 RWF_DSYNC onto a synced file, RWF_SYNC onto a new one")
    c1 = t_pattern(b"c1", 3000)
    fd = os.open(p("c"), os.O_WRONLY)
    t_eq(os.pwritev(fd, [c1], 100000, os.RWF_DSYNC), 3000, "RWF_DSYNC pwritev2")
    os.close(fd)
    want["c"] = c0 + bytes(100000 - len(c0)) + c1
    d = t_pattern(b"d", 7000)
    fd = os.open(p("d"), os.O_CREAT | os.O_WRONLY, 0o644)
    t_eq(os.pwritev(fd, [d], 0, os.RWF_SYNC), 7000, "RWF_SYNC pwritev2")
    os.close(fd)
    want["d"] = d

    t_step("posix_fallocate through an O_DSYNC descriptor")
    fd = os.open(p("f"), os.O_WRONLY | os.O_DSYNC)
    os.posix_fallocate(fd, 0, MIB)
    os.close(fd)
    want["f"] = MIB

    t_step("chattr +S: a plain write, a truncation")
    s1 = t_pattern(b"s1", 4096)
    fd = os.open(p("s"), os.O_WRONLY)
    t_eq(os.pwrite(fd, s1, 30000), 4096, "write to a +S file")
    os.close(fd)
    want["s"] = t_pattern(b"s", 20000) + bytes(10000) + s1
    os.truncate(p("t"), 5000)
    want["t"] = t_pattern(b"t", 5000)

    t_step("chattr +D: a create and a rename in the directory")
    write_new(p("dd/new"), b"")
    os.rename(p("dd/old"), p("dd/renamed"))
    want["dd/new"] = "file"
    want["dd/renamed"] = "file"
    want["dd/old"] = None

    counted = counters_since(mnt, before, {"nr_sync_writes": 5, "nr_sync_metadata": 2,
                                           "nr_dirsync_ops": 2})
    kill_daemon(env, m)
    check_replays(env, img, dev, want, "flags")
    counted()


def round_sync_mount(env):
    t_step("-o sync: plain writes and directory changes, then kill -9")
    img, dev = new_dev(env, "sync")
    m = mount_quiet(env, dev, ["sync"])
    t_check("sync" in open("/proc/self/mounts").read().split(m.mnt, 1)[1].split("\n")[0],
            "/proc/mounts shows sync for %s" % m.mnt)
    before = vmstat(m.mnt)
    os.mkdir(os.path.join(m.mnt, "d"))
    x = t_pattern(b"x", 6000)
    with open(os.path.join(m.mnt, "d", "x"), "wb") as f:
        f.write(x[:4000])
        f.flush()
        f.write(x[4000:])
    os.rename(os.path.join(m.mnt, "d", "x"), os.path.join(m.mnt, "d", "y"))
    counted = counters_since(m.mnt, before, {"nr_sync_writes": 2, "nr_dirsync_ops": 3})
    kill_daemon(env, m)
    check_replays(env, img, dev, {"d": "dir", "d/x": None, "d/y": x}, "sync")
    counted()


def round_dirsync_mount(env):
    t_step("-o dirsync: mkdir, create, rename, unlink, then kill -9")
    img, dev = new_dev(env, "dirsync")
    m = mount_quiet(env, dev, ["dirsync"])
    write_new(os.path.join(m.mnt, "gone"), b"")
    write_new(os.path.join(m.mnt, "r0"), b"")
    t_syncfs(m.mnt)
    before = vmstat(m.mnt)
    os.mkdir(os.path.join(m.mnt, "m"))
    write_new(os.path.join(m.mnt, "m", "e"), b"")
    os.rename(os.path.join(m.mnt, "r0"), os.path.join(m.mnt, "m", "r1"))
    os.unlink(os.path.join(m.mnt, "gone"))
    counted = counters_since(m.mnt, before, {"nr_dirsync_ops": 4})
    kill_daemon(env, m)
    check_replays(env, img, dev, {"m": "dir", "m/e": "file", "m/r1": "file", "r0": None,
                                  "gone": None}, "dirsync")
    counted()


def round_errors(env):
    if t_is_kernel():
        t_log("errors: fault injection is wbcfs's only")
        return
    t_step("errors: a synchronous write whose sync fails returns EIO, reported once")
    img, dev = new_dev(env, "errors")
    m = env.mount(dev, ["fault_inject", "cache_size=64M"])
    e = os.path.join(m.mnt, "e")
    e0 = t_pattern(b"e", 8192)
    write_new(e, e0)
    fd = os.open(e, os.O_WRONLY)
    os.fsync(fd)
    fd2 = os.open(e, os.O_WRONLY)
    fd3 = os.open(e, os.O_WRONLY | os.O_DSYNC)
    os.setxattr(e, FAULT, b"write")
    x = t_pattern(b"x", 4096)
    t_errno(errno.EIO, os.pwritev, fd, [x], 4096, os.RWF_DSYNC,
            what="RWF_DSYNC write under a write fault")
    os.setxattr(e, FAULT, b"none")
    t_step("fault cleared: fsync of the writing descriptor succeeds (the write "
           "reported the error), one open since before reports it once")
    os.fsync(fd)
    t_errno(errno.EIO, os.fsync, fd2, what="fsync of a descriptor open since before")
    os.fsync(fd2)
    with open(e, "rb") as f:
        t_check(f.read() == e0[:4096] + x, "e holds the RWF_DSYNC write")

    t_step("an O_DSYNC descriptor: its write under a write fault gets EIO, once")
    os.setxattr(e, FAULT, b"write")
    y = t_pattern(b"y", 4096)
    t_errno(errno.EIO, os.pwrite, fd3, y, 0, what="O_DSYNC write under a write fault")
    os.setxattr(e, FAULT, b"none")
    os.fsync(fd3)
    with open(e, "rb") as f:
        t_check(f.read() == y + x, "e holds the O_DSYNC write")

    t_step("every device write failing (fault_rate=1000): an RWF_DSYNC write gets EIO")
    os.setxattr(m.mnt, FAULT + "_rate", b"1000")
    try:
        t_errno(errno.EIO, os.pwritev, fd, [t_pattern(b"z", 4096)], 0, os.RWF_DSYNC,
                what="RWF_DSYNC write while every device write fails")
    finally:
        os.setxattr(m.mnt, FAULT + "_rate", b"0")
    os.fsync(fd)
    os.close(fd)
    # that failure is news to the others: their fsync reports it, once
    # (their close does not, as the kernel's ext4's)
    for d in (fd2, fd3):
        t_errno(errno.EIO, os.fsync, d, what="fsync of a descriptor that missed a failure")
        os.fsync(d)
        os.close(d)
    env.umount(m)
    env.fsck(dev)


def round_powercut(env):
    """The synchronous writes under power cuts: tools/wbcfs-crash rebuilds
    from the write log every state the device's volatile cache could be
    left in; each synchronous write is recorded as an fsync at the log's
    position when it returned, so every state after it must hold it."""
    if t_is_kernel():
        t_log("powercut: the write log is wbcfs's only")
        return
    import crashwork
    import test_crash
    t_step("powercut: synchronous writes under a write log, then their crash states")
    dev = env.new_fs(test_crash.IMG_BYTES, name="powercut.img", fill=test_crash.STALE)
    base = os.path.join(env.tmp, "powercut-base.img")
    after = os.path.join(env.tmp, "powercut-after.img")
    log = os.path.join(env.tmp, "powercut.wlog")
    record = os.path.join(env.tmp, "powercut.rec")
    test_crash.copy_dev(dev, base)
    m = env.mount(dev, QUIET + ["write_log=" + log])
    rec = crashwork.Record(log, record)
    p = lambda rel: os.path.join(m.mnt, rel)  # noqa: E731
    try:
        a0 = t_pattern(b"a", 12800)
        write_new(p("a"), a0)
        t_syncfs(m.mnt)
        rec.fsynced("a", a0, rec.pos())
        rec.mod("a")
        a1 = t_pattern(b"a1", 1024)
        fd = os.open(p("a"), os.O_WRONLY | os.O_DSYNC)
        os.pwrite(fd, a1, 54208)
        os.close(fd)
        rec.fsynced("a", a0 + bytes(54208 - len(a0)) + a1, rec.pos())
        b = t_pattern(b"b", 5000)
        write_new(p("b"), b, os.O_SYNC)
        rec.fsynced("b", b, rec.pos())
        for rel, flag in (("c", os.RWF_DSYNC), ("d", os.RWF_SYNC)):
            x = t_pattern(rel.encode(), 7000)
            fd = os.open(p(rel), os.O_CREAT | os.O_WRONLY, 0o644)
            os.pwritev(fd, [x], 0, flag)
            os.close(fd)
            rec.fsynced(rel, x, rec.pos())
        # later changes, never synced: the unmount's flushes come after them
        write_new(p("later"), t_pattern(b"later", 300000))
    finally:
        rec.close()
    env.umount(m)
    test_crash.copy_dev(dev, after)
    rc, out = test_crash.run_tool(["--base", base, "--log", log, "--oracle", record,
                                   "--seed", "1", "--states", "0", "--random", "1",
                                   "--full-every", "4", "--verify-final", after,
                                   "--max-details", "4"])
    print(out, flush=True)
    t_check(rc == 0, "powercut: crash states lost a synchronous write (above)")


ROUNDS = {"flags": round_flags, "sync": round_sync_mount, "dirsync": round_dirsync_mount,
          "errors": round_errors, "powercut": round_powercut}


def body(env):
    for name in os.environ.get("WBCFS_SYNCWRITE_ROUNDS", ",".join(ROUNDS)).split(","):
        ROUNDS[name](env)


if __name__ == "__main__":
    if "--kernel" in sys.argv:
        os.environ["WBCFS_TEST_TARGET"] = "kernel"
    t_main("syncwrite", body, deadline_s=600)
