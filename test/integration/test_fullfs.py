#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A full filesystem, as the kernel's ext4 sees it.

Metadata after ENOSPC: an unprivileged user fills a 64 MiB filesystem
with write(2) until ENOSPC; then that user's mkdir and long symlink get
ENOSPC too (the blocks writers were promised, the metadata reserve and the
root reserve are not theirs), so does an xattr that needs a block, and
statfs shows nothing available to them; a small xattr still fits in the
inode and an empty file in the directory, and root may still mkdir (the
root reserve).

A long fill: root writes sequential and sparse files (many extents, so
extent tree blocks at writeback) and makes directories, in turns, until
both writes and mkdirs keep failing; every byte a write accepted reads
back after remount, and e2fsck -fn is clean. Then root fills it with
files of 8 pages at every other page, all still dirty at unmount: each
needs an extent block at writeback, which was reserved with its data, so
unmount loses nothing; the same when 300 files with four extents on disk
get a fifth each and a big file fills the rest.

A store through a shared mapping into a hole of a full filesystem: the
kernel's ext4 refuses it with SIGBUS at the store. FUSE sends nothing at
that store (page_mkwrite stays in the kernel), so wbcfs cannot refuse it:
the page's writeback fails with ENOSPC, msync reports it, each other
descriptor open on the file gets ENOSPC once at its next fsync, the
kernel's copy of the page is dropped (the mapping shows zeros again), and
the daemon names the page as lost at once and exits 1 after unmount. The
file reads zeros there after remount; e2fsck -fn is clean.

    WBCFS_BIN=build/wbcfs test/integration/test_fullfs.py [--kernel]
"""

import ctypes
import errno
import hashlib
import mmap
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_syncfs, MIB, TFail, t_as_user, t_check, t_eq, t_is_kernel,  # noqa: E402
                    t_log, t_main, t_manifest, t_read_all, t_run, t_statfs,
                    t_step)

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
    a page still fits), then in pages again after an fsync (ext4 may free
    a block it had set aside once writeback has run). Returns 'ok SHA256'
    of the bytes accepted once the last page write got ENOSPC."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    size = CHUNK
    synced = False
    h = hashlib.sha256()
    try:
        for i in range(2 * FS_SIZE // PAGE):
            buf = chunk("u", i, size)
            try:
                n = os.write(fd, buf)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if size == PAGE and synced:
                    return "ok " + h.hexdigest()
                if size == PAGE:
                    os.fsync(fd)
                    synced = True
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
    t_step("an xattr that needs a block gets ENOSPC, one that fits the inode does not")
    t_eq(t_as_user(USER, USER, lambda: os.setxattr(big, "user.small", b"s" * 16)),
         "ok", "16-byte xattr as user")
    t_eq(t_as_user(USER, USER, lambda: os.setxattr(big, "user.large", b"l" * 2000)),
         "errno:ENOSPC", "2000-byte xattr as user after write got ENOSPC")
    t_eq(os.listxattr(big), ["user.small"], "xattrs of the user's file")
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


def store_child(fd, off):
    """In a child: store into the mapping at @off, msync. Returns what
    happened: 'sigbus', 'msync:ERRNO' or 'ok'."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = "ok"
        try:
            mm = mmap.mmap(fd, 2 * PAGE, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE, offset=off)
            mm[100:105] = b"HELLO"
            try:
                mm.flush()
            except OSError as e:
                res = "msync:" + errno.errorcode.get(e.errno, str(e.errno))
            mm.close()
        except BaseException as e:  # noqa: B902
            res = "exc:%r" % e
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS:
        return "sigbus"
    return out.decode()


def t_pread(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def mapped_zeros(path, timeout_s=20):
    """Do the first bytes read as zeros through a fresh shared mapping?
    The kernel's copy of a refused page is dropped asynchronously."""
    end = time.monotonic() + timeout_s
    while True:
        fd = os.open(path, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ)
            data = mm[:PAGE]
            mm.close()
        finally:
            os.close(fd)
        if data == b"\0" * PAGE:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)


