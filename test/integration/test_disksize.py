#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Ordered mode: no commit publishes a size whose data is not on the device.

Files are written and not synced, then an inode change that logs the inode
(chmod, rename, link, setxattr, utime) follows, and an fsync of another
file commits the running transaction; kill -9. An fsync'ed file appended
to and then chmod'ed too. After the replay, by wbcfs and by the kernel's
ext4 each on its own copy of the device, every such file must hold a
prefix of what was written (the kernel's ext4 shows them empty, or as
fsync'ed): never NUL bytes where its content is known not to be NUL
(the size on disk grows only with written data, ext4's i_disksize).
e2fsck -fn is clean after each replay. Files fsync'ed after a truncate
up, a fallocate or an fdatasync, or synced by sync(2), have their whole
size.

Then power cuts: the same changes (crashwork.py's disksize workload) on a
mount that logs its device writes, and tools/wbcfs-crash rebuilds the
states a power cut could leave (at flushes, and with any subset of the
writes in flight since dropped from the device's cache): in each, after
wbcfs's replay and after the kernel's, every file holds a prefix of its
data, and e2fsck -fn is clean.

    WBCFS_BIN=build/wbcfs test/integration/test_disksize.py
Env: WBCFS_SEED (default: random, printed), WBCFS_DISKSIZE_STATES (30).
"""

import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crashwork  # noqa: E402
from wbtest import (MIB, TFail, t_check, t_is_kernel, t_is_mounted,  # noqa: E402
                    t_log, t_main, t_run, t_step, t_wbcfs_bin)

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get("WBCFS_CRASH") or os.path.join(HERE, "..", "..", "tools",
                                                      "wbcfs-crash")
STALE = b"stale block, never file data "

# `seq 1 20000`: 108894 bytes, no NUL byte
SEQ = b"".join(b"%d\n" % i for i in range(1, 20001))
OLD = SEQ[:50000]
# writeback never starts by itself during the test: only the fsync and
# the commits write anything
OPTS = ["cache_size=64M", "dirty_expire_centisecs=100000", "dirty_writeback_centisecs=0"]


def write_file(path, data, mode="wb"):
    with open(path, mode) as f:
        f.write(data)


def scenario(mnt):
    """The changes; returns {name: (content written, content fsync'ed)}."""
    want = {}
    write_file(os.path.join(mnt, "a"), SEQ)
    os.chmod(os.path.join(mnt, "a"), 0o600)
    want["a"] = (SEQ, b"")
    write_file(os.path.join(mnt, "r"), SEQ)
    os.rename(os.path.join(mnt, "r"), os.path.join(mnt, "r2"))
    want["r2"] = (SEQ, b"")
    write_file(os.path.join(mnt, "l"), SEQ)
    os.link(os.path.join(mnt, "l"), os.path.join(mnt, "l2"))
    want["l"] = want["l2"] = (SEQ, b"")
    write_file(os.path.join(mnt, "x"), SEQ)
    os.setxattr(os.path.join(mnt, "x"), "user.k", b"v")
    want["x"] = (SEQ, b"")
    write_file(os.path.join(mnt, "u"), SEQ)
    os.utime(os.path.join(mnt, "u"), (1000000, 1000000))
    want["u"] = (SEQ, b"")
    # fsync'ed, then appended to and chmod'ed
    p = os.path.join(mnt, "f")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, OLD)
    os.fsync(fd)
    os.write(fd, SEQ[len(OLD):])
    os.close(fd)
    os.chmod(p, 0o640)
    want["f"] = (SEQ, OLD)
    # a file grown by truncate over unwritten data: still never NUL where
    # data was written
    p = os.path.join(mnt, "t")
    write_file(p, SEQ)
    os.truncate(p, 2 * len(SEQ))
    want["t"] = (SEQ + bytes(len(SEQ)), b"")
    # fsync'ed after growing without data: the whole size, zeros and all
    for name, grow in (("s", lambda fd: os.ftruncate(fd, 2 * len(SEQ))),
                       ("g", lambda fd: os.posix_fallocate(fd, 0, 3 * len(SEQ))),
                       ("d", lambda fd: None)):
        fd = os.open(os.path.join(mnt, name), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, SEQ)
        grow(fd)
        size = os.fstat(fd).st_size
        (os.fdatasync if name == "d" else os.fsync)(fd)
        os.close(fd)
        data = SEQ + bytes(size - len(SEQ))
        want[name] = (data, data)
    # the unrelated fsync: one commit of everything above
    fd = os.open(os.path.join(mnt, "other"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"other\n")
    os.fsync(fd)
    os.close(fd)
    return want


def check(root, want, what):
    """Each file a prefix of what was written, at least what was fsync'ed."""
    for name, (data, synced) in sorted(want.items()):
        with open(os.path.join(root, name), "rb") as f:
            got = f.read()
        t_check(len(got) <= len(data), "%s: %s has %d bytes, more than the %d written"
                % (what, name, len(got), len(data)))
        bad = next((i for i in range(len(got)) if got[i] != data[i]), None)
        t_check(bad is None, "%s: %s (%d bytes): byte %s is %r, written %r (NULs where"
                " data was written: a size committed before its data)"
                % (what, name, len(got), bad, got[bad:bad + 8] if bad is not None else b"",
                   data[bad:bad + 8] if bad is not None else b""))
        t_check(len(got) >= len(synced), "%s: %s has %d bytes, %d were fsync'ed"
                % (what, name, len(got), len(synced)))
        t_log("%s: %s: %d of %d bytes" % (what, name, len(got), len(data)))
    with open(os.path.join(root, "other"), "rb") as f:
        t_check(f.read() == b"other\n", "%s: the fsync'ed file differs" % what)


def kill_mount(env, m):
    env.kill(m)


def copy(env, dev, name):
    img = os.path.join(env.tmp, name)
    with open(dev, "rb") as a, open(img, "wb") as b:
        shutil.copyfileobj(a, b, 4 * MIB)
    return env.loop(img)


def kernel_replay(env, dev, want, what):
    t_step("%s: the kernel's ext4 replays the journal" % what)
    mnt = env.mkdir("k-" + what.replace(" ", "").replace("-", ""))
    t_run(["mount", "-t", "ext4", dev, mnt])
    try:
        check(mnt, want, what + ", kernel replay")
    finally:
        t_run(["umount", mnt])
    env.fsck(dev)


def wbcfs_replay(env, dev, want, what):
    t_step("%s: wbcfs replays the journal" % what)
    m = env.mount(dev, ["cache_size=64M"])
    try:
        check(m.mnt, want, what + ", wbcfs replay")
    finally:
        env.umount(m)
    env.fsck(dev)


def power_cuts(env, seed):
    """The disksize workload's crash states through tools/wbcfs-crash."""
    t_step("power cuts: crash states of the disksize workload, seed %d" % seed)
    dev = env.new_fs(96 * MIB, name="pc.img", fill=STALE)
    base = os.path.join(env.tmp, "pc-base.img")
    after = os.path.join(env.tmp, "pc-after.img")
    log = os.path.join(env.tmp, "pc.wlog")
    record = os.path.join(env.tmp, "pc.rec")
    with open(dev, "rb") as a, open(base, "wb") as b:
        shutil.copyfileobj(a, b, 4 * MIB)
    m = env.mount(dev, ["write_log=" + log, "cache_size=64M"])
    rec = crashwork.Record(log, record)
    try:
        crashwork.disksize(m.mnt, rec, seed, 3)
    finally:
        rec.close()
    env.umount(m)
    with open(dev, "rb") as a, open(after, "wb") as b:
        shutil.copyfileobj(a, b, 4 * MIB)
    keep = "/var/tmp/wbcfs-disksize-%d" % os.getpid()
    cmd = [sys.executable, TOOL, "--wbcfs", t_wbcfs_bin(), "--base", base, "--log", log,
           "--oracle", record, "--seed", str(seed), "--keep-failed", keep,
           "--verify-final", after, "--full-every", "1",
           "--states", os.environ.get("WBCFS_DISKSIZE_STATES", "30")]
    t_log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    print(p.stdout, flush=True)
    t_check(p.returncode == 0, "power cuts: crash states failed (images kept in %s)" % keep)


def body(env):
    if t_is_kernel():
        t_log("the kernel cannot be killed: nothing to check")
        return
    dev = env.new_fs(256 * MIB)
    t_step("unsynced writes, then chmod/rename/link/setxattr/utime/truncate,"
           " an fsync of another file, kill -9")
    m = env.mount(dev, OPTS)
    want = scenario(m.mnt)
    kill_mount(env, m)
    kdev = copy(env, dev, "kernel.img")
    kernel_replay(env, kdev, want, "kill -9")
    wbcfs_replay(env, dev, want, "kill -9")

    t_step("the same after a clean unmount: every byte there")
    m = env.mount(dev, OPTS)
    os.mkdir(os.path.join(m.mnt, "clean"))
    want = scenario(os.path.join(m.mnt, "clean"))
    env.umount(m)
    env.fsck(dev)
    m = env.mount(dev, ["cache_size=64M"])
    try:
        for name, (data, _) in want.items():
            with open(os.path.join(m.mnt, "clean", name), "rb") as f:
                if f.read() != data:
                    raise TFail("after unmount: clean/%s differs" % name)
    finally:
        env.umount(m)

    t_step("sync(2) after writes and a truncate up: the whole size, then kill -9")
    m = env.mount(dev, OPTS)
    os.mkdir(os.path.join(m.mnt, "sync"))
    want = {}
    for name, grow in (("y", 2 * len(SEQ)), ("n", 0)):
        data = SEQ + bytes(grow and grow - len(SEQ))
        write_file(os.path.join(m.mnt, "sync", name), SEQ)
        if grow:
            os.truncate(os.path.join(m.mnt, "sync", name), grow)
        want["sync/" + name] = (data, data)
    os.sync()
    kill_mount(env, m)
    kdev = copy(env, dev, "kernel2.img")
    kernel_replay(env, kdev, want, "sync")
    wbcfs_replay(env, dev, want, "sync")

    power_cuts(env, int(os.environ.get("WBCFS_SEED") or random.randrange(1, 1 << 30)))


if __name__ == "__main__":
    t_main("disksize", body, deadline_s=900)
