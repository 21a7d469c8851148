#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Blocks freed by a transaction that has not committed are not reused.

crash: on a nearly full 128 MiB filesystem (commit=600, so nothing
commits by itself), a 4 MiB file X is written and fsync'ed, the rest is
filled and synced, X is unlinked (no sync) and Y written, which has room
only in X's blocks; periodic writeback writes Y, then the daemon is
killed with SIGKILL. The kernel's ext4 forces a commit before it hands
out a block whose free has not committed; so must wbcfs (vmstat:
nr_alloc_commits, nr_writeback_alloc_waits). After the replay (wbcfs's
on the image, the kernel's on a copy) X is gone or holds its own bytes,
never Y's, and e2fsck -fn is clean.

enospc: ENOSPC stays exact. On a full filesystem a file is unlinked
(no sync), and a file of nearly its size is written, fsync'ed and reads
back; a further write gets ENOSPC within a few pages. The same with
fallocate. Without a journal (mkfs -O ^has_journal) frees are at once:
the same writes succeed and no commit is forced.

    WBCFS_BIN=build/wbcfs test/integration/test_busy.py
"""

import ctypes
import errno
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_syncfs, MIB, t_check, t_eq, t_is_kernel, t_log, t_main,  # noqa: E402
                    t_run, t_step, TSkip)

LIBC = ctypes.CDLL(None, use_errno=True)
FS_SIZE = 128 * MIB
X_SIZE = 4 * MIB
PAGE = 4096
OPTS = ["prefault=0", "commit=600", "dirty_expire_centisecs=100",
        "dirty_writeback_centisecs=50"]


def pattern(tag, n):
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (n // len(seed) + 1))[:n]


def vmstat(mnt):
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        vm = {k: int(v) for k, v in (line.split() for line in f if line.strip())}
    for k in ("nr_alloc_commits", "nr_writeback_alloc_waits", "nr_alloc_busy_refused"):
        vm.setdefault(k, -1)    # a daemon without them: the checks fail
    return vm


def write_file(path, data, sync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + MIB])
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fill(path):
    """Write @path until ENOSPC (MiB pieces, then pages), fsync it.
    Returns the bytes accepted."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    size = MIB
    try:
        while True:
            try:
                total += os.write(fd, b"f" * size)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if size == PAGE:
                    break
                size = PAGE
        os.fsync(fd)
    finally:
        os.close(fd)
    return total


def write_until_enospc(path, limit):
    """Write pages to @path until ENOSPC or @limit bytes; returns bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    try:
        while total < limit:
            try:
                total += os.write(fd, b"w" * PAGE)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return total


def full_with(env, m, name, size):
    """Fill most of the filesystem, write @name (@size bytes, fsync'ed),
    fill the rest; everything synced. Returns @name's bytes."""
    st = os.statvfs(m.mnt)
    before = st.f_bfree * st.f_frsize - 3 * size
    write_file(os.path.join(m.mnt, "fill1"), b"a" * max(before, 0))
    data = pattern(name, size)
    write_file(os.path.join(m.mnt, name), data)
    n = fill(os.path.join(m.mnt, "fill2"))
    t_syncfs(m.mnt)
    st = os.statvfs(m.mnt)
    t_log("full: fill2 took %d KiB; %d blocks free, %d available" %
          (n // 1024, st.f_bfree, st.f_bavail))
    return data


def wait_written(m, written0, pages, timeout_s=120):
    """Periodic writeback has written @pages more pages, and what stays
    dirty is metadata (the running transaction's, which commit=600 keeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        vm = vmstat(m.mnt)
        if (vm["nr_written"] - written0 >= pages and vm["nr_dirty"] < 200 and
                vm["nr_writeback"] == 0):
            return vm
        time.sleep(0.2)
    raise AssertionError("pages not written after %ds: %r" % (timeout_s, vmstat(m.mnt)))


def kill_daemon(env, m):
    env.kill(m)


def copy_image(env, dev, name):
    img = os.path.join(env.tmp, name)
    t_run(["cp", "--sparse=always", dev, img])
    return env.loop(img)


def check_x(root, xdata, ydata, who):
    path = os.path.join(root, "x")
    if not os.path.exists(path):
        t_log("%s: x is gone" % who)
        return
    with open(path, "rb") as f:
        got = f.read()
    t_check(got[:PAGE] != ydata[:PAGE] and ydata[PAGE:2 * PAGE] not in got,
            "%s: x holds y's data (a block reused before its free committed)" % who)
    t_check(got == xdata, "%s: x is back but not with its own %d bytes (%d bytes)"
            % (who, len(xdata), len(got)))
    t_log("%s: x is back with its own data" % who)


def crash(env):
    t_step("crash: y written into x's freed blocks, then kill -9")
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    xdata = full_with(env, m, "x", X_SIZE)
    vm0 = vmstat(m.mnt)
    os.unlink(os.path.join(m.mnt, "x"))
    # room for y only in x's blocks (the rest is the metadata reserve)
    ydata = pattern("y", X_SIZE - 16 * PAGE)
    tries = 0
    while True:
        try:
            write_file(os.path.join(m.mnt, "y"), ydata, sync=False)
            break
        except OSError as e:
            # x's FORGET may come late; the daemon retries for a while
            tries += 1
            if e.errno != errno.ENOSPC or tries > 20:
                raise
            time.sleep(0.2)
    vm = wait_written(m, vm0["nr_written"], len(ydata) // PAGE)
    t_log("forced commits: %d, writeback alloc waits: %d, refused: %d"
          % (vm["nr_alloc_commits"] - vm0["nr_alloc_commits"],
             vm["nr_writeback_alloc_waits"] - vm0["nr_writeback_alloc_waits"],
             vm["nr_alloc_busy_refused"] - vm0["nr_alloc_busy_refused"]))
    kill_daemon(env, m)

    t_step("crash: the kernel's ext4 replays a copy")
    kdev = copy_image(env, dev, "kernel.img")
    kmnt = env.mkdir("kreplay")
    t_run(["mount", "-t", "ext4", kdev, kmnt])
    try:
        check_x(kmnt, xdata, ydata, "kernel replay")
    finally:
        t_run(["umount", kmnt])
    env.fsck(kdev)

    t_step("crash: wbcfs replays the image")
    m = env.mount(dev, OPTS)
    check_x(m.mnt, xdata, ydata, "wbcfs replay")
    env.umount(m)
    t_check("journal recovered" in m.daemon_log(),
            "wbcfs did not say it recovered the journal:\n%s" % m.daemon_log())
    env.fsck(dev)
    t_check(vm["nr_alloc_commits"] > vm0["nr_alloc_commits"],
            "writeback did not force a commit before reusing x's blocks")
    t_check(vm["nr_writeback_alloc_waits"] > vm0["nr_writeback_alloc_waits"],
            "writeback did not wait for a commit")


def enospc(env, journal):
    tag = "journal" if journal else "no journal"
    t_step("enospc (%s): a file the size of an unlinked one fits, more does not" % tag)
    dev = env.new_fs(FS_SIZE, mkfs_opts=None if journal else ["-O", "^has_journal"])
    m = env.mount(dev, OPTS)
    full_with(env, m, "z", X_SIZE)
    vm0 = vmstat(m.mnt)
    os.unlink(os.path.join(m.mnt, "z"))
    ydata = pattern("y2", X_SIZE - 16 * PAGE)
    write_file(os.path.join(m.mnt, "y"), ydata)     # fsync'ed: writeback here
    with open(os.path.join(m.mnt, "y"), "rb") as f:
        t_check(f.read() == ydata, "%s: y does not read back" % tag)
    more = write_until_enospc(os.path.join(m.mnt, "more"), X_SIZE)
    t_log("%s: %d KiB more accepted before ENOSPC" % (tag, more // 1024))
    t_check(more < X_SIZE, "%s: no ENOSPC after %d bytes more" % (tag, more))
    t_check(more <= 64 * PAGE, "%s: %d KiB more accepted: space counted twice?"
            % (tag, more // 1024))
    vm = vmstat(m.mnt)
    commits = vm["nr_alloc_commits"] - vm0["nr_alloc_commits"]
    t_log("%s: forced commits: %d" % (tag, commits))
    if journal:
        t_check(commits > 0, "%s: no commit forced for y's blocks" % tag)
    else:
        t_eq(commits, 0, "%s: commits forced" % tag)

    t_step("enospc (%s): fallocate into an unlinked file's blocks" % tag)
    os.unlink(os.path.join(m.mnt, "more"))
    os.unlink(os.path.join(m.mnt, "y"))
    vm0 = vmstat(m.mnt)
    # the unlinks must not have committed: fallocate waits for their commit
    fd = os.open(os.path.join(m.mnt, "fa"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        tries = 0
        while True:
            try:
                os.posix_fallocate(fd, 0, X_SIZE - 16 * PAGE)
                break
            except OSError as e:
                tries += 1
                if e.errno != errno.ENOSPC or tries > 20:
                    raise
                time.sleep(0.2)      # y's FORGET may come late
        t_eq(os.fstat(fd).st_size, X_SIZE - 16 * PAGE, "%s: fallocated size" % tag)
    finally:
        os.close(fd)
    vm = vmstat(m.mnt)
    commits = vm["nr_alloc_commits"] - vm0["nr_alloc_commits"]
    t_log("%s: fallocate: forced commits: %d" % (tag, commits))
    if journal:
        t_check(commits > 0, "%s: no commit forced for the fallocate" % tag)
    else:
        t_eq(commits, 0, "%s: commits forced by the fallocate" % tag)
    fd = os.open(os.path.join(m.mnt, "fa2"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        e = None
        try:
            os.posix_fallocate(fd, 0, X_SIZE)
        except OSError as err:
            e = err
        t_check(e is not None and e.errno == errno.ENOSPC,
                "%s: fallocate past the free space did not get ENOSPC" % tag)
    finally:
        os.close(fd)
    env.umount(m)
    env.fsck(dev)


def body(env):
    if t_is_kernel():
        raise TSkip("wbcfs's control directory and kill -9 only")
    crash(env)
    enospc(env, True)
    enospc(env, False)


if __name__ == "__main__":
    t_main("busy", body, deadline_s=600)