def fsync_errno(fd):
    try:
        os.fsync(fd)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def mmap_hole(env):
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    path = os.path.join(m.mnt, "holey")
    t_step("a 1 MiB hole, then root fills the filesystem until ENOSPC")
    fd1 = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    os.ftruncate(fd1, MIB)
    fd2 = os.open(path, os.O_RDWR)
    fd3 = os.open(path, os.O_RDONLY)
    t_check(fill(os.path.join(m.mnt, "fill")).startswith("ok "),
            "write(2) as root reaches ENOSPC")
    t_step("store through a shared mapping into the hole")
    res = store_child(fd1, 0)
    t_log("store: %s" % res)
    if t_is_kernel():
        t_eq(res, "sigbus", "ext4: the store into a hole of a full fs")
        for name, fd in (("fd1", fd1), ("fd2", fd2), ("fd3", fd3)):
            t_eq(fsync_errno(fd), "ok", "fsync of %s" % name)
    else:
        t_eq(res, "msync:ENOSPC", "msync of the store")
        t_eq(fsync_errno(fd1), "ok", "second fsync of the mapped descriptor")
        t_eq(fsync_errno(fd2), "ENOSPC", "first fsync of a second descriptor")
        t_eq(fsync_errno(fd2), "ok", "second fsync of a second descriptor")
        t_eq(fsync_errno(fd3), "ENOSPC", "first fsync of a read-only descriptor")
        t_eq(fsync_errno(fd3), "ok", "second fsync of a read-only descriptor")
    for fd in (fd1, fd2, fd3):
        os.close(fd)
    t_eq(t_pread(path, 100, 8), b"\0" * 8, "read(2) of the refused store")
    t_step("the mapping shows what the file holds")
    t_check(mapped_zeros(path), "the refused store still shows through a mapping")
    t_step("unmount names the lost page")
    p = t_run(["umount", m.mnt], check=False)
    t_eq(p.returncode, 0, "umount")
    m.mounted = False
    if m.proc:
        rc = m.proc.wait(120)
        log = m.daemon_log()
        env.mounts.remove(m)
        t_log("daemon exit %d; log:\n%s" % (rc, log.strip()))
        t_check(rc != 0, "wbcfs exited 0 after losing a mapped page")
        t_check(re.search(r"inode \d+: 1 pages stored through a shared mapping "
                          r"\(4096 bytes, first at offset 0\) could not be written "
                          r"\(No space left on device\) and are lost", log),
                "no line naming the lost page in the daemon's log")
        t_check("1 dirty pages could not be written and are lost" in log,
                "no count of lost pages at unmount")
    else:
        env.mounts.remove(m)
    env.fsck(dev)
    t_step("the hole reads zeros after remount")
    m = env.mount(dev, OPTS)
    with open(path, "rb") as f:
        t_eq(f.read(), b"\0" * MIB, "content of the mapped file")
    env.umount(m)
    env.detach(dev)


def sparse_fill(env):
    """Root fills the filesystem with files of 8 pages at every other page
    (8 extents each: an extent block at writeback), nothing written back
    until unmount: writeback must find every block it was promised."""
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    t_step("root writes sparse files (8 extents each) until ENOSPC")
    accepted = {}
    full = False
    for f in range(FS_SIZE // PAGE):
        path = os.path.join(m.mnt, "s%05d" % f)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        got = accepted[path] = []
        for i in range(8):
            try:
                os.pwrite(fd, chunk(path, i, PAGE), 2 * i * PAGE)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                full = True
                break
            got.append(i)
        os.close(fd)
        if full:
            break
    t_check(full, "no ENOSPC")
    t_log("%d files, %d pages accepted" % (len(accepted),
                                          sum(len(v) for v in accepted.values())))
    for path, pages in sorted(accepted.items())[:: len(accepted) // 50 + 1]:
        fd = os.open(path, os.O_RDONLY)
        try:
            for i in pages:
                if os.pread(fd, PAGE, 2 * i * PAGE) != chunk(path, i, PAGE):
                    raise TFail("%s: page %d does not read back" % (path, 2 * i))
        finally:
            os.close(fd)
    man = t_manifest(m.mnt)
    t_step("unmount writes everything: nothing lost (the kernel sees every byte)")
    env.umount(m)
    env.verify_after_umount(dev, man)
    env.detach(dev)


def grow_extents(env):
    """Files with four extents on disk each get a fifth (a tree block at
    writeback), then a big file fills the rest; unmount loses nothing."""
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev, OPTS)
    t_step("300 files of 4 extents, written back; a fifth extent each, dirty")
    names = [os.path.join(m.mnt, "g%03d" % f) for f in range(300)]
    for path in names:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        for i in range(4):
            os.pwrite(fd, chunk(path, i, PAGE), 2 * i * PAGE)
        os.close(fd)
    t_syncfs(m.mnt)
    for path in names:
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, chunk(path, 4, PAGE), 8 * PAGE)
        os.close(fd)
    t_step("root fills the rest until ENOSPC")
    t_check(fill(os.path.join(m.mnt, "big")).startswith("ok "), "no ENOSPC")
    man = t_manifest(m.mnt)
    t_step("unmount writes everything: nothing lost (the kernel sees every byte)")
    env.umount(m)
    env.verify_after_umount(dev, man)
    env.detach(dev)


def body(env):
    user_metadata(env)
    mmap_hole(env)
    long_fill(env)
    sparse_fill(env)
    grow_extents(env)


if __name__ == "__main__":
    t_main("fullfs", body, deadline_s=240)
