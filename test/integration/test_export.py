#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""File handles, as on the kernel's ext4.  Run by hand as root:

    WBCFS_BIN=build/wbcfs test/integration/test_export.py
    test/integration/test_export.py --kernel      # validate against ext4

name_to_handle_at / open_by_handle_at: a handle opens its file after the
kernel dropped the inode (drop_caches) and after a remount on the same
mount point; directory handles open and ".." from them works; a handle of
a deleted file, of a reserved inode or of a number past the inode count
is ESTALE, also when the number was reused (generation).  Then e2fsck -fn
and the kernel's ext4 see the tree the mount showed.
"""

import ctypes
import errno
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_eq, t_log,  # noqa: E402
                    t_main, t_manifest, t_step, t_is_kernel)

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
MAX_HANDLE_SZ = 128


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint),
                ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


libc.name_to_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p,
                                   ctypes.POINTER(FileHandle),
                                   ctypes.POINTER(ctypes.c_int), ctypes.c_int]
libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.POINTER(FileHandle),
                                   ctypes.c_int]


def name_to_handle(path):
    """(handle_type, handle bytes) of path."""
    fh = FileHandle()
    fh.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, os.fsencode(path), ctypes.byref(fh),
                              ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return (fh.handle_type, bytes(fh.f_handle[:fh.handle_bytes]))


def open_by_handle(mount_fd, h, flags=os.O_RDONLY):
    fh = FileHandle()
    fh.handle_type, data = h
    fh.handle_bytes = len(data)
    ctypes.memmove(fh.f_handle, data, len(data))
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(fh), flags)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def handle_ino_gen(h):
    """(inode number, generation) in a handle: ext4's FILEID_INO32_GEN
    (type 1: ino, gen) or FUSE's (0x81: nodeid hi, nodeid lo, gen)."""
    typ, data = h
    if typ == 1:
        return struct.unpack("=II", data[:8])
    if typ == 0x81:
        hi, lo, gen = struct.unpack("=III", data[:12])
        return ((hi << 32) | lo, gen)
    raise TFail("unexpected handle type %#x" % typ)


def make_handle(like, ino, gen):
    """A handle of the same kind as `like` naming inode `ino`."""
    typ = like[0]
    if typ == 1:
        return (typ, struct.pack("=II", ino, gen))
    return (typ, struct.pack("=III", ino >> 32, ino & 0xffffffff, gen))


def drop_caches():
    """Make the kernel forget every unused dentry and inode (twice: the
    first pass frees dentries that pinned inodes)."""
    os.sync()
    for _ in range(2):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")


def expect_estale(mount_fd, h, what):
    try:
        fd = open_by_handle(mount_fd, h)
    except OSError as e:
        t_eq(errno.errorcode.get(e.errno, e.errno), "ESTALE", what)
        return
    target = os.readlink("/proc/self/fd/%d" % fd)
    os.close(fd)
    raise TFail("%s: opened %s, want ESTALE" % (what, target))


def read_by_handle(mount_fd, h):
    fd = open_by_handle(mount_fd, h)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def check_dir_handle(mount_fd, h, want_ino, want_parent_ino, want_names, what):
    """The directory opens by handle, lists its entries, and ".." from it
    is its parent."""
    fd = open_by_handle(mount_fd, h, os.O_RDONLY | os.O_DIRECTORY)
    try:
        t_eq(os.fstat(fd).st_ino, want_ino, what + ": inode")
        t_eq(sorted(os.listdir(fd)), sorted(want_names), what + ": entries")
        pfd = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        try:
            t_eq(os.fstat(pfd).st_ino, want_parent_ino, what + ": .. inode")
        finally:
            os.close(pfd)
    finally:
        os.close(fd)


def check_handles(env, mnt, hs, inos, what):
    mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        t_eq(read_by_handle(mfd, hs["f"]), b"handle data\n", what + ": file by handle")
        fd = open_by_handle(mfd, hs["f"], os.O_RDONLY)
        t_eq(os.fstat(fd).st_ino, inos["f"], what + ": file inode")
        os.close(fd)
        check_dir_handle(mfd, hs["d"], inos["d"], inos["root"], ["f", "sub", "g"],
                         what + ": dir d")
        check_dir_handle(mfd, hs["sub"], inos["sub"], inos["d"], ["deep"],
                         what + ": dir d/sub")
        # a directory opened by handle reaches the root by "..", and the
        # kernel's path for it is whole (reconnected through "..")
        fd = open_by_handle(mfd, hs["sub"], os.O_RDONLY | os.O_DIRECTORY)
        t_eq(os.readlink("/proc/self/fd/%d" % fd), os.path.join(mnt, "d", "sub"),
             what + ": path of d/sub opened by handle")
        os.close(fd)
    finally:
        os.close(mfd)


