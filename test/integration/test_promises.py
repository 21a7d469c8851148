#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Every durability promise of the README's "What survives a crash", one
case each, checked after a crash by both replays.

Each case mounts the filesystem, makes one promise (fsync, fdatasync, an
O_SYNC or O_DSYNC write, pwritev2 with RWF_DSYNC or RWF_SYNC, syncfs,
rename-over and truncate-rewrite followed by another file's fsync, an
inode change after an unsynced write followed by another file's fsync,
unmount), then crashes: wbcfs is killed with SIGKILL; the kernel's ext4,
which cannot be killed, is crashed by copying its device while mounted.
The device as the crash left it is then replayed twice, on copies: by
wbcfs (mount) and by the kernel's ext4 (mount -t ext4); both must show
what was promised, and e2fsck -fn must be clean after each.

Nothing runs in the background that the case did not ask for (commit=600,
no periodic writeback), so what is on the device is what the promise
wrote, not what a timer happened to write.

    WBCFS_BIN=build/wbcfs test/integration/test_promises.py [--kernel] [case...]
"""

import ctypes
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_is_kernel, t_is_mounted,  # noqa: E402
                    t_log, t_main, t_run, t_step)

_libc = ctypes.CDLL(None, use_errno=True)

QUIET = ["commit=600", "dirty_expire_centisecs=60000",
         "dirty_writeback_centisecs=0", "cache_size=128M"]


def syncfs(fd):
    if _libc.syncfs(fd) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def pattern(tag, n):
    """n bytes with no NUL, distinct per tag."""
    unit = ("%s:" % tag).encode() * 7 + b"\n"
    return (unit * (n // len(unit) + 1))[:n]


def write_file(path, data, flags=0, fsync=None):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | flags, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + 65536])
        if fsync:
            fsync(fd)
    finally:
        os.close(fd)


def commit_elsewhere(mnt):
    """A commit the case did not ask for: another file's fsync."""
    write_file(os.path.join(mnt, "other"), b"o" * 100, fsync=os.fsync)


class Case:
    """prep(mnt) runs and is made durable by an unmount; act(mnt) makes the
    promise; check(root) reads the replayed filesystem."""

    def __init__(self, name, act, check, prep=None):
        self.name, self.act, self.check, self.prep = name, act, check, prep


def want_exact(root, rel, data, what):
    p = os.path.join(root, rel)
    t_check(os.path.exists(p), "%s: %s is missing" % (what, rel))
    with open(p, "rb") as f:
        got = f.read()
    t_check(len(got) == len(data), "%s: %s has %d bytes, %d promised"
            % (what, rel, len(got), len(data)))
    if got != data:
        bad = next(i for i in range(len(got)) if got[i] != data[i])
        raise TFail("%s: %s differs from byte %d (got %r)"
                    % (what, rel, bad, got[bad:bad + 16]))


def want_one_of(root, rel, choices, what):
    """The file reads as one of `choices` (None: absent), never NULs where
    every choice has data."""
    p = os.path.join(root, rel)
    got = None
    if os.path.exists(p):
        with open(p, "rb") as f:
            got = f.read()
    for c in choices:
        if got == c:
            return c
    desc = "absent" if got is None else "%d bytes, %d NUL, starting %r" % (
        len(got), got.count(0), got[:24])
    raise TFail("%s: %s is %s; allowed: %s" % (what, rel, desc, ", ".join(
        "absent" if c is None else "%d bytes" % len(c) for c in choices)))


# -- the cases -------------------------------------------------------------

A = pattern("fsync", 300000)


def act_fsync(mnt):
    write_file(os.path.join(mnt, "f"), A, fsync=os.fsync)


def act_fdatasync(mnt):
    write_file(os.path.join(mnt, "f"), A, fsync=os.fdatasync)


S12 = pattern("base", 12800)
D1 = pattern("dsync", 1024)


def prep_base(mnt):
    write_file(os.path.join(mnt, "f"), S12)


def with_hole(base, off, data):
    out = bytearray(base) + bytes(max(0, off + len(data) - len(base)))
    out[off:off + len(data)] = data
    return bytes(out)


def act_o_dsync(mnt):
    # the reproduction: a synced file, then one O_DSYNC pwrite
    # past its end
    fd = os.open(os.path.join(mnt, "f"), os.O_WRONLY | os.O_DSYNC)
    try:
        t_check(os.pwrite(fd, D1, 54208) == len(D1), "short O_DSYNC pwrite")
    finally:
        os.close(fd)


def act_o_sync_create(mnt):
    write_file(os.path.join(mnt, "new"), A, flags=os.O_SYNC)


def act_rwf(flag):
    def act(mnt):
        fd = os.open(os.path.join(mnt, "f"), os.O_WRONLY)
        try:
            t_check(os.pwritev(fd, [D1], 54208, flag) == len(D1),
                    "short pwritev2")
        finally:
            os.close(fd)
    return act


def act_syncfs(mnt):
    write_file(os.path.join(mnt, "f"), A)
    os.mkdir(os.path.join(mnt, "d"))
    write_file(os.path.join(mnt, "d", "g"), S12)
    fd = os.open(mnt, os.O_RDONLY)
    try:
        syncfs(fd)
    finally:
        os.close(fd)


OLD = pattern("old", 20000)
NEW = pattern("new", 50000)


def prep_old(mnt):
    write_file(os.path.join(mnt, "f"), OLD)


