#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A full filesystem, as the kernel's ext4 sees it.

Metadata after ENOSPC: an unprivileged user fills a 64 MiB filesystem
with write(2) until ENOSPC; then that user's mkdir and long symlink get
ENOSPC too (the blocks writers were promised, the metadata reserve and the
root reserve are not theirs) and statfs shows nothing available to them;
an empty file still fits in the directory, and root may still mkdir (the
root reserve).

A long fill: root writes sequential and sparse files (many extents, so
extent tree blocks at writeback) and makes directories, in turns, until
both writes and mkdirs keep failing; every byte a write accepted reads
back after remount, and e2fsck -fn is clean.

    WBCFS_BIN=build/wbcfs test/integration/test_fullfs.py [--kernel]
"""

import errno
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_as_user, t_check, t_eq, t_log,  # noqa: E402
                    t_main, t_manifest, t_read_all, t_statfs, t_step)

FS_SIZE = 64 * MIB
CHUNK = 256 * 1024
PAGE = 4096
USER = 65534
# no cache prefault: the mounts here are many and short
OPTS = ("prefault=0",)


def chunk(tag, i, n=CHUNK):
    return (hashlib.sha256(b"%s/%d" % (tag.encode(), i)).digest() * (n // 32 + 1))[:n]


def fill(path):
    """Write @path until ENOSPC, in 256 KiB pieces, then in pages (ext4
    reserves a large folio's blocks at once, so a big write may fail while
    a page still fits). Returns 'ok SHA256' of the bytes accepted once a
    page write got ENOSPC."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    size = CHUNK
    h = hashlib.sha256()
    try:
        for i in range(2 * FS_SIZE // PAGE):
            buf = chunk("u", i, size)
            try:
                n = os.write(fd, buf)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if size == PAGE:
                    return "ok " + h.hexdigest()
                size = PAGE
                continue
            h.update(buf[:n])
        return "no ENOSPC"
    finally:
        os.close(fd)


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def user_metadata(env):
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    udir = os.path.join(m.mnt, "u")
    os.mkdir(udir)
    os.chown(udir, USER, USER)
    t_step("user %d writes until ENOSPC" % USER)
    big = os.path.join(udir, "big")
    res = t_as_user(USER, USER, lambda: fill(big))
    t_check(res.startswith("ok "), "write(2) as user did not reach ENOSPC: " + res)
    t_eq(sha256_of(big), res[3:], "content of the user's file")
    t_eq(t_statfs(m.mnt)["bavail"], 0, "statfs f_bavail once the user is refused")
    t_step("then the user's mkdir and long symlink get ENOSPC, as on ext4")
    t_eq(t_as_user(USER, USER, lambda: os.mkdir(os.path.join(udir, "d"))),
         "errno:ENOSPC", "mkdir as user after write got ENOSPC")
    t_eq(t_as_user(USER, USER, lambda: os.symlink("t" * 200, os.path.join(udir, "l"))),
         "errno:ENOSPC", "200-byte symlink as user after write got ENOSPC")
    t_step("an empty file still fits in the directory's block")
    t_eq(t_as_user(USER, USER,
                   lambda: os.close(os.open(os.path.join(udir, "e"),
                                            os.O_CREAT | os.O_WRONLY, 0o644))),
         "ok", "create of an empty file as user")
    t_step("root may still mkdir (the root reserve)")
    os.mkdir(os.path.join(m.mnt, "rootdir"))
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)
    env.detach(dev)


def long_fill(env):
    """Root: sequential writes, sparse writes and mkdirs in turns."""
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    t_step("root fills with writes, sparse writes and mkdirs until all fail")
    accepted = {}       # path -> {offset: bytes}
    nw = nmk = 0
    fails = 0
    step = 0
    while fails < 24:
        step += 1
        ok = False
        d = os.path.join(m.mnt, "d%03d" % (step // 4))
        try:
            os.mkdir(d)
            nmk += 1
            ok = True
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        if not os.path.isdir(d):
            d = m.mnt
        path = os.path.join(d, "f%04d" % step)
        try:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            fails += 1
            continue
        got = accepted.setdefault(path, {})
        sparse = step % 3 == 0
        for i in range(16):
            off = i * 2 * PAGE if sparse else i * (CHUNK // 4)
            buf = chunk(path, i, PAGE if sparse else CHUNK // 4)
            try:
                n = os.pwrite(fd, buf, off)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
            got[off] = buf[:n]
            nw += 1
            ok = True
            if n < len(buf):
                break
        os.close(fd)
        fails = 0 if ok else fails + 1
    t_log("%d writes and %d mkdirs accepted in %d steps" % (nw, nmk, step))
    t_check(nw > 100 and nmk > 10, "too little accepted: %d writes, %d mkdirs" % (nw, nmk))
    man = t_manifest(m.mnt)
    env.umount(m)
    env.fsck(dev)
    t_step("every accepted write reads back after remount")
    m = env.mount(dev, OPTS)
    for path, pieces in sorted(accepted.items()):
        fd = os.open(path, os.O_RDONLY)
        try:
            for off, buf in sorted(pieces.items()):
                if t_read_all(fd, len(buf), off) != buf:
                    raise TFail("%s: %d bytes at %d do not read back"
                                % (path, len(buf), off))
        finally:
            os.close(fd)
    env.umount(m)
    env.verify_after_umount(dev, man)
    env.detach(dev)


def body(env):
    user_metadata(env)
    long_fill(env)


if __name__ == "__main__":
    t_main("fullfs", body, deadline_s=240)