def body(env):
    dev = env.new_fs(64 * MIB)
    m = env.mount(dev)
    mnt = m.mnt
    t_step("handles of a file and two directories")
    os.makedirs(os.path.join(mnt, "d", "sub", "deep"))
    for n in ("f", "g"):
        with open(os.path.join(mnt, "d", n), "w") as f:
            f.write("handle data\n")
    hs = {n: name_to_handle(os.path.join(mnt, p))
          for n, p in (("f", "d/f"), ("g", "d/g"), ("d", "d"), ("sub", "d/sub"))}
    inos = {n: os.stat(os.path.join(mnt, p)).st_ino
            for n, p in (("f", "d/f"), ("g", "d/g"), ("d", "d"), ("sub", "d/sub"),
                         ("root", "."))}
    for n in hs:
        t_eq(handle_ino_gen(hs[n])[0], inos[n], "inode number in the handle of " + n)
    t_check(handle_ino_gen(hs["f"])[1] != handle_ino_gen(hs["g"])[1],
            "two new files have different generations (%s)"
            % [handle_ino_gen(hs[n])[1] for n in ("f", "g")])
    check_handles(env, mnt, hs, inos, "cached")

    t_step("the handles survive drop_caches")
    drop_caches()
    check_handles(env, mnt, hs, inos, "after drop_caches")

    t_step("the handles survive a remount on the same mount point")
    env.umount(m)
    m = env.mount(dev, mnt=mnt)
    check_handles(env, mnt, hs, inos, "after remount")
    drop_caches()
    check_handles(env, mnt, hs, inos, "after remount and drop_caches")

    t_step("reserved, out of range, free and mistyped-generation handles are stale")
    mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.statvfs(mnt)
        for ino, what in ((8, "the journal inode"), (7, "the resize inode"),
                          (st.f_files + 1, "one past the inode count"),
                          (st.f_files - 1, "a free inode")):
            expect_estale(mfd, make_handle(hs["f"], ino, 0), "handle of %s (%d)"
                          % (what, ino))
        ino, gen = handle_ino_gen(hs["g"])
        expect_estale(mfd, make_handle(hs["g"], ino, (gen + 1) & 0xffffffff),
                      "handle of d/g with another generation (cached)")
        drop_caches()
        expect_estale(mfd, make_handle(hs["g"], ino, (gen + 1) & 0xffffffff),
                      "handle of d/g with another generation (dropped)")
        t_eq(read_by_handle(mfd, hs["g"]), b"handle data\n", "d/g by its own handle")

        t_step("a deleted file's handle is stale, also once its number is reused")
        os.unlink(os.path.join(mnt, "d", "g"))
        expect_estale(mfd, hs["g"], "handle of deleted d/g")
        drop_caches()
        expect_estale(mfd, hs["g"], "handle of deleted d/g after drop_caches")
        reused = False
        for i in range(8):
            p = os.path.join(mnt, "d", "new%d" % i)
            with open(p, "w") as f:
                f.write("new\n")
            if os.stat(p).st_ino == inos["g"]:
                reused = True
                break
        t_log("inode number %d %s" % (inos["g"], "reused" if reused else "not reused"))
        expect_estale(mfd, hs["g"], "handle of deleted d/g, number %s"
                      % ("reused" if reused else "not reused"))
        drop_caches()
        expect_estale(mfd, hs["g"], "handle of deleted d/g after drop_caches, number %s"
                      % ("reused" if reused else "not reused"))
        if not t_is_kernel():
            t_check(reused, "wbcfs reuses the lowest free inode number")
    finally:
        os.close(mfd)
    manifest = t_manifest(mnt)
    env.umount(m)
    env.verify_after_umount(dev, manifest)


if __name__ == "__main__":
    t_main("export", body, deadline_s=300)
