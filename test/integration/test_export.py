#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""File handles and ioctls, as on the kernel's ext4.  Run by hand as root:

    WBCFS_BIN=build/wbcfs test/integration/test_export.py
    test/integration/test_export.py --kernel      # validate against ext4

name_to_handle_at / open_by_handle_at: a handle opens its file after the
kernel dropped the inode (drop_caches) and after a remount on the same
mount point; directory handles open and ".." from them works; a handle of
a deleted file, of a reserved inode or of a number past the inode count
is ESTALE, also when the number was reused (generation).

The ioctls: the inode flags of lsattr/chattr (stored, and immutable and
append-only enforced for root and for the owner, as an unprivileged user
too), the fsxattr view of them, the filesystem label (e2label reads it
after unmount), FIBMAP (the device block, 0 for holes and unwritten
extents) and FITRIM (free space discarded: the image file shrinks, the
data stays).  Each part ends with e2fsck -fn and the kernel's ext4 seeing
the tree the mount showed.
"""

import ctypes
import errno
import fcntl
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_eq, t_log,  # noqa: E402
                    t_main, t_manifest, t_step, t_is_kernel, t_as_user,
                    t_run)

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


# a small cache: mounts are quick, and nothing here needs a big one
OPTS = ["cache_size=128M"]


def drop_caches():
    """Make the kernel forget every unused dentry and inode (twice: the
    first pass frees dentries that pinned inodes)."""
    os.sync()
    for _ in range(2):
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")


def expect_estale(mount_fd, h, what, settle=0.0):
    """The handle must not open: ESTALE.  With settle > 0 it may still open
    for that many seconds.  A handle whose inode the kernel still caches
    opens without a word to the daemon (as on ext4, where a deleted file's
    handle opens while someone holds the file), and the kernel releases a
    FUSE file in the background: it holds the inode until the daemon has
    answered RELEASE, which another daemon thread may do after the
    unlink.  So a file closed and then unlinked stays reachable by handle
    until that answer is in."""
    deadline = time.monotonic() + settle
    tries = 0
    while True:
        tries += 1
        try:
            fd = open_by_handle(mount_fd, h)
        except OSError as e:
            t_eq(errno.errorcode.get(e.errno, e.errno), "ESTALE", what)
            if tries > 1:
                t_log("%s: ESTALE after %d tries" % (what, tries))
            return
        target = os.readlink("/proc/self/fd/%d" % fd)
        os.close(fd)
        if time.monotonic() >= deadline:
            raise TFail("%s: opened %s in %d tries over %.1f s, want ESTALE"
                        % (what, target, tries, settle))
        time.sleep(0.05)


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


def part_handles(env):
    dev = env.new_fs(64 * MIB)
    m = env.mount(dev, OPTS)
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
    for n in ("f", "d"):
        fd = os.open(os.path.join(mnt, "d", "f" if n == "f" else "."), os.O_RDONLY)
        try:
            ver = struct.unpack("=I", fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(4)))[0]
        finally:
            os.close(fd)
        t_eq(ver, handle_ino_gen(hs[n])[1], "FS_IOC_GETVERSION (lsattr -v) of " + n)
    check_handles(env, mnt, hs, inos, "cached")

    t_step("the handles survive drop_caches")
    drop_caches()
    check_handles(env, mnt, hs, inos, "after drop_caches")

    t_step("the handles survive a remount on the same mount point")
    env.umount(m)
    m = env.mount(dev, OPTS, mnt=mnt)
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
        expect_estale(mfd, hs["g"], "handle of deleted d/g", settle=10)
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


# ---------------------------------------------------------------------------
# ioctls

FS_IOC_GETVERSION = 0x80087601
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_IOC_FSGETXATTR = 0x801c581f
FS_IOC_FSSETXATTR = 0x401c5820
FS_IOC_GETFSLABEL = 0x81009431
FS_IOC_SETFSLABEL = 0x41009432
FITRIM = 0xc0185879
FIBMAP = 1
FL_IMMUTABLE = 0x10
FL_APPEND = 0x20
FL_NODUMP = 0x40
FL_NOATIME = 0x80
FL_EXTENTS = 0x80000
XFL_IMMUTABLE = 0x8
XFL_APPEND = 0x10
XFL_NOATIME = 0x40
XFL_NODUMP = 0x80
USER = 4242


def getflags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("=i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4])[0]
    finally:
        os.close(fd)


def setflags(path, flags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("=iI", flags, 0))
    finally:
        os.close(fd)


def chattr(path, add=0, remove=0):
    setflags(path, (getflags(path) | add) & ~remove)


def fsgetxattr(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("=5I8x", fcntl.ioctl(fd, FS_IOC_FSGETXATTR, bytes(28)))
    finally:
        os.close(fd)


def fssetxattr(path, xflags):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, FS_IOC_FSSETXATTR, struct.pack("=5I8x", xflags, 0, 0, 0, 0))
    finally:
        os.close(fd)


def errname(fn):
    """'ok' or the errno name fn raised."""
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def touch(path):
    """Create an empty file (no O_TRUNC: wbcfs stamps a new file's times
    again when O_TRUNC comes with O_CREAT, after the reply the kernel
    caches; a difference of its own, not of these ioctls)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def open_close(path, flags):
    def fn():
        os.close(os.open(path, flags))
    return fn


