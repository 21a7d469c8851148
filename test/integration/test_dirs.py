#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Names and listings served without the filesystem lock, checked against
the kernel's ext4.

wbcfs answers LOOKUP from each directory's name cache and READDIR from
directory blocks in its metadata cache, neither under fs_lock (issue 13).
Both must give what the directory holds, for every shape a directory can
have: a small one, a linear one of many blocks (as wbcfs grows them), an
htree the kernel's ext4 built (index blocks between the leaves) and
directories whose blocks the kernel interleaved, so that their extent
trees have more than the four extents an inode holds itself (the listing
then reads those blocks through libext2fs), on a filesystem with
metadata_csum and on one without.  A directory whose block's checksum
fails is listed neither under the lock nor from the cache (the unlocked
path verifies it too).

For each: the kernel's ext4 makes the directories and records every name's
inode number; wbcfs lists each directory and looks up every name (the
inode numbers must be the kernel's) and names that do not exist (ENOENT);
then changes them (creates, renames across directories and over existing
names, hard links, unlinks), and after each round, with the kernel's
caches dropped so that every lookup and listing reaches the daemon,
listings and lookups equal the model of the names.  /.wbcfs/vmstat must
show lookups and directory blocks served without the lock.  After unmount
e2fsck -fn is clean and the kernel's ext4 lists the model's names.

    WBCFS_BIN=build/wbcfs test/integration/test_dirs.py
Env: WBCFS_SEED (default: random, printed).
"""

import errno
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, Mount, TSkip, t_check, t_eq, t_is_kernel, t_log,  # noqa: E402
                    t_main, t_run, t_step)

NFRAG = 5


def kernel_rw(env, dev):
    mnt = env.mkdir("krw%d" % len(env.mounts))
    t_run(["mount", "-t", "ext4", dev, mnt])
    m = Mount(mnt, dev, "kernel")
    env.mounts.append(m)
    return m


def drop_caches():
    """The kernel forgets dentries and inodes: lookups and listings that
    follow reach the daemon (and its in-memory inodes go at FORGET)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def make_dirs(root, rng):
    """The kernel's directories; returns the model {dir: {name: ino}}."""
    model = {}

    def create(d, name):
        p = os.path.join(root, d, name)
        with open(p, "w") as f:
            f.write(name[:16])
        model[d][name] = os.lstat(p).st_ino

    for d in ["small", "htree"] + ["frag%d" % i for i in range(NFRAG)]:
        os.mkdir(os.path.join(root, d))
        model[d] = {}
    for i in range(10):
        create("small", "s%d" % i)
    for i in range(2000):
        create("htree", "h%05d-%s" % (i, "x" * 40))
    # one block of each in turn: their blocks interleave on disk, so each
    # directory's extents are many single blocks
    for i in range(400):
        for k in range(NFRAG):
            create("frag%d" % k, "f%04d-%s" % (i, "y" * (60 + rng.randrange(40))))
    return model


def check(mnt, model, rng, what):
    """Listings and lookups of every directory equal the model."""
    t_step("%s: listings and lookups equal the model" % what)
    drop_caches()
    nlook = 0
    for d, names in sorted(model.items()):
        got = sorted(os.listdir(os.path.join(mnt, d)))
        if got != sorted(names):
            extra = sorted(set(got) - set(names))[:5]
            missing = sorted(set(names) - set(got))[:5]
            t_check(False, "%s: listing differs (%d names, model %d; extra %s, missing %s)"
                    % (d, len(got), len(names), extra, missing))
        for n, ino in names.items():
            t_eq(os.lstat(os.path.join(mnt, d, n)).st_ino, ino, "inode of %s/%s" % (d, n))
            nlook += 1
        for _ in range(20):
            n = "absent-%d" % rng.randrange(1 << 30)
            try:
                os.lstat(os.path.join(mnt, d, n))
                t_check(False, "%s/%s exists" % (d, n))
            except OSError as e:
                t_eq(e.errno, errno.ENOENT, "lookup of %s/%s" % (d, n))
    t_log("%d directories, %d names looked up" % (len(model), nlook))


def change(mnt, model, rng):
    """Creates, renames (across directories, over names), links, unlinks."""
    dirs = sorted(model)

    def pick(d):
        return rng.choice(sorted(model[d]))

    model.setdefault("grown", {})
    if not os.path.isdir(os.path.join(mnt, "grown")):
        os.mkdir(os.path.join(mnt, "grown"))
        dirs.append("grown")
    for _ in range(600):
        name = "g%d-%s" % (rng.randrange(1 << 30), "z" * rng.randrange(80))
        p = os.path.join(mnt, "grown", name)
        with open(p, "w") as f:
            f.write("g")
        model["grown"][name] = os.lstat(p).st_ino
    for _ in range(150):
        a, b = rng.choice(dirs), rng.choice(dirs)
        if not model[a]:
            continue
        n = pick(a)
        # over an existing name a third of the time
        to = pick(b) if model[b] and rng.random() < 0.33 else "r%d" % rng.randrange(1 << 30)
        if (a, n) == (b, to):
            continue
        os.rename(os.path.join(mnt, a, n), os.path.join(mnt, b, to))
        model[b][to] = model[a].pop(n)
    for _ in range(60):
        a, b = rng.choice(dirs), rng.choice(dirs)
        if not model[a]:
            continue
        n, to = pick(a), "l%d" % rng.randrange(1 << 30)
        os.link(os.path.join(mnt, a, n), os.path.join(mnt, b, to))
        model[b][to] = model[a][n]
    for _ in range(200):
        a = rng.choice(dirs)
        if model[a]:
            n = pick(a)
            os.unlink(os.path.join(mnt, a, n))
            del model[a][n]


def corrupt_case(env):
    """A directory /bad (made by the kernel's ext4, metadata_csum) whose
    only block has one byte of a name flipped, beside a sound /good. The
    first listing of /bad reads the block under fs_lock; the second finds
    it in the metadata cache, where the unlocked path must refuse it too.
    Neither lists it, its names do not resolve, /good is unaffected, and
    e2fsck -fn still finds the checksum error after unmount (the block
    was left as it was)."""
    t_step("a directory block whose checksum fails: refused locked and unlocked")
    dev = env.new_fs(64 * 1024 * 1024, name="corrupt.img")
    k = kernel_rw(env, dev)
    try:
        for d in ("bad", "good"):
            os.mkdir(os.path.join(k.mnt, d))
            for i in range(10):
                open(os.path.join(k.mnt, d, "b%d" % i), "w").close()
    finally:
        env.umount(k)
    p = t_run(["debugfs", "-R", "blocks /bad", dev], quiet=True)
    # debugfs's banner comes first (t_run merges stderr)
    blk = int([w for w in p.stdout.split() if w.isdigit()][0])
    with open(dev, "r+b") as f:
        # "." and ".." take 12 bytes each, b0 the next 12: byte 44 is the
        # first of b1's name, so the entries stay sound and the sum fails
        f.seek(blk * 4096 + 44)
        b = f.read(1)
        f.seek(blk * 4096 + 44)
        f.write(bytes([b[0] ^ 0x20]))
        os.fsync(f.fileno())
    t_log("/bad: block %d corrupted" % blk)
    m = env.mount(dev, ["cache_size=64M"])
    bad = os.path.join(m.mnt, "bad")
    for attempt in ("first", "cached"):
        drop_caches()
        try:
            names = os.listdir(bad)
            t_check(False, "%s listing of the corrupt directory gave %s" % (attempt, names))
        except OSError as e:
            t_check(e.errno in (errno.EUCLEAN, errno.EBADMSG, errno.EIO),
                    "%s listing of the corrupt directory: %s" % (attempt, e))
            t_log("%s listing: %s" % (attempt, e.strerror))
    try:
        os.lstat(os.path.join(bad, "b3"))
        t_check(False, "a name in the corrupt directory resolved")
    except OSError as e:
        t_check(e.errno in (errno.EUCLEAN, errno.EBADMSG, errno.EIO),
                "lookup in the corrupt directory: %s" % e)
    for attempt in ("first", "cached"):     # under fs_lock, then without
        drop_caches()
        t_eq(sorted(os.listdir(os.path.join(m.mnt, "good"))), ["b%d" % i for i in range(10)],
             "%s listing of the sound directory" % attempt)
    t_check(vmstat(m.mnt)["nr_readdir_unlocked"] > 0, "the sound directory listed unlocked")
    t_run(["umount", m.mnt])
    m.proc.wait(120)
    m.mounted = False
    env.mounts.remove(m)
    p = t_run(["e2fsck", "-fn", dev], check=False, quiet=True)
    t_check(p.returncode != 0 and "checksum" in p.stdout.lower(),
            "e2fsck -fn no longer sees the corrupt block: exit %d\n%s" % (p.returncode, p.stdout))
    env.detach(dev)


def one_fs(env, rng, label, mkfs_opts):
    t_step("%s: the kernel's ext4 makes the directories" % label)
    dev = env.new_fs(1 * GIB, mkfs_opts=mkfs_opts, name="%s.img" % label)
    k = kernel_rw(env, dev)
    try:
        model = make_dirs(k.mnt, rng)
    finally:
        env.umount(k)
    p = t_run(["debugfs", "-R", "stat /frag0", dev], quiet=True)
    t_log("frag0: %s" % " ".join(ln.strip() for ln in p.stdout.splitlines()
                                  if "EXTENTS" in ln or "Level" in ln)[:200])
    m = env.mount(dev, ["cache_size=64M"])
    vm0 = vmstat(m.mnt)
    check(m.mnt, model, rng, label + ", as the kernel made them")
    for r in range(2):
        change(m.mnt, model, rng)
        check(m.mnt, model, rng, "%s, after changes (round %d)" % (label, r + 1))
    vm1 = vmstat(m.mnt)
    looks = vm1["nr_lookup_unlocked"] - vm0["nr_lookup_unlocked"]
    blocks = vm1["nr_readdir_unlocked"] - vm0["nr_readdir_unlocked"]
    t_log("served without fs_lock: %d lookups, %d directory blocks" % (looks, blocks))
    nnames = sum(len(v) for v in model.values())
    t_check(looks >= nnames, "only %d lookups without fs_lock (%d names looked up 3 times)"
            % (looks, nnames))
    t_check(blocks > 0, "no directory block listed without fs_lock")
    env.umount(m)
    env.fsck(dev)
    t_step("%s: the kernel's ext4 lists the model's names" % label)
    k = env.kernel_ro(dev)
    try:
        for d, names in sorted(model.items()):
            t_eq(sorted(os.listdir(os.path.join(k.mnt, d))), sorted(names),
                 "kernel's listing of %s" % d)
            for n, ino in names.items():
                t_eq(os.lstat(os.path.join(k.mnt, d, n)).st_ino, ino,
                     "kernel: inode of %s/%s" % (d, n))
    finally:
        env.umount(k)
    env.detach(dev)


def vmstat(mnt):
    out = {}
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        for line in f:
            k, v = line.split()
            out[k] = int(v)
    return out


def body(env):
    if t_is_kernel():
        raise TSkip("wbcfs's own counters are checked")
    seed = int(os.environ.get("WBCFS_SEED") or random.SystemRandom().randrange(1 << 32))
    t_log("seed %d (reproduce with WBCFS_SEED=%d)" % (seed, seed))
    rng = random.Random(seed)
    one_fs(env, rng, "csum", None)
    one_fs(env, rng, "nocsum", ["-O", "^metadata_csum"])
    corrupt_case(env)


if __name__ == "__main__":
    t_main("dirs", body, deadline_s=300)