def act_rename_over(mnt):
    write_file(os.path.join(mnt, "f.tmp"), NEW)
    os.rename(os.path.join(mnt, "f.tmp"), os.path.join(mnt, "f"))
    commit_elsewhere(mnt)


def act_trunc_rewrite(mnt):
    write_file(os.path.join(mnt, "f"), NEW)     # O_TRUNC, write, close
    commit_elsewhere(mnt)


SEQ = b"".join(b"%d\n" % i for i in range(1, 20001))


def act_size_after(change):
    def act(mnt):
        p = os.path.join(mnt, "a")
        write_file(p, SEQ)
        change(p)
        commit_elsewhere(mnt)
    return act


def chmod(p):
    os.chmod(p, 0o600)


def rename(p):
    os.rename(p, p + ".r")


def setxattr(p):
    os.setxattr(p, "user.k", b"v")


def utime(p):
    os.utime(p, (1000000000, 1000000000))


def act_append_chmod(mnt):
    p = os.path.join(mnt, "f")
    with open(p, "ab") as f:
        f.write(NEW)
    os.chmod(p, 0o600)
    commit_elsewhere(mnt)


def check_size(rel):
    def check(root, what):
        # the kernel's ext4 may have written the data by the time the
        # commit ran, or not: all of it or none of it, never NULs
        want_one_of(root, rel, (b"", SEQ), what)
    return check


CASES = [
    Case("fsync", act_fsync, lambda r, w: want_exact(r, "f", A, w)),
    Case("fdatasync", act_fdatasync, lambda r, w: want_exact(r, "f", A, w)),
    Case("o_dsync", act_o_dsync,
         lambda r, w: want_exact(r, "f", with_hole(S12, 54208, D1), w), prep_base),
    Case("o_sync_create", act_o_sync_create, lambda r, w: want_exact(r, "new", A, w)),
    Case("rwf_dsync", act_rwf(getattr(os, "RWF_DSYNC", 2)),
         lambda r, w: want_exact(r, "f", with_hole(S12, 54208, D1), w), prep_base),
    Case("rwf_sync", act_rwf(getattr(os, "RWF_SYNC", 4)),
         lambda r, w: want_exact(r, "f", with_hole(S12, 54208, D1), w), prep_base),
    Case("syncfs", act_syncfs,
         lambda r, w: (want_exact(r, "f", A, w), want_exact(r, "d/g", S12, w))),
    Case("rename_over", act_rename_over,
         lambda r, w: want_exact(r, "f", NEW, w), prep_old),
    Case("trunc_rewrite", act_trunc_rewrite,
         lambda r, w: want_exact(r, "f", NEW, w), prep_old),
    Case("size_chmod", act_size_after(chmod), check_size("a")),
    Case("size_rename", act_size_after(rename), check_size("a.r")),
    Case("size_setxattr", act_size_after(setxattr), check_size("a")),
    Case("size_utime", act_size_after(utime), check_size("a")),
    Case("append_chmod", act_append_chmod,
         lambda r, w: want_one_of(r, "f", (OLD, OLD + NEW), w), prep_old),
]


# -- crash and replay ------------------------------------------------------

def crash(env, m, img, copy):
    """Leave `copy` holding the device as a crash of `m` leaves it."""
    if t_is_kernel():
        # the kernel's ext4 cannot be killed: copy its device while it is
        # mounted and idle (O_DIRECT loop: the image file is the device)
        shutil.copyfile(img, copy)
        env.umount(m)
        return
    env.kill(m)
    shutil.copyfile(img, copy)


def replayed_by(env, copy, who, case):
    """Attach copy, let `who` replay it on a mount, check, unmount, fsck."""
    what = "%s, replayed by %s" % (case.name, who)
    t_step(what)
    dev = env.loop(copy)
    try:
        if who == "wbcfs":
            m = env.mount_wbcfs(dev, env.mkdir("r-" + case.name),
                                ["allow_other"] + QUIET)
        else:
            mnt = env.mkdir("k-" + case.name)
            t_run(["mount", "-t", "ext4", dev, mnt])
            from wbtest import Mount
            m = Mount(mnt, dev, "kernel")
            env.mounts.append(m)
        try:
            case.check(m.mnt, what)
        finally:
            env.umount(m)
        env.fsck(dev)
    finally:
        env.detach(dev)


def run_case(env, case):
    t_step("case %s" % case.name)
    img = env.image(64 * MIB, "c-%s.img" % case.name)
    dev = env.loop(img)
    env.mkfs(dev)
    if case.prep:
        m = env.mount(dev, QUIET)
        case.prep(m.mnt)
        env.umount(m)
    m = env.mount(dev, QUIET)
    case.act(m.mnt)
    copy = os.path.join(env.tmp, "c-%s.crashed" % case.name)
    crash(env, m, img, copy)
    env.detach(dev)
    os.unlink(img)
    shutil.copyfile(copy, img)
    try:
        if not t_is_kernel():
            replayed_by(env, copy, "wbcfs", case)
        replayed_by(env, img, "the kernel's ext4", case)
    finally:
        os.unlink(copy)
        os.unlink(img)


def body(env):
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    cases = [c for c in CASES if not names or c.name in names]
    t_check(cases, "no case named %s" % names)
    for c in cases:
        run_case(env, c)
    t_log("%d promises kept after a crash" % len(cases))


if __name__ == "__main__":
    if "--kernel" in sys.argv:
        os.environ["WBCFS_TEST_TARGET"] = "kernel"
    t_main("promises", body, deadline_s=1200)