def append(path, data):
    def fn():
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return fn


def check_ops(path, d, want, who):
    """Each operation on file `path` in directory `d` gives its wanted
    result (errno name or 'ok'), run as root or as USER."""
    tmp = os.path.join(d, "tmp-new")
    ops = {
        "open O_WRONLY": open_close(path, os.O_WRONLY),
        "open O_RDWR|O_APPEND|O_TRUNC": open_close(path, os.O_RDWR | os.O_APPEND | os.O_TRUNC),
        "open O_RDONLY": open_close(path, os.O_RDONLY),
        "append": append(path, b"more\n"),
        "truncate": lambda: os.truncate(path, 1),
        "chmod": lambda: os.chmod(path, 0o666),
        "utime set": lambda: os.utime(path, (1, 1)),
        "utime now": lambda: os.utime(path, None),
        "setxattr": lambda: os.setxattr(path, "user.k", b"v"),
        "link": lambda: (os.link(path, tmp), os.unlink(tmp)),
        "rename": lambda: (os.rename(path, tmp), os.rename(tmp, path)),
        "unlink": lambda: os.unlink(path),
    }
    for op, w in want.items():
        if who == "root":
            got = errname(ops[op])
        else:
            got = t_as_user(USER, USER, lambda: ops[op]() and None)
            got = "ok" if got == "ok" else got.split(":", 1)[1]
        t_eq(got, w, "%s as %s on %s" % (op, who, os.path.basename(path)))


