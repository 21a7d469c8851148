#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Seeded, reproducible random operations checked against a model.

Every operation (pwrite at offsets crossing 4 KiB pages and 128 MiB
boundaries, truncate up and down, punch holes, reads, renames, unlinks,
creates, fsync, reopen) runs on the mount and, identically, on a mirror
tree on tmpfs (the model).  Every read is compared with the model's; at the
end every file is compared, the filesystem is unmounted, e2fsck -fn must be
clean and the kernel's ext4 must see the model's tree.  wbcfs is mounted
with cache_size=16M so that reclaim runs.

    WBCFS_BIN=build/wbcfs test/integration/test_random.py
    WBCFS_SEED=1234 test/integration/test_random.py --kernel
Env: WBCFS_SEED (default: random, printed), WBCFS_RANDOM_OPS (default
400000), WBCFS_RANDOM_SECONDS (time cap, default 90; the op count reached
is printed when it stops early: pass it as WBCFS_RANDOM_OPS to replay).
"""

import ctypes
import errno
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, GIB, TFail, t_check, t_compare, t_log, t_main,  # noqa: E402
                    t_check_bitmaps_tracked, t_manifest, t_read_all, t_step, t_write_all)

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64]
PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
EXTENT = 128 * MIB
NDIRS = 4
NNAMES = 60         # name slots; about half hold files at any time
NFILES = 30
BIG = ["big%d" % i for i in range(4)]      # resident files
BIG_SIZE = 12 * MIB


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Random:
    def __init__(self, env, mnt, model, seed):
        self.mnt = mnt
        self.model = model
        self.rng = random.Random(seed)
        self.names = ["d%d/f%02d" % (i % NDIRS, i) for i in range(NNAMES)]
        self.live = set()
        self.fds = {}           # name -> (target fd, model fd)
        self.stats = {}
        self.nbytes_written = 0

    # -- random shapes
    def offset(self):
        r = self.rng.random()
        if r < 0.45:                       # near a page boundary, first MiBs
            k = self.rng.randrange(0, 768)
            return max(0, k * 4096 + self.rng.randrange(-300, 300))
        if r < 0.7:                        # anywhere in the first 4 MiB
            return self.rng.randrange(0, 4 * MIB)
        if r < 0.9:                        # around a 128 MiB boundary
            k = self.rng.randrange(1, 4)
            return max(0, k * EXTENT + self.rng.randrange(-256 * 1024, 256 * 1024))
        return self.rng.randrange(0, 3 * EXTENT + MIB)   # anywhere (sparse)

    def length(self):
        r = self.rng.random()
        if r < 0.2:
            return self.rng.randrange(1, 64)
        if r < 0.5:
            return 4096 + self.rng.randrange(-200, 200)
        if r < 0.85:
            return self.rng.randrange(64, 64 * 1024)
        return self.rng.randrange(64 * 1024, 512 * 1024)

    def data(self, n):
        b = self.rng.getrandbits(64).to_bytes(8, "little")
        return (b * (n // 8 + 1))[:n]

    # -- both trees
    def tp(self, name):
        return os.path.join(self.mnt, name)

    def mp(self, name):
        return os.path.join(self.model, name)

    def open(self, name, flags=os.O_RDWR):
        if name not in self.fds:
            self.fds[name] = (os.open(self.tp(name), flags, 0o644),
                              os.open(self.mp(name), flags, 0o644))
        return self.fds[name]

    def close(self, name):
        fds = self.fds.pop(name, None)
        if fds:
            os.close(fds[0])
            os.close(fds[1])

    def both(self, what, fn_t, fn_m):
        """Run an op on target and model; they must agree on the outcome."""
        et = em = None
        rt = rm = None
        try:
            rt = fn_t()
        except OSError as e:
            et = e.errno
        try:
            rm = fn_m()
        except OSError as e:
            em = e.errno
        if et != em:
            raise TFail("%s: target %s, model %s" % (
                what, errno.errorcode.get(et, "ok"), errno.errorcode.get(em, "ok")))
        return rt, rm

    # -- operations
    def op_create(self):
        free = [n for n in self.names if n not in self.live]
        if not free or len(self.live) >= NFILES + 10:
            return self.op_write()
        n = self.rng.choice(free)
        self.open(n, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        self.live.add(n)
        return "create %s" % n

    def pick(self, allow_big=True):
        """A live file; sometimes one of the resident big files, which are
        never unlinked, renamed or truncated down, so that the working set
        stays well above cache_size and reclaim runs."""
        if allow_big and self.rng.random() < 0.3:
            return self.rng.choice(BIG)
        if not self.live:
            return None
        return self.rng.choice(sorted(self.live))

    def op_write(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        off, ln = self.offset(), self.length()
        buf = self.data(ln)
        ft, fm = self.open(n)
        self.both("pwrite %s @%d+%d" % (n, off, ln),
                  lambda: t_write_all(ft, buf, off),
                  lambda: t_write_all(fm, buf, off))
        self.nbytes_written += ln
        return "write %s @%d+%d" % (n, off, ln)

    def op_read(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        ft, fm = self.open(n)
        size = os.fstat(fm).st_size
        tsize = os.fstat(ft).st_size
        if tsize != size:
            raise TFail("%s: size %d, model %d" % (n, tsize, size))
        if size and self.rng.random() < 0.7:
            off = self.rng.randrange(0, size)
        else:
            off = self.offset()
        ln = self.length()
        a = t_read_all(ft, ln, off)
        b = t_read_all(fm, ln, off)
        if a != b:
            raise TFail("read %s @%d+%d: %s" % (n, off, ln, first_diff(a, b, off)))
        return "read %s @%d+%d" % (n, off, ln)

    def op_truncate(self):
        n = self.pick(allow_big=False)
        if n is None:
            return self.op_create()
        ft, fm = self.open(n)
        size = os.fstat(fm).st_size
        r = self.rng.random()
        if r < 0.25 and size:
            new = self.rng.randrange(0, size)          # down
        elif r < 0.3:
            new = 0
        else:
            new = self.offset()
        if self.rng.random() < 0.5:
            self.both("ftruncate %s %d" % (n, new), lambda: os.ftruncate(ft, new),
                      lambda: os.ftruncate(fm, new))
        else:
            self.both("truncate %s %d" % (n, new),
                      lambda: os.truncate(self.tp(n), new),
                      lambda: os.truncate(self.mp(n), new))
        return "truncate %s %d (was %d)" % (n, new, size)

    def op_punch(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        ft, fm = self.open(n)
        size = os.fstat(fm).st_size
        off = self.rng.randrange(0, size) if size and self.rng.random() < 0.8 \
            else self.offset()
        ln = self.length() * self.rng.choice((1, 1, 4))
        self.both("punch %s @%d+%d" % (n, off, ln),
                  lambda: fallocate(ft, PUNCH, off, ln),
                  lambda: fallocate(fm, PUNCH, off, ln))
        return "punch %s @%d+%d" % (n, off, ln)

    def op_rename(self):
        n = self.pick(allow_big=False)
        if n is None:
            return self.op_create()
        to = self.rng.choice(self.names)
        # descriptors stay valid across rename; keep them keyed by name
        if to in self.fds and to != n:
            self.close(to)
        self.both("rename %s %s" % (n, to),
                  lambda: os.rename(self.tp(n), self.tp(to)),
                  lambda: os.rename(self.mp(n), self.mp(to)))
        if to != n:
            if n in self.fds:
                self.fds[to] = self.fds.pop(n)
            self.live.discard(n)
            self.live.add(to)
        return "rename %s -> %s" % (n, to)

    def op_unlink(self):
        n = self.pick(allow_big=False)
        if n is None or len(self.live) < NFILES // 2:
            return self.op_create()
        if self.rng.random() < 0.5:
            self.close(n)
            self.both("unlink %s" % n, lambda: os.unlink(self.tp(n)),
                      lambda: os.unlink(self.mp(n)))
        else:
            # unlink while open: write and read through the fd, then close
            ft, fm = self.open(n)
            self.both("unlink open %s" % n, lambda: os.unlink(self.tp(n)),
                      lambda: os.unlink(self.mp(n)))
            off, ln = self.offset() % (4 * MIB), self.length()
            buf = self.data(ln)
            t_write_all(ft, buf, off)
            t_write_all(fm, buf, off)
            a, b = t_read_all(ft, ln + 100, off), t_read_all(fm, ln + 100, off)
            if a != b:
                raise TFail("read of unlinked open %s: %s" % (
                    n, first_diff(a, b, off)))
            self.close(n)
        self.live.discard(n)
        return "unlink %s" % n

    def op_fsync(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        ft, _ = self.open(n)
        if self.rng.random() < 0.5:
            os.fsync(ft)
        else:
            os.fdatasync(ft)
        return "fsync %s" % n

    def op_reopen(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        self.close(n)
        return "close %s" % n

    def op_verify(self):
        n = self.pick()
        if n is None:
            return self.op_create()
        self.verify_file(n)
        return "verify %s" % n

    def verify_file(self, n):
        ft, fm = self.open(n)
        st_t, st_m = os.fstat(ft), os.fstat(fm)
        if st_t.st_size != st_m.st_size:
            raise TFail("%s: size %d, model %d" % (n, st_t.st_size, st_m.st_size))
        # compare the model's data regions and a sample of its holes
        off = 0
        size = st_m.st_size
        while off < size:
            try:
                d = os.lseek(fm, off, os.SEEK_DATA)
            except OSError:
                d = size
            h = os.lseek(fm, d, os.SEEK_HOLE) if d < size else size
            if d > off:   # hole in the model: target must read zeros there
                for probe in (off, (off + d) // 2, d - 1):
                    b = t_read_all(ft, 1, probe)
                    if b != b"\0":
                        raise TFail("%s: byte %d should be 0 (hole), got %r"
                                    % (n, probe, b))
            pos = d
            while pos < h:
                ln = min(4 * MIB, h - pos)
                a, b = t_read_all(ft, ln, pos), t_read_all(fm, ln, pos)
                if a != b:
                    raise TFail("verify %s @%d+%d: %s" % (n, pos, ln,
                                                          first_diff(a, b, pos)))
                pos += ln
            off = h

    OPS = (("write", 35), ("read", 22), ("truncate", 8), ("punch", 7),
           ("rename", 6), ("unlink", 4), ("create", 6), ("fsync", 5),
           ("reopen", 5), ("verify", 2))

    def run(self, nops, seconds):
        for i in range(NDIRS):
            os.mkdir(self.tp("d%d" % i))
            os.mkdir(self.mp("d%d" % i))
        for _ in range(NFILES):
            self.op_create()
        for n in BIG:
            ft, fm = self.open(n, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            for off in range(0, BIG_SIZE, MIB):
                buf = self.data(MIB)
                t_write_all(ft, buf, off)
                t_write_all(fm, buf, off)
        t_log("4 resident files of %d MiB written" % (BIG_SIZE // MIB))
        names = [o for o, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        t0 = time.monotonic()
        last = []
        i = 0
        for i in range(nops):
            if time.monotonic() - t0 > seconds:
                t_log("time cap of %ds reached after %d ops (reproduce with "
                      "WBCFS_RANDOM_OPS=%d)" % (seconds, i, i))
                break
            op = self.rng.choices(names, weights)[0]
            try:
                desc = getattr(self, "op_" + op)()
            except TFail as e:
                raise TFail("op #%d: %s\nlast ops:\n  %s" % (
                    i, e, "\n  ".join(last[-15:])))
            except OSError as e:
                raise TFail("op #%d (%s): unexpected %s\nlast ops:\n  %s" % (
                    i, op, e, "\n  ".join(last[-15:])))
            last.append(desc)
            if len(last) > 50:
                del last[:25]
            self.stats[op] = self.stats.get(op, 0) + 1
            if i and i % 25000 == 0:
                t_log("%d ops, %d live files, %.1f MiB written, model holds "
                      "%.1f MiB" % (i, len(self.live), self.nbytes_written / MIB,
                                    model_bytes(self.model) / MIB))
        t_log("ran %d ops in %.1fs: %s" % (i + 1, time.monotonic() - t0,
              ", ".join("%s=%d" % kv for kv in sorted(self.stats.items()))))

    def verify_all(self):
        for n in sorted(self.live) + BIG:
            self.verify_file(n)
        for n in list(self.fds):
            self.close(n)


def model_bytes(root):
    return sum(os.stat(os.path.join(dp, f)).st_blocks * 512
               for dp, _, fs in os.walk(root) for f in fs)


def first_diff(a, b, base):
    if len(a) != len(b):
        return "length %d, model %d" % (len(a), len(b))
    for i in range(len(a)):
        if a[i] != b[i]:
            return "first difference at offset %d: %r vs model %r" % (
                base + i, a[i:i + 16], b[i:i + 16])
    return "equal?"


def body(env):
    seed = int(os.environ.get("WBCFS_SEED") or random.SystemRandom().randrange(1 << 32))
    nops = int(os.environ.get("WBCFS_RANDOM_OPS", "400000"))
    seconds = int(os.environ.get("WBCFS_RANDOM_SECONDS", "90"))
    t_log("seed %d (reproduce with WBCFS_SEED=%d), %d ops" % (seed, seed, nops))
    model = env.shm_dir("model")
    dev = env.new_fs(2 * GIB)
    m = env.mount(dev, ["cache_size=16M"])
    r = Random(env, m.mnt, model, seed)
    try:
        r.run(nops, seconds)
        t_step("every file equals the model")
        r.verify_all()
    except TFail as e:
        raise TFail("%s\n(seed %d)" % (e, seed))
    keys = ("type", "size", "sha256")
    man_t = t_manifest(m.mnt, exclude=("lost+found",))
    man_m = t_manifest(model)
    t_compare(man_m, man_t, "model", "mount", keys=keys)
    t_step("after a sync the tree still equals the model")
    t_check_bitmaps_tracked(m.mnt)
    os.sync()
    env.umount(m)
    env.verify_after_umount(dev, man_t, exclude=("lost+found",))
    t_log("model holds %.1f MiB of data; seed was %d" % (
        model_bytes(model) / MIB, seed))


if __name__ == "__main__":
    t_main("random", body, deadline_s=300)
