#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""fallocate(2) modes give what the kernel's ext4 gives.

Every sequence runs twice: on a file of the mount under test and on a file
of the kernel's ext4 on a second loop device (the reference).  After every
call the errno, the size and the bytes must be the same; after a remount
(both sides) the bytes again, the logical blocks each file has allocated
(leaf extents read with debugfs on the unmounted devices), SEEK_DATA /
SEEK_HOLE and st_blocks of the targeted files (SEEK before any page is
cached: ext4 counts cached pages of unwritten extents as data), and
e2fsck -fn must be clean.  The daemon's log must hold no libext2fs
complaint (an out-of-range bitmap test shows there as "Illegal block
number passed to ext2fs_test_block_bitmap").

  - a seeded random sequence of writes, fsyncs and fallocate calls of
    every mode that reaches a FUSE filesystem (plain, KEEP_SIZE,
    PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE, ZERO_RANGE|KEEP_SIZE), aligned and
    not, inside and past EOF, one of them going on after a remount;
  - ZERO_RANGE over dirty pages not yet written back, and inside one
    block of pages not cached;
  - ZERO_RANGE over pages under writeback (the daemon writes to a
    blkio-throttled device; skipped where there is no cgroup v1 blkio);
  - ZERO_RANGE|KEEP_SIZE past EOF; EFBIG at the size limit;
  - preallocation between two unwritten extents laid out in the reverse
    physical order (libext2fs 1.47.0's ext2fs_fallocate tested a bitmap
    range that wraps around there), and before the first extent (it
    allocated up to that extent);
  - block-mapped files: EOPNOTSUPP but for PUNCH_HOLE, nothing dropped;
  - which calls change mtime and ctime;
  - fallocate over dirty pages not yet written back (delayed allocation):
    statfs f_bfree counts their blocks once, before and after writeback,
    and agrees with the superblock after unmount;
  - an unprivileged fallocate (t_as_user) cannot take the root reserve.

COLLAPSE_RANGE and INSERT_RANGE never reach a FUSE daemon: the kernel's
FUSE module answers EOPNOTSUPP itself.

    WBCFS_BIN=build/wbcfs test/integration/test_falloc.py [--kernel]
"""

import ctypes
import errno
import hashlib
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, Mount, TFail, TSkip, t_as_user, t_check,  # noqa: E402
                    t_eq, t_is_kernel, t_log, t_main, t_run, t_step)

KEEP = 0x01
PUNCH = 0x02
ZERO = 0x10
MAX_BYTES = 0xFFFFFFFF * 4096
BS = 4096

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]

COMPLAINTS = ("ext2fs_", "Illegal block", "Illegal inode", "bitmap")


def falloc(fd, mode, off, n):
    """fallocate(2): 0 or the errno name."""
    if _libc.fallocate(fd, mode, off, n) == 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), "?")


def mode_name(mode):
    names = [n for b, n in ((KEEP, "KEEP_SIZE"), (PUNCH, "PUNCH_HOLE"), (ZERO, "ZERO_RANGE"))
             if mode & b]
    return "|".join(names) or "0"


def file_hash(fd):
    size = os.fstat(fd).st_size
    h = hashlib.sha256()
    off = 0
    while off < size:
        b = os.pread(fd, min(MIB, size - off), off)
        if not b:
            raise TFail("short read at %d of %d" % (off, size))
        h.update(b)
        off += len(b)
    return size, h.hexdigest()


def seek_map(fd):
    """[(data_start, hole_start), ...] through SEEK_DATA/SEEK_HOLE."""
    size = os.fstat(fd).st_size
    out, off = [], 0
    while off < size:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            raise
        h = os.lseek(fd, d, os.SEEK_HOLE)
        out.append((d, h))
        off = h
    return out


_EXT_RE = re.compile(r"^\s*(\d+)/\s*(\d+)\s+\d+/\s*\d+\s+(\d+)\s*-\s*(\d+)\s+\d+")


def allocated(dev, name):
    """Logical block ranges [(first, last)] of name's leaf extents, merged."""
    p = t_run(["debugfs", "-R", "ex /" + name, dev], quiet=True)
    runs = []
    for line in p.stdout.splitlines():
        m = _EXT_RE.match(line)
        if not m or m.group(1) != m.group(2):
            continue
        a, b = int(m.group(3)), int(m.group(4))
        if runs and runs[-1][1] + 1 == a:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return runs


def tree_blocks(dev, name):
    """How many extent tree blocks (index and leaf nodes outside the
    inode) name has: one per entry of a level above the leaves."""
    p = t_run(["debugfs", "-R", "ex /" + name, dev], quiet=True)
    return sum(1 for line in p.stdout.splitlines()
               if (m := _EXT_RE.match(line)) and m.group(1) != m.group(2))


class Side:
    """One filesystem of the pair: the target under test or the reference."""

    def __init__(self, env, dev, ref):
        self.env, self.dev, self.ref = env, dev, ref
        self.m = None
        self.fds = {}

    def mount(self):
        if self.ref:
            mnt = self.env.mkdir("ref-" + os.path.basename(self.dev))
            t_run(["mount", "-t", "ext4", self.dev, mnt])
            self.m = Mount(mnt, self.dev, "kernel")
            self.env.mounts.append(self.m)
        else:
            self.m = self.env.mount(self.dev, ["cache_size=128M"])

    def umount(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
        self.env.umount(self.m)
        if not self.ref:
            self.check_log()    # the next mount's log takes the same name
        self.m = None

    def fd(self, name):
        if name not in self.fds:
            self.fds[name] = os.open(os.path.join(self.m.mnt, name),
                                     os.O_RDWR | os.O_CREAT, 0o644)
        return self.fds[name]

    def check_log(self):
        """The daemon's whole log (stderr) holds no libext2fs complaint."""
        if not self.m or not self.m.log:
            return
        with open(self.m.log, errors="replace") as f:
            text = f.read()
        bad = [ln for ln in text.splitlines() if any(c in ln for c in COMPLAINTS)]
        t_check(not bad, "daemon log %s has libext2fs complaints:\n%s"
                % (self.m.log, "\n".join(bad[:10])))


class Pair:
    def __init__(self, env, size=512 * MIB, mkfs_opts=None, tag=""):
        self.t = Side(env, env.new_fs(size, mkfs_opts, name="target%s.img" % tag), False)
        self.r = Side(env, env.new_fs(size, mkfs_opts, name="ref%s.img" % tag), True)
        self.t.mount()
        self.r.mount()
        self.names = set()
        self.ops = []           # what was done, for the failure message

    def sides(self):
        return (self.t, self.r)

    def do(self, name, what, fn):
        """fn(fd) on both sides; the results must agree."""
        self.names.add(name)
        self.ops.append("%s: %s" % (name, what))
        got = [fn(s.fd(name)) for s in self.sides()]
        t_eq(got[0], got[1], "%s: %s (target vs ext4)" % (name, what))
        return got[0]

    def write(self, name, off, data):
        def fn(fd):
            os.pwrite(fd, data, off)
            return "ok"
        return self.do(name, "pwrite(%d, %d)" % (off, len(data)), fn)

    def fsync(self, name):
        return self.do(name, "fsync", lambda fd: os.fsync(fd) or "ok")

    def falloc(self, name, mode, off, n):
        return self.do(name, "fallocate(%s, %d, %d)" % (mode_name(mode), off, n),
                       lambda fd: falloc(fd, mode, off, n))

    def same_bytes(self, name, what):
        got = [file_hash(s.fd(name)) for s in self.sides()]
        t_eq(got[0][0], got[1][0], "%s: size after %s" % (name, what))
        t_check(got[0][1] == got[1][1], "%s: contents differ from ext4's after %s"
                % (name, what))

    def remount(self, what, seek=(), blocks=(), unread=()):
        """Unmount both, compare allocations and fsck, mount again and
        compare bytes (and SEEK_DATA/SEEK_HOLE maps and st_blocks of
        the files named in seek and blocks)."""
        t_step("remount after %s: bytes, allocated blocks, e2fsck -fn" % what)
        for s in self.sides():
            s.umount()
        # st_blocks counts extent tree blocks too: how many a file needs
        # depends on how its extents were split and merged along the way,
        # which differs (ext4 merges unwritten extents as their writes
        # complete): the data blocks must agree, the tree may differ
        tree = {name: [tree_blocks(s.dev, name) for s in self.sides()]
                for name in blocks}
        for name in sorted(self.names):
            a = [allocated(s.dev, name) for s in self.sides()]
            if a[0] != a[1]:
                t_log("calls on %s so far:\n  %s" % (name, "\n  ".join(
                    o for o in self.ops if o.startswith(name + ":"))))
            t_eq(a[0], a[1], "%s: allocated logical blocks after %s" % (name, what))
        self.t.env.fsck(self.t.dev)
        for s in self.sides():
            s.mount()
        # before anything is read: ext4 counts cached pages of unwritten
        # extents as data
        for name in seek:
            got = [seek_map(s.fd(name)) for s in self.sides()]
            t_eq(got[0], got[1], "%s: SEEK_DATA/SEEK_HOLE map after %s" % (name, what))
        for name in sorted(self.names - set(unread)):
            self.same_bytes(name, what + " and remount")
        for name in blocks:
            got = [os.fstat(s.fd(name)).st_blocks - tree[name][i] * (BS // 512)
                   for i, s in enumerate(self.sides())]
            if tree[name][0] != tree[name][1]:
                t_log("%s: %d extent tree blocks here, %d on ext4"
                      % (name, tree[name][0], tree[name][1]))
            t_eq(got[0], got[1], "%s: st_blocks of data after %s" % (name, what))


def pattern(rnd, n):
    return rnd.randbytes(n)


def random_sequence(p, seed, steps, name):
    t_step("seed %d: %d random writes, fsyncs and fallocates on %s, checked against ext4"
           % (seed, steps, name))
    rnd = random.Random(seed)
    modes = (0, KEEP, PUNCH | KEEP, ZERO, ZERO | KEEP)
    size = os.fstat(p.t.fd(name)).st_size
    for i in range(steps):
        r = rnd.random()
        aligned = rnd.random() < 0.5
        off = rnd.randrange(0, min(size + 256 * 1024, 4 * MIB))
        n = rnd.randrange(1, 512 * 1024)
        if aligned:
            off -= off % BS
            n = max(BS, n - n % BS)
        if r < 0.3:
            what = "pwrite"
            p.write(name, off, pattern(rnd, n))
        elif r < 0.38:
            what = "fsync"
            p.fsync(name)
        else:
            mode = rnd.choice(modes)
            what = "fallocate %s %d %d" % (mode_name(mode), off, n)
            p.falloc(name, mode, off, n)
        p.same_bytes(name, "step %d (%s)" % (i, what))
        size = os.fstat(p.t.fd(name)).st_size


def zero_dirty(p):
    t_step("ZERO_RANGE over dirty pages not yet written back")
    rnd = random.Random(11)
    name = "dirty"
    p.write(name, 0, pattern(rnd, 256 * 1024))
    p.falloc(name, ZERO, 5000, 200000)
    p.same_bytes(name, "zero range over dirty pages")
    p.falloc(name, ZERO | KEEP, 220 * 1024, 100 * 1024)
    p.same_bytes(name, "zero range (keep size) over dirty pages past EOF")
    # block-aligned zeroing of written data: unwritten extents, holes to SEEK
    name2 = "aligned"
    p.write(name2, 0, pattern(rnd, 64 * BS))
    p.fsync(name2)
    p.falloc(name2, ZERO, 8 * BS, 16 * BS)
    p.write(name2, 40 * BS, pattern(rnd, 3 * BS))
    p.falloc(name2, ZERO, 38 * BS, 8 * BS)
    p.same_bytes(name2, "aligned zero ranges")
    p.write("small", 0, pattern(rnd, 3 * BS))   # for zero_small, after a remount
    return (name2,), (name, name2)


def zero_small(p):
    t_step("ZERO_RANGE inside one block of pages not cached: its other bytes stay")
    name = "small"
    p.falloc(name, ZERO, 0, 100)
    p.falloc(name, ZERO | KEEP, 2 * BS, 10)
    p.falloc(name, ZERO, BS + 7, 10)
    p.same_bytes(name, "zero ranges inside one block")


def zero_keep_past_eof(p):
    t_step("ZERO_RANGE|KEEP_SIZE past EOF, unaligned; EFBIG at the limit")
    rnd = random.Random(12)
    name = "keep"
    p.write(name, 0, pattern(rnd, 10000))
    p.falloc(name, ZERO | KEEP, 8192 + 100, 64 * 1024)
    p.same_bytes(name, "zero range keep size past EOF")
    t_eq(os.fstat(p.t.fd(name)).st_size, 10000, "size after ZERO_RANGE|KEEP_SIZE")
    p.falloc(name, ZERO, 100 * 1024 + 7, 3 * BS + 5)
    p.same_bytes(name, "zero range growing the file")
    t_eq(p.falloc(name, ZERO, MAX_BYTES - BS, 2 * BS), "EFBIG",
         "ZERO_RANGE across the size limit")
    t_eq(p.falloc(name, ZERO | KEEP, MAX_BYTES - BS, 2 * BS), "EFBIG",
         "ZERO_RANGE|KEEP_SIZE across the size limit")
    p.falloc(name, ZERO | KEEP, MAX_BYTES - BS, BS)
    return (name,), (name,)


def reversed_extents(p):
    t_step("preallocate between two unwritten extents in reverse physical order")
    rnd = random.Random(13)
    name = "rev"
    p.falloc(name, KEEP, 0, 10 * BS)              # blocks 0-9
    p.falloc(name, KEEP, 100 * BS, 10 * BS)       # 100-109, physically after
    p.write("filler", 0, pattern(rnd, 200 * BS))  # takes the blocks between
    p.fsync("filler")
    p.falloc(name, KEEP, 50 * BS, 10 * BS)        # 50-59, physically after 100-109
    p.write(name, 52 * BS + 10, pattern(rnd, 100))
    p.falloc(name, KEEP, 60 * BS, 40 * BS)        # the hole between 59 and 100
    p.same_bytes(name, "preallocation between extents")
    t_step("preallocation before the first extent allocates only the range")
    p.falloc("before", KEEP, 100 * BS, BS)
    p.falloc("before", KEEP, 0, BS)
    p.falloc("before", 0, 300 * BS + 5, 5 * BS)
    p.falloc("before", KEEP, 200 * BS, 2 * BS)
    return (), (name, "before")


def times(p):
    t_step("fallocate stamps mtime and ctime as ext4 does")
    cases = ((0, 20000), (KEEP, 50000), (0, 0), (ZERO, 100), (ZERO | KEEP, 90000),
             (PUNCH | KEEP, 0))
    for i, (mode, off) in enumerate(cases):
        name = "times%d" % i
        p.write(name, 0, b"t" * 20000)
        st0 = [os.fstat(s.fd(name)) for s in p.sides()]
        time.sleep(0.05)
        p.falloc(name, mode, off, 8192)
        st1 = [os.fstat(s.fd(name)) for s in p.sides()]
        for f in ("st_mtime_ns", "st_ctime_ns"):
            got = [getattr(a, f) != getattr(b, f) for a, b in zip(st0, st1)]
            t_eq(got[0], got[1], "%s changed by fallocate(%s, %d, 8192)"
                 % (f, mode_name(mode), off))


def root_reserve(env):
    t_step("an unprivileged fallocate leaves the root reserve alone, as in ext4")
    p = Pair(env, 64 * MIB, tag="-resv")
    for s in p.sides():
        d = os.path.join(s.m.mnt, "u")
        os.mkdir(d)
        os.chmod(d, 0o777)
    p.write("fill", 0, b"f" * BS)
    p.fsync("fill")
    for s in p.sides():
        st = os.statvfs(s.m.mnt)
        t_check(st.f_bavail > 0, "%s: nothing available before the fill" % s.m.mnt)
        # as root: everything a user may have, which root can go past
        t_eq(falloc(s.fd("fill"), 0, BS, st.f_bavail * st.f_frsize), "ok",
             "%s: root preallocating what users may use" % s.m.mnt)

    def user_falloc(mnt):
        def fn():
            fd = os.open(os.path.join(mnt, "u", "g"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                r = falloc(fd, 0, 0, 4 * BS)
                r2 = falloc(fd, ZERO | KEEP, 8 * BS, 4 * BS)
            finally:
                os.close(fd)
            return "%s/%s" % (r, r2)
        return t_as_user(65534, 65534, fn)
    got = [user_falloc(s.m.mnt) for s in p.sides()]
    t_eq(got[0], got[1], "unprivileged fallocate into the root reserve (target vs ext4)")
    t_log("unprivileged fallocate past the available space: %s" % got[0])
    t_eq(p.falloc("fill", KEEP, 1 << 30, 4 * BS), "ok", "root preallocating into the reserve")
    for s in p.sides():
        s.umount()
    p.t.env.fsck(p.t.dev)


def over_dirty(env):
    """fallocate over dirty pages not yet written back (delayed allocation):
    their reserved blocks are the ones fallocate allocates, counted once."""
    t_step("fallocate over dirty delalloc pages: statfs counts their blocks once")
    dev = env.new_fs(64 * MIB, name="overdirty.img")
    m = env.mount(dev, ["dirty_expire_centisecs=360000", "dirty_writeback_centisecs=0"])
    path = os.path.join(m.mnt, "d")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
        os.sync()
        b0 = os.statvfs(m.mnt).f_bfree
        os.pwrite(fd, b"d" * (64 * BS), 0)
        b1 = os.statvfs(m.mnt).f_bfree
        t_eq(b0 - b1, 64, "blocks taken by 64 dirty pages")
        # half over the dirty pages, half past them
        t_eq(falloc(fd, 0, 32 * BS, 64 * BS), "ok", "fallocate over dirty pages")
        b2 = os.statvfs(m.mnt).f_bfree
        t_eq(b0 - b2, 96, "blocks taken after fallocate over 32 of the 64 dirty pages")
        os.fsync(fd)
        b3 = os.statvfs(m.mnt).f_bfree
        t_eq(b3, b2, "f_bfree after the pages were written back")
        t_eq(file_hash(fd)[0], 96 * BS, "size after fallocate")
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        data = f.read()
    t_check(data == b"d" * (64 * BS) + bytes(32 * BS), "bytes after fallocate over dirty pages")
    env.umount(m)
    out = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
    free = int(re.search(r"^Free blocks:\s*(\d+)", out, re.M).group(1))
    t_eq(b3, free, "f_bfree at unmount vs the superblock's free blocks")
    env.fsck(dev)


def block_mapped(env):
    t_step("block-mapped files (no extents): only PUNCH_HOLE, as in ext4")
    p = Pair(env, 64 * MIB, ["-O", "^extent,^64bit"], "-noext")
    name = "old"
    p.write(name, 0, b"x" * 10000)
    for mode in (0, KEEP, ZERO, ZERO | KEEP):
        t_eq(p.falloc(name, mode, 4096, 8192), errno.errorcode[errno.EOPNOTSUPP],
             "fallocate(%s) of a block-mapped file" % mode_name(mode))
    t_eq(p.falloc(name, PUNCH | KEEP, 4096, 4096), "ok", "punch in a block-mapped file")
    p.same_bytes(name, "fallocate of a block-mapped file")
    p.remount("fallocate of a block-mapped file", blocks=(name,))
    for s in p.sides():
        s.umount()


def zero_under_writeback(p, env):
    if t_is_kernel():
        t_log("kernel target: no daemon to slow down; writeback case skipped")
        return
    try:
        cg = env.blkio_cgroup()
    except TSkip as e:          # no cgroup v1 blkio here
        t_log("writeback case skipped: %s" % e)
        return
    t_step("ZERO_RANGE over pages under writeback (device at 2 MB/s)")
    cg.write_bps(p.t.dev, 2 * MIB)
    cg.add(p.t.m.pid)
    rnd = random.Random(14)
    name = "wb"
    data = pattern(rnd, 8 * MIB)
    p.write(name, 0, data)
    fd = p.t.fd(name)
    err = []

    def bg():
        try:
            os.fsync(fd)
        except OSError as e:
            err.append(e)
    th = threading.Thread(target=bg)
    th.start()
    vmstat = os.path.join(p.t.m.mnt, ".wbcfs", "vmstat")
    seen = 0
    for _ in range(100):
        with open(vmstat) as f:
            for line in f:
                k, v = line.split()[:2]
                if k == "nr_writeback":
                    seen = int(v)
        if seen:
            break
        time.sleep(0.05)
    t_check(seen > 0, "no page under writeback 5 s after fsync started")
    p.falloc(name, ZERO, MIB + 123, 4 * MIB - 200)
    p.falloc(name, ZERO | KEEP, 6 * MIB, 4 * MIB)
    th.join(120)
    t_check(not th.is_alive() and not err, "fsync during zero range: %s" % err)
    p.same_bytes(name, "zero range over writeback")
    cg.write_bps(p.t.dev, 0)
    p.remount("zero range over writeback", blocks=(name,))


def body(env):
    p = Pair(env)
    seek, blocks = (), ()
    for case in (zero_dirty, zero_keep_past_eof, reversed_extents):
        sk, bl = case(p)
        seek += sk
        blocks += bl
    p.remount("the targeted cases", seek=seek, blocks=blocks, unread=("small",))
    zero_small(p)
    # the second sequence goes on with the file of the first after a
    # remount (pages not cached), the third with a new one
    random_sequence(p, 1, 100, "rand")
    p.remount("the first random sequence", unread=("rand",))
    random_sequence(p, 2, 100, "rand")
    random_sequence(p, 3, 100, "rand3")
    p.remount("the random sequences")
    times(p)
    zero_under_writeback(p, env)
    over_dirty(env)
    root_reserve(env)
    block_mapped(env)
    for s in p.sides():
        s.umount()
    env.fsck(p.t.dev)


if __name__ == "__main__":
    if "--kernel" in sys.argv:
        os.environ["WBCFS_TEST_TARGET"] = "kernel"
    t_main("falloc", body, deadline_s=300)