def part_flags(env, mnt):
    t_step("lsattr/chattr flags: stored, shown, e not cleared")
    d = os.path.join(mnt, "flags")
    os.mkdir(d)
    os.chmod(d, 0o777)
    f = os.path.join(d, "f")
    with open(f, "wb") as fh:
        fh.write(b"x" * 4096)
        fh.seek(1 << 20)
        fh.write(b"y" * 4096)       # two extents
    os.chmod(f, 0o666)
    t_eq(getflags(f) & FL_EXTENTS, FL_EXTENTS, "a new file has extents (e)")
    t_eq(errname(lambda: chattr(f, remove=FL_EXTENTS)), "ENOTSUP",
         "clearing e on an extent file")
    chattr(f, add=FL_NODUMP | FL_NOATIME)
    t_eq(getflags(f) & (FL_NODUMP | FL_NOATIME), FL_NODUMP | FL_NOATIME, "d and A set")
    t_eq(fsgetxattr(f)[0] & (XFL_NODUMP | XFL_NOATIME), XFL_NODUMP | XFL_NOATIME,
         "fsxattr shows d and A")
    fssetxattr(f, XFL_NODUMP)
    t_eq(getflags(f) & (FL_NODUMP | FL_NOATIME | FL_EXTENTS), FL_NODUMP | FL_EXTENTS,
         "fsxattr cleared A, kept d and e")

    t_step("new inodes inherit d and A from their directory, not i or a")
    inh = os.path.join(d, "inherit")
    os.mkdir(inh)
    chattr(inh, add=FL_NODUMP | FL_NOATIME)
    touch(os.path.join(inh, "file"))
    os.mkdir(os.path.join(inh, "dir"))
    for n in ("file", "dir"):
        t_eq(getflags(os.path.join(inh, n)) & (FL_NODUMP | FL_NOATIME | FL_IMMUTABLE),
             FL_NODUMP | FL_NOATIME, "flags of a new %s in a d+A directory" % n)

    for fl, name in ((FL_IMMUTABLE, "immutable"), (FL_APPEND, "append-only")):
        t_step("%s: what ext4 refuses, as root and as the owner" % name)
        p = os.path.join(d, name)
        with open(p, "w") as fh:
            fh.write("data\n")
        os.chown(p, USER, USER)
        os.chmod(p, 0o666)
        t_eq(t_as_user(USER, USER, lambda: chattr(p, add=fl)), "errno:EPERM",
             "the owner sets %s without CAP_LINUX_IMMUTABLE" % name)
        chattr(p, add=fl)
        t_eq(getflags(p) & fl, fl, name + " set by root")
        ia = fl == FL_IMMUTABLE
        t_eq(fsgetxattr(p)[0] & (XFL_IMMUTABLE | XFL_APPEND),
             XFL_IMMUTABLE if ia else XFL_APPEND, "fsxattr shows " + name)
        want = {
            "open O_WRONLY": "EPERM",
            "open O_RDWR|O_APPEND|O_TRUNC": "EPERM",
            "open O_RDONLY": "ok",
            "append": "EPERM" if ia else "ok",
            "truncate": "EPERM",
            "chmod": "EPERM",
            "utime set": "EPERM",
            "utime now": "EPERM" if ia else "ok",
            "setxattr": "EPERM",
            "link": "EPERM",
            "rename": "EPERM",
            "unlink": "EPERM",
        }
        t_eq(errname(lambda: chattr(p, add=FL_NODUMP)), "EPERM" if ia else "ok",
             "setting d on a%s %s file" % ("n" if ia else "", name))
        check_ops(p, d, want, "root")
        check_ops(p, d, want, "user")
        with open(p) as fh:
            t_eq(fh.read(), "data\n" if ia else "data\nmore\nmore\n", name + " content")
        t_eq(t_as_user(USER, USER, lambda: chattr(p, remove=fl)), "errno:EPERM",
             "the owner clears %s without CAP_LINUX_IMMUTABLE" % name)
        chattr(p, remove=fl)
        t_eq(errname(lambda: os.truncate(p, 0)), "ok", name + " cleared: truncate")

    for fl, name, create, remove in ((FL_IMMUTABLE, "immutable", "EPERM", "EPERM"),
                                     (FL_APPEND, "append-only", "ok", "EPERM")):
        t_step("%s directory: create %s, unlink %s" % (name, create, remove))
        sd = os.path.join(d, "dir-" + name)
        os.mkdir(sd)
        os.chmod(sd, 0o777)
        old = os.path.join(sd, "old")
        touch(old)
        chattr(sd, add=fl)
        for who in ("root", "user"):
            new = os.path.join(sd, "new-" + who)
            if who == "root":
                got = errname(lambda: touch(new))
            else:
                got = t_as_user(USER, USER, lambda: touch(new))
                got = "ok" if got == "ok" else got.split(":", 1)[1]
            t_eq(got, create, "create in %s dir as %s" % (name, who))
        t_eq(errname(lambda: os.unlink(old)), remove, "unlink in %s dir" % name)
        t_eq(errname(lambda: os.rename(old, os.path.join(d, "moved"))), remove,
             "rename out of %s dir" % name)
        t_eq(errname(lambda: os.mkdir(os.path.join(sd, "sub"))), create,
             "mkdir in %s dir" % name)
        chattr(sd, remove=fl)
    return f


def fibmap(fd, blk):
    return struct.unpack("=i", fcntl.ioctl(fd, FIBMAP, struct.pack("=i", blk)))[0]


def debugfs_bmap(dev, path, blk):
    out = t_run(["debugfs", "-R", "bmap %s %d" % (path, blk), dev], quiet=True).stdout
    return int(out.strip().splitlines()[-1])


def part_fibmap(env, mnt):
    t_step("FIBMAP: device blocks of written data, 0 for holes and unwritten")
    p = os.path.join(mnt, "bmap")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        os.pwrite(fd, b"a" * 8192, 0)
        os.pwrite(fd, b"b" * 4096, 64 * 4096)
        os.fsync(fd)
        os.pwrite(fd, b"c" * 4096, 80 * 4096)   # delayed allocation
        os.posix_fallocate(fd, 100 * 4096, 4096)
        got = {b: fibmap(fd, b) for b in (0, 1, 10, 64, 80, 100)}
    finally:
        os.close(fd)
    t_log("FIBMAP: %s" % got)
    for b in (0, 1, 64, 80):
        t_check(got[b] > 0, "FIBMAP of written block %d is %d" % (b, got[b]))
    t_eq(got[1], got[0] + 1, "FIBMAP of block 1 follows block 0")
    t_eq(got[10], 0, "FIBMAP of a hole")
    t_eq(got[100], 0, "FIBMAP of an unwritten extent")
    return got


