#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Many threads changing shared directories at once, checked against a model.

Eight writer threads create, write, truncate, rename (across the shared
directories, over their own names), hard-link, unlink, mkdir/rmdir and
move directories, fsync, all in the same four directories, so that every
namespace operation of one thread meets those of the others on the same
directory blocks, inode and block bitmaps and group descriptors.  Each
writer owns its names (prefix w<N>-), so the expected tree is the union of
what each did, applied identically to a mirror tree on tmpfs (the model).
After each write, truncate and link the writer's stat of the file
equals the model's.  Two reader threads list and stat the shared
directories all the while:
a listing never holds a name twice, a name listed either stats or has
just gone (ENOENT).  Lookups and listings are served without fs_lock
(from the directories' name caches and cached blocks) while the writers
change the same directories under it; vmstat must show both, and that
writeback claimed blocks and creates claimed inodes under fs_lock shared
(nr_blocks_claimed, nr_inodes_claimed).  At the
end the tree (type, size, content, link counts) equals the model; after
unmount e2fsck -fn is clean and the kernel's ext4 sees the model's tree.

    WBCFS_BIN=build/wbcfs test/integration/test_stress.py
Env: WBCFS_SEED (default: random, printed), WBCFS_STRESS_SECONDS (15).
"""

import errno
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, TFail, t_check, t_compare, t_log, t_main,  # noqa: E402
                    t_check_bitmaps_tracked, t_manifest, t_step)

NDIRS = 4
NWRITERS = 8
NREADERS = 2


class Writer:
    """One thread's names, and the same operations on mount and model."""

    def __init__(self, idx, mnt, model, seed):
        self.idx = idx
        self.roots = (mnt, model)
        self.rng = random.Random(seed * 1000 + idx)
        self.files = []     # relative paths of own files (hard links too)
        self.dirs = []      # relative paths of own (empty) subdirectories
        self.seq = 0
        self.nops = {}
        self.error = None

    def name(self, kind):
        self.seq += 1
        return "w%d-%s%d" % (self.idx, kind, self.seq)

    def shared(self):
        return "d%d" % self.rng.randrange(NDIRS)

    def both(self, fn):
        """Run fn(root) on the mount, then on the model: same outcome."""
        res = []
        for root in self.roots:
            try:
                fn(root)
                res.append(None)
            except OSError as e:
                res.append(e.errno)
        if res[0] != res[1]:
            raise TFail("writer %d: mount %s, model %s" % (
                self.idx, errno.errorcode.get(res[0], res[0]) if res[0] else "ok",
                errno.errorcode.get(res[1], res[1]) if res[1] else "ok"))
        return res[0]

    def check_stat(self, p):
        """stat of an own file (no other thread touches it): as the model's."""
        a = os.lstat(os.path.join(self.roots[0], p))
        b = os.lstat(os.path.join(self.roots[1], p))
        if (a.st_size, a.st_nlink, a.st_mode) != (b.st_size, b.st_nlink, b.st_mode):
            raise TFail("writer %d: stat %s: size %d nlink %d mode %o, model %d %d %o" % (
                self.idx, p, a.st_size, a.st_nlink, a.st_mode, b.st_size, b.st_nlink,
                b.st_mode))

    def op_create(self):
        p = os.path.join(self.shared(), self.name("f"))
        data = self.rng.randbytes(self.rng.choice((0, 100, 4096, 10000, 70000)))

        def fn(root):
            fd = os.open(os.path.join(root, p), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        if self.both(fn) is None:
            self.files.append(p)

    def op_write(self):
        if not self.files:
            return
        p = self.rng.choice(self.files)
        off = self.rng.randrange(0, 100000)
        data = self.rng.randbytes(self.rng.randrange(1, 20000))
        sync = self.rng.random() < 0.1

        def fn(root):
            fd = os.open(os.path.join(root, p), os.O_WRONLY)
            try:
                os.pwrite(fd, data, off)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        self.both(fn)
        self.check_stat(p)

    def op_truncate(self):
        if self.files:
            p, n = self.rng.choice(self.files), self.rng.randrange(0, 90000)
            self.both(lambda root: os.truncate(os.path.join(root, p), n))
            self.check_stat(p)

    def op_rename(self):
        if not self.files:
            return
        i = self.rng.randrange(len(self.files))
        src = self.files[i]
        if self.rng.random() < 0.3 and len(self.files) > 1:
            dst = self.rng.choice(self.files)   # over an own name
        else:
            dst = os.path.join(self.shared(), self.name("r"))
        if dst == src:
            return
        if self.both(lambda root: os.rename(os.path.join(root, src),
                                            os.path.join(root, dst))) is None:
            self.files.pop(i)
            if dst in self.files:
                # the old dst name now names src's inode: if dst was another
                # link of src's inode, rename(2) did nothing (both stay)
                if self.same_inode(src, dst):
                    self.files.append(src)
            else:
                self.files.append(dst)

    def same_inode(self, a, b):
        try:
            sa = os.lstat(os.path.join(self.roots[1], a))
            sb = os.lstat(os.path.join(self.roots[1], b))
        except FileNotFoundError:
            return False
        return sa.st_ino == sb.st_ino

    def op_link(self):
        if self.files:
            src = self.rng.choice(self.files)
            dst = os.path.join(self.shared(), self.name("l"))
            if self.both(lambda root: os.link(os.path.join(root, src),
                                              os.path.join(root, dst))) is None:
                self.files.append(dst)
                self.check_stat(dst)

    def op_unlink(self):
        if self.files:
            p = self.files.pop(self.rng.randrange(len(self.files)))
            self.both(lambda root: os.unlink(os.path.join(root, p)))

    def op_mkdir(self):
        p = os.path.join(self.shared(), self.name("s"))
        if self.both(lambda root: os.mkdir(os.path.join(root, p))) is None:
            self.dirs.append(p)

    def op_mvdir(self):
        if self.dirs:
            i = self.rng.randrange(len(self.dirs))
            src, dst = self.dirs[i], os.path.join(self.shared(), self.name("m"))
            if self.both(lambda root: os.rename(os.path.join(root, src),
                                                os.path.join(root, dst))) is None:
                self.dirs[i] = dst

    def op_rmdir(self):
        if self.dirs:
            p = self.dirs.pop(self.rng.randrange(len(self.dirs)))
            self.both(lambda root: os.rmdir(os.path.join(root, p)))

    OPS = [("create", 20), ("write", 20), ("truncate", 5), ("rename", 15),
           ("link", 8), ("unlink", 14), ("mkdir", 5), ("mvdir", 5), ("rmdir", 4)]

    def run(self, deadline):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        try:
            while time.monotonic() < deadline:
                op = self.rng.choices(names, weights)[0]
                getattr(self, "op_" + op)()
                self.nops[op] = self.nops.get(op, 0) + 1
        except Exception as e:      # reported by the main thread
            self.error = e


class Reader:
    def __init__(self, mnt):
        self.mnt = mnt
        self.lists = self.stats = 0
        self.error = None

    def run(self, deadline, rng):
        try:
            while time.monotonic() < deadline:
                d = os.path.join(self.mnt, "d%d" % rng.randrange(NDIRS))
                names = os.listdir(d)
                self.lists += 1
                if len(names) != len(set(names)):
                    dup = sorted(n for n in set(names) if names.count(n) > 1)
                    raise TFail("%s listed %s twice" % (d, dup[:3]))
                for n in rng.sample(names, min(len(names), 20)):
                    try:
                        os.lstat(os.path.join(d, n))
                        self.stats += 1
                    except FileNotFoundError:
                        pass    # renamed or unlinked since the listing
        except Exception as e:
            self.error = e


def check_links(mnt, model):
    """Link counts of every file and directory equal the model's."""
    bad = []
    for dp, dns, fns in os.walk(model):
        rel = os.path.relpath(dp, model)
        for n in dns + fns:
            a = os.lstat(os.path.join(dp, n)).st_nlink
            b = os.lstat(os.path.join(mnt, rel, n)).st_nlink
            if a != b:
                bad.append("%s: nlink %d, model %d" % (os.path.join(rel, n), b, a))
    t_check(not bad, "link counts differ: %s" % bad[:5])


def body(env):
    seed = int(os.environ.get("WBCFS_SEED") or random.SystemRandom().randrange(1 << 32))
    seconds = float(os.environ.get("WBCFS_STRESS_SECONDS", "15"))
    t_log("seed %d (reproduce with WBCFS_SEED=%d), %.0f s" % (seed, seed, seconds))
    model = env.shm_dir("model")
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, ["cache_size=64M"])
    for root in (m.mnt, model):
        for i in range(NDIRS):
            os.mkdir(os.path.join(root, "d%d" % i))
    t_step("%d writers and %d readers on %d shared directories" % (NWRITERS, NREADERS, NDIRS))
    deadline = time.monotonic() + seconds
    writers = [Writer(i, m.mnt, model, seed) for i in range(NWRITERS)]
    readers = [Reader(m.mnt) for _ in range(NREADERS)]
    threads = [threading.Thread(target=w.run, args=(deadline,)) for w in writers]
    threads += [threading.Thread(target=r.run, args=(deadline, random.Random(seed + i)))
                for i, r in enumerate(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x in writers + readers:
        if x.error:
            raise TFail("%s (seed %d)" % (x.error, seed))
    total = {}
    for w in writers:
        for k, v in w.nops.items():
            total[k] = total.get(k, 0) + v
    t_log("ops: %s; readers listed %d times, %d stats" % (
        ", ".join("%s=%d" % kv for kv in sorted(total.items())),
        sum(r.lists for r in readers), sum(r.stats for r in readers)))
    t_check(sum(total.values()) > NWRITERS * 20, "too few operations ran: %s" % total)
    # the paths that run beside fs_lock (issue 13) met the writers: lookups
    # from the directories' name caches, listings from cached blocks
    with open(os.path.join(m.mnt, ".wbcfs", "vmstat")) as f:
        vm = dict((k, int(v)) for k, v in (line.split() for line in f))
    t_log("served without fs_lock: %d lookups, %d directory blocks, %d stats" % (
        vm["nr_lookup_unlocked"], vm["nr_readdir_unlocked"], vm["nr_stat_unlocked"]))
    t_check(vm["nr_lookup_unlocked"] > 0 and vm["nr_readdir_unlocked"] > 0,
            "no lookup or listing served without fs_lock")
    # writeback found its blocks under fs_lock shared (claims), beside
    # the writers' namespace changes under it exclusive
    t_log("claimed under fs_lock shared: %d blocks (%d claims began beside another), "
          "%d inodes" % (vm["nr_blocks_claimed"], vm["nr_claim_overlaps"],
                         vm["nr_inodes_claimed"]))
    t_check(vm["nr_blocks_claimed"] > 0, "no block claimed under fs_lock shared")
    t_check(vm["nr_inodes_claimed"] > 0, "no inode claimed under fs_lock shared")
    t_check_bitmaps_tracked(m.mnt)
    t_step("the tree equals the model: names, types, sizes, contents, link counts")
    man_t = t_manifest(m.mnt, exclude=("lost+found",))
    man_m = t_manifest(model)
    t_compare(man_m, man_t, "model", "mount", keys=("type", "size", "sha256"))
    check_links(m.mnt, model)
    t_step("unmount: e2fsck -fn clean, the kernel's ext4 sees the model's tree")
    env.umount(m)
    env.verify_after_umount(dev, man_t, exclude=("lost+found",))


if __name__ == "__main__":
    t_main("stress", body, deadline_s=240)
