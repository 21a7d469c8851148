#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Device errors, injected per file with -o fault_inject.

For each io engine (WBCFS_IO_ENGINE, or uring, aio and psync in turn):

  write errors   file A (safe content already fsync'ed) gets
                 trusted.wbcfs.fault=write; a write then fsync gives EIO,
                 a second fsync EIO again (the pages are kept dirty and
                 retried); as the kernel's ext4, close reports nothing: the
                 close of a second writable fd open since before gives no
                 EIO and sends no FLUSH (/.wbcfs/vmstat nr_flush_requests),
                 and the fsync of a third reports the failure exactly once,
                 as does a read-only one's, after the fault is cleared too;
                 meanwhile file B is written, fsync'ed and read back fine.
                 Fault cleared: fsync of A succeeds, close too, A reads back
                 what was written.
  close_errors   the same mount option as NFS's behaviour: every writer's
                 close sends FLUSH and the close of a writer open since
                 before the failure gives EIO, once; a read-only one's close
                 still sends nothing.
  read errors    after a fresh mount (cold cache) file R with fault=read
                 gives EIO on read while B still reads; cleared, R reads its
                 data.  fault_meta=read: listing a directory not yet read
                 gives EIO; cleared, it lists and its file reads.
  lost at umount file L keeps fault=write through umount: the daemon names
                 it lost and exits non-zero; L's newly allocated range reads
                 as zeros (never stale blocks).
  metadata       trusted.wbcfs.fault_meta=write: fsync of a new file and of
                 its directory give EIO, other files are still read; cleared,
                 fsync succeeds.  Left set through umount: exit non-zero, the
                 superblock stays "not clean", the next mount is refused.

Each round ends with e2fsck -fn clean and the kernel's ext4 (ro) seeing
A, B and R as written.

    WBCFS_BIN=build/wbcfs test/integration/test_ioerr.py
    WBCFS_IO_ENGINE=aio WBCFS_BIN=build/wbcfs test/integration/test_ioerr.py
"""

import errno
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_pattern, MIB, TFail, TSkip, t_check, t_eq, t_errno, t_is_kernel,  # noqa: E402
                    t_log, t_main, t_read_all, t_run, t_step, t_write_all)
from wbtrace import vmstat  # noqa: E402

FAULT = "trusted.wbcfs.fault"
ENGINES = ("uring", "aio", "psync")


def set_fault(path, mode):
    os.setxattr(path, FAULT, mode.encode())
    t_eq(os.getxattr(path, FAULT), mode.encode(), "%s of %s" % (FAULT, path))


def write_file(path, content):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    t_write_all(fd, content)
    os.fsync(fd)
    os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def check_b(mnt, round_):
    """The daemon keeps serving other files: write, fsync, read back B."""
    path = os.path.join(mnt, "b")
    content = t_pattern(b"b%d" % round_, 2 * MIB + 123)
    write_file(path, content)
    t_check(read_file(path) == content, "B reads back what was written")
    return content


def flushes(mnt):
    """FLUSH requests the daemon has served: one per close(2) that sends it."""
    v = vmstat(mnt)
    if "nr_flush_requests" not in v:
        raise TFail("/.wbcfs/vmstat has no nr_flush_requests")
    return v["nr_flush_requests"]


def write_errors(env, mnt):
    a = os.path.join(mnt, "a")
    safe = t_pattern(b"a-safe", 1 * MIB)
    write_file(a, safe)

    t_step("fault=write on A: write + fsync gives EIO, twice")
    set_fault(a, "write")
    fd1 = os.open(a, os.O_RDWR)
    fd2 = os.open(a, os.O_WRONLY)
    fdw = os.open(a, os.O_WRONLY)
    fdr = os.open(a, os.O_RDONLY)
    fdr2 = os.open(a, os.O_RDONLY)
    over = t_pattern(b"a-over", 256 * 1024)
    tail = t_pattern(b"a-tail", 512 * 1024 + 100)
    t_write_all(fd1, over, 64 * 1024)            # overwrites safe blocks
    t_write_all(fd1, tail, len(safe))            # and allocates new ones
    want = bytearray(safe)
    want[64 * 1024:64 * 1024 + len(over)] = over
    want += tail
    t_errno(errno.EIO, os.fsync, fd1, what="fsync of A under a write fault")
    t_errno(errno.EIO, os.fsync, fd1, what="second fsync of A (pages kept dirty)")
    t_check(t_read_all(fd1, len(want), 0) == bytes(want),
            "A still reads what was written (from the cache)")

    t_step("meanwhile B is written, fsync'ed and read back")
    b = check_b(mnt, 0)

    t_step("close of a second writable fd open on A since before: no EIO, no FLUSH")
    f0 = flushes(mnt)
    os.close(fd2)                                # raises on EIO
    fd3 = os.open(a, os.O_WRONLY)                # opened after: nothing to report
    os.close(fd3)
    t_eq(flushes(mnt) - f0, 0, "FLUSH requests for two writers' close")
    t_step("close of a read-only fd open since before: no EIO (no FLUSH)")
    try:
        os.close(fdr2)
        ro_close = "ok"
    except OSError as e:
        ro_close = os.strerror(e.errno)
    t_eq(ro_close, "ok", "close of a read-only fd of A")

    t_step("fault cleared: fsync of A succeeds, close too, A is intact")
    set_fault(a, "none")
    os.fsync(fd1)
    t_errno(errno.EIO, os.fsync, fdr,
            what="first fsync of a read-only fd open since before the failure")
    os.fsync(fdr)                                # reported once
    os.close(fdr)                                # no FLUSH: nothing to report
    t_errno(errno.EIO, os.fsync, fdw,
            what="first fsync of a writable fd open since before the failure")
    os.fsync(fdw)                                # reported once
    os.close(fdw)
    t_check(t_read_all(fd1, len(want), 0) == bytes(want), "A after recovery")
    os.close(fd1)
    t_check(read_file(a) == bytes(want), "A reopened")
    return bytes(want), b


def close_errors(env, dev, opts):
    t_step("close_errors: a writer's close sends FLUSH and reports the failure, once")
    m = env.mount(dev, opts + ["close_errors"])
    c = os.path.join(m.mnt, "c")
    write_file(c, t_pattern(b"c-safe", 64 * 1024))
    set_fault(c, "write")
    fd1 = os.open(c, os.O_RDWR)
    fd2 = os.open(c, os.O_WRONLY)
    fdr = os.open(c, os.O_RDONLY)
    new = t_pattern(b"c-new", 128 * 1024 + 7)
    t_write_all(fd1, new, 0)
    t_errno(errno.EIO, os.fsync, fd1, what="fsync of C under a write fault")
    f0 = flushes(m.mnt)
    t_errno(errno.EIO, os.close, fd2, what="close of a writer of C open since before")
    fd3 = os.open(c, os.O_WRONLY)                # opened after: nothing to report
    os.close(fd3)
    os.close(fdr)                                # read-only: no FLUSH, no report
    t_eq(flushes(m.mnt) - f0, 2, "FLUSH requests for two writers' and a reader's close")
    set_fault(c, "none")
    os.fsync(fd1)
    os.close(fd1)
    t_check(read_file(c) == new, "C after recovery")
    env.umount(m)
    return new


def read_errors(env, dev, opts, r_content, b_content):
    t_step("cold cache: fault=read on R gives EIO; B still reads")
    m = env.mount(dev, opts)
    r = os.path.join(m.mnt, "r")
    set_fault(r, "read")
    fd = os.open(r, os.O_RDONLY)
    t_errno(errno.EIO, os.pread, fd, 4096, 0, what="cold read of R")
    t_errno(errno.EIO, os.pread, fd, 4096, 300 * 1024, what="another page of R")
    t_check(read_file(os.path.join(m.mnt, "b")) == b_content, "B reads fine")
    t_step("fault cleared: R reads its data")
    os.removexattr(r, FAULT)
    t_eq(os.getxattr(r, FAULT), b"none", "fault after removexattr")
    t_check(t_read_all(fd, len(r_content), 0) == r_content, "R after the fault")
    os.close(fd)

    t_step("fault_meta=read: listing an uncached directory gives EIO")
    sub = os.path.join(m.mnt, "sub")
    os.setxattr(m.mnt, FAULT + "_meta", b"read")
    t_errno(errno.EIO, os.listdir, sub, what="listdir of sub under a metadata read fault")
    os.setxattr(m.mnt, FAULT + "_meta", b"none")
    t_eq(os.listdir(sub), ["s"], "listdir of sub after the fault")
    t_eq(read_file(os.path.join(sub, "s")), b"s" * 3000, "sub/s")
    return m


def lost_at_umount(env, m):
    t_step("L keeps fault=write through umount: reported lost, exit non-zero")
    # freed blocks with old contents: L's new blocks would show them
    junk = os.path.join(m.mnt, "junk")
    write_file(junk, b"\xab" * (4 * MIB))
    os.unlink(junk)
    os.sync()
    path = os.path.join(m.mnt, "l")
    write_file(path, b"")
    set_fault(path, "write")
    fd = os.open(path, os.O_WRONLY)
    t_write_all(fd, t_pattern(b"lost", 96 * 1024))
    t_errno(errno.EIO, os.fsync, fd, what="fsync of L")
    os.close(fd)
    rc, log = umount_daemon_fails(env, m)
    t_check(rc != 0, "daemon exit status is non-zero after losing data")
    t_check("could not be written and are lost" in log, "loss named in the log")
    t_check("write error at offset 0" in log, "the first failed write logged")


def umount_daemon_fails(env, m):
    """umount(8) must work; the daemon's exit status is the caller's to
    judge (env.umount would fail on a non-zero one). Returns (rc, log)."""
    p = subprocess.run(["umount", m.mnt], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    if p.returncode != 0:
        raise TFail("umount %s: %s\n%s" % (m.mnt, p.stdout, m.daemon_log()))
    m.mounted = False
    rc = m.proc.wait(120)
    env.mounts.remove(m)
    log = m.daemon_log()
    t_log("daemon exited %d; log:\n%s" % (rc, log.strip()))
    return rc, log


def check_on_disk(env, dev, want):
    env.fsck(dev)
    t_step("kernel ext4 (ro) sees the data as written")
    k = env.kernel_ro(dev)
    try:
        for name, content in sorted(want.items()):
            got = read_file(os.path.join(k.mnt, name))
            t_check(got == content, "kernel ext4 reads %s as written (%d vs %d bytes)"
                    % (name, len(got), len(content)))
        lpath = os.path.join(k.mnt, "l")
        if os.path.exists(lpath):
            got = read_file(lpath)
            t_check(got.count(0) == len(got), "lost range of L reads as zeros")
    finally:
        env.umount(k)


def meta_errors(env, dev, opts):
    t_step("fault_meta=write: fsync of a new file and of its directory give EIO")
    m = env.mount(dev, opts)
    set_fault(m.mnt, "none")                     # the file's own: untouched
    os.setxattr(m.mnt, FAULT + "_meta", b"write")
    t_eq(os.getxattr(m.mnt, FAULT + "_meta"), b"write", "fault_meta")
    n = os.path.join(m.mnt, "n")
    n_content = t_pattern(b"n", 40 * 1024)
    fd = os.open(n, os.O_CREAT | os.O_WRONLY, 0o644)
    t_write_all(fd, n_content)
    t_errno(errno.EIO, os.fsync, fd, what="fsync of N under a metadata write fault")
    dfd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
    t_errno(errno.EIO, os.fsync, dfd, what="fsync of the directory")
    t_check(read_file(os.path.join(m.mnt, "r")) is not None, "R still reads")
    t_step("fault_meta cleared: fsync of N and of the directory succeed")
    os.setxattr(m.mnt, FAULT + "_meta", b"none")
    os.fsync(fd)
    os.fsync(dfd)
    os.close(dfd)
    os.close(fd)
    env.umount(m)
    return n_content


def has_journal(dev):
    out = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
    return "has_journal" in out


def meta_lost_at_umount(env, dev, opts):
    t_step("fault_meta=write through umount: exit non-zero, not marked clean")
    m = env.mount(dev, opts)
    os.setxattr(m.mnt, FAULT + "_meta", b"write")
    os.mkdir(os.path.join(m.mnt, "pdir"))
    rc, log = umount_daemon_fails(env, m)
    t_check(rc != 0, "daemon exit status is non-zero when metadata was not written")
    if has_journal(dev):
        # nothing uncommitted reached the device: the last commit stands,
        # and needs_recovery sends the next mount through the replay
        t_check("journal could not be emptied" in log, "the failed commit named in the log")
        out = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
        t_check("needs_recovery" in out, "needs_recovery cleared after a failed commit")
        m = env.mount(dev, opts)
        t_check(not os.path.exists(os.path.join(m.mnt, "pdir")),
                "a directory whose commit failed came back")
        env.umount(m)
        return
    t_check("left marked not clean" in log, "unwritten metadata named in the log")
    state = env.sb_state(dev)
    t_check(state.startswith("not clean"), "superblock state %r" % state)
    rc, out = env.mount(dev, opts, expect_fail=True)
    t_check(rc != 0, "a not clean filesystem is refused")


def one_engine(env, engine):
    t_log("=== io_engine=%s ===" % engine)
    dev = env.new_fs(256 * MIB, name="disk-%s.img" % engine)
    opts = ["fault_inject", "io_engine=" + engine, "cache_size=64M"]
    m = env.mount(dev, opts)
    r_content = t_pattern(b"r", 700 * 1024 + 5)
    write_file(os.path.join(m.mnt, "r"), r_content)
    os.mkdir(os.path.join(m.mnt, "sub"))
    write_file(os.path.join(m.mnt, "sub", "s"), b"s" * 3000)
    a, b = write_errors(env, m.mnt)
    env.umount(m)
    c = close_errors(env, dev, opts)
    check_on_disk(env, dev, {"a": a, "b": b, "r": r_content, "c": c})

    m = read_errors(env, dev, opts, r_content, b)
    b2 = check_b(m.mnt, 1)
    lost_at_umount(env, m)
    check_on_disk(env, dev, {"a": a, "b": b2, "r": r_content})

    n = meta_errors(env, dev, opts)
    check_on_disk(env, dev, {"a": a, "b": b2, "r": r_content, "n": n})
    meta_lost_at_umount(env, dev, opts)
    env.fsck(dev)


def body(env):
    if t_is_kernel():
        raise TSkip("fault injection is a wbcfs mount option")
    eng = os.environ.get("WBCFS_IO_ENGINE")
    for engine in ([eng] if eng else ENGINES):
        one_engine(env, engine)


if __name__ == "__main__":
    t_main("ioerr", body, deadline_s=600)