def part_trim(env, mnt, img):
    t_step("FITRIM: free space discarded, data kept")
    keep = os.path.join(mnt, "keep")
    data = bytes(range(256)) * 4096
    with open(keep, "wb") as fh:
        fh.write(data)
    junk = os.path.join(mnt, "junk")
    with open(junk, "wb") as fh:
        for i in range(24):
            fh.write(bytes([i + 1]) * MIB)
    junk2 = os.path.join(mnt, "junk2")
    with open(junk2, "wb") as fh:
        fh.write(b"z" * (8 * MIB))
    os.sync()
    os.unlink(junk)
    os.sync()
    before = os.stat(img).st_blocks * 512
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        bad = {"start past the end": struct.pack("=QQQ", 1 << 40, 1 << 30, 0),
               "len below a block": struct.pack("=QQQ", 0, 1024, 0),
               "minlen past a group": struct.pack("=QQQ", 0, 1 << 40, 1 << 40)}
        for what, arg in bad.items():
            t_eq(errname(lambda: fcntl.ioctl(fd, FITRIM, arg)), "EINVAL", "FITRIM " + what)
        t_eq(t_as_user(USER, USER, lambda: fcntl.ioctl(
            fd, FITRIM, struct.pack("=QQQ", 0, 1 << 62, 0)) and None),
            "errno:EPERM", "FITRIM as a user")
        out = fcntl.ioctl(fd, FITRIM, struct.pack("=QQQ", 0, (1 << 64) - 1, 0))
        trimmed = struct.unpack("=QQQ", out)[1]
        st = os.statvfs(mnt)
    finally:
        os.close(fd)
    after = os.stat(img).st_blocks * 512
    free = st.f_bfree * st.f_frsize
    t_log("trimmed %d bytes, %d free; image %d -> %d bytes allocated"
          % (trimmed, free, before, after))
    t_check(20 * MIB <= trimmed <= free + MIB,
            "FITRIM trimmed %d bytes, free %d" % (trimmed, free))
    t_check(after <= before - 20 * MIB,
            "the image file gave back the deleted file's blocks (%d -> %d)"
            % (before, after))
    with open(keep, "rb") as fh:
        t_eq(fh.read() == data, True, "data of a kept file after FITRIM")

    t_step("FITRIM again: nothing until blocks are freed, as ext4")
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        def trim():
            out = fcntl.ioctl(fd, FITRIM, struct.pack("=QQQ", 0, (1 << 64) - 1, 0))
            return struct.unpack("=QQQ", out)[1]
        t_eq(trim(), 0, "a second FITRIM discards nothing")
        os.unlink(junk2)
        os.sync()
        again = trim()
        t_check(8 * MIB <= again <= free + 9 * MIB,
                "FITRIM after deleting 8 MiB discarded %d bytes" % again)
    finally:
        os.close(fd)
    with open(keep, "rb") as fh:
        t_eq(fh.read() == data, True, "data of a kept file after FITRIM")


def part_ioctls(env):
    img_dev = env.new_fs(64 * MIB, name="ioctl.img")
    img = os.path.join(env.tmp, "ioctl.img")
    m = env.mount(img_dev, OPTS)
    mnt = m.mnt
    os.chmod(mnt, 0o777)
    f = part_flags(env, mnt)
    got = part_fibmap(env, mnt)
    part_trim(env, mnt, img)

    t_step("the label: root sets it, e2label reads it after unmount")
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        lab = b"wbt-label"
        t_eq(errname(lambda: fcntl.ioctl(fd, FS_IOC_SETFSLABEL, b"x" * 17 + bytes(239))),
             "EINVAL", "a label of 17 bytes")
        t_eq(t_as_user(USER, USER, lambda: fcntl.ioctl(
            fd, FS_IOC_SETFSLABEL, lab + bytes(256 - len(lab))) and None),
            "errno:EPERM", "setting the label as a user")
        fcntl.ioctl(fd, FS_IOC_SETFSLABEL, lab + bytes(256 - len(lab)))
        got_lab = fcntl.ioctl(fd, FS_IOC_GETFSLABEL, bytes(256)).rstrip(b"\0")
        t_eq(got_lab, lab, "FS_IOC_GETFSLABEL")
    finally:
        os.close(fd)
    manifest = t_manifest(mnt)
    env.umount(m)
    t_eq(t_run(["e2label", img_dev]).stdout.strip(), lab.decode(), "e2label after unmount")
    for b in (0, 64, 80):
        t_eq(debugfs_bmap(img_dev, "/bmap", b), got[b], "debugfs bmap of block %d" % b)
    env.verify_after_umount(img_dev, manifest)
    t_step("the kernel's ext4 reads the flags wbcfs stored")
    k = env.kernel_ro(img_dev)
    try:
        kf = os.path.join(k.mnt, os.path.relpath(f, mnt))
        t_eq(getflags(kf) & (FL_NODUMP | FL_NOATIME | FL_EXTENTS), FL_NODUMP | FL_EXTENTS,
             "flags of flags/f under the kernel's ext4")
    finally:
        env.umount(k)


def body(env):
    part_handles(env)
    part_ioctls(env)


if __name__ == "__main__":
    t_main("export", body, deadline_s=300)
