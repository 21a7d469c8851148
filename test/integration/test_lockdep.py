#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The lock order wbcfs takes is the one doc/locking.md writes down: a
mixed workload (dd with fsync, directories, renames, hard links, xattrs,
truncates, fallocate, mmap stores with msync, syncfs, a remount that reads
everything back cold) on a mount with lockdep on; every edge
/.wbcfs/lockdep lists (outer class -> inner class, as taken) must follow
from the document's order (its ```lockorder block, transitively; a class
nests in itself only where a line "x -> x" says so). The daemon must not
have complained (an inversion aborts it; an unlock past the wrappers is
reported in its log) and must exit 0.

    WBCFS_BIN=build/wbcfs WBCFS_LOCKDEP=1 test/integration/test_lockdep.py
Env: WBCFS_LOCKDEP_EDGES=FILE also writes the edges seen there.
"""

import mmap
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TSkip, t_check, t_eq, t_fail, t_log, t_main,  # noqa: E402
                    t_manifest, t_pattern, t_run, t_step, t_syncfs, t_write_all)

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "doc",
                   "locking.md")


def doc_order(path=DOC):
    """The edges of doc/locking.md's ```lockorder block, and its classes."""
    edges, classes, inside = set(), set(), False
    with open(path) as f:
        for ln in f:
            s = ln.strip()
            if s.startswith("```"):
                if inside:
                    break
                inside = s == "```lockorder"
                continue
            if not inside or not s or s.startswith("#"):
                continue
            m = re.fullmatch(r"(\S+)\s*->\s*(\S+)(\s+#.*)?", s)
            if m:
                edges.add((m.group(1), m.group(2)))
                classes.update((m.group(1), m.group(2)))
            else:
                classes.add(s.split()[0])
    t_check(edges, "no ```lockorder block with 'outer -> inner' lines in %s" % path)
    return edges, classes


def allowed(edges):
    """Transitive closure of edges; x -> x only where written."""
    succ = {}
    for a, b in edges:
        if a != b:
            succ.setdefault(a, set()).add(b)
    reach = set()
    for a in list(succ):
        todo, seen = list(succ[a]), set()
        while todo:
            b = todo.pop()
            if b in seen:
                continue
            seen.add(b)
            todo += list(succ.get(b, ()))
        reach |= {(a, b) for b in seen if b != a}
    return reach | {(a, b) for a, b in edges if a == b}


def read_lockdep(m):
    with open(os.path.join(m.mnt, ".wbcfs", "lockdep")) as f:
        text = f.read()
    lines = text.splitlines()
    t_check(lines and lines[0].startswith("# lockdep on:"),
            "/.wbcfs/lockdep says lockdep is not on (WBCFS_LOCKDEP=1 did not reach "
            "the daemon?): %r" % (lines[:1],))
    seen = []
    for ln in lines[1:]:
        m2 = re.match(r"(\S+) -> (\S+)\t(.*)$", ln)
        t_check(m2, "line of /.wbcfs/lockdep: %r" % ln)
        seen.append((m2.group(1), m2.group(2), m2.group(3)))
    return text, seen


def workload(m):
    root = m.mnt
    t_step("dd of 64 MiB, conv=fsync, and 4 KiB blocks oflag=direct")
    t_run(["dd", "if=/dev/urandom", "of=" + os.path.join(root, "dd.bin"), "bs=1M",
           "count=64", "conv=fsync"])
    t_run(["dd", "if=/dev/zero", "of=" + os.path.join(root, "dd4k.bin"), "bs=4k",
           "count=2048", "oflag=direct"])
    t_step("directories, files, renames (over, across, exchange-free), links")
    for d in range(4):
        dp = os.path.join(root, "d%d" % d)
        os.makedirs(os.path.join(dp, "sub"), exist_ok=True)
        for i in range(40):
            with open(os.path.join(dp, "f%d" % i), "wb") as f:
                f.write(t_pattern("%d/%d" % (d, i), 3000 + 977 * i))
    for i in range(40):
        os.rename(os.path.join(root, "d0", "f%d" % i), os.path.join(root, "d1", "r%d" % i))
    for i in range(0, 40, 2):
        os.rename(os.path.join(root, "d2", "f%d" % i), os.path.join(root, "d2", "f%d" % (i + 1)))
    os.rename(os.path.join(root, "d3", "sub"), os.path.join(root, "d2", "moved"))
    os.rename(os.path.join(root, "d3"), os.path.join(root, "d0", "d3"))
    for i in range(10):
        os.link(os.path.join(root, "d1", "r%d" % i), os.path.join(root, "d0", "l%d" % i))
        os.symlink("r%d" % i, os.path.join(root, "d1", "s%d" % i))
    for i in range(10, 20):
        os.unlink(os.path.join(root, "d1", "r%d" % i))
    os.rmdir(os.path.join(root, "d2", "moved"))
    for d in ("d0", "d1", "d2"):
        os.listdir(os.path.join(root, d))
    t_step("xattrs: set, replace, list, remove; a big one outside the inode")
    p = os.path.join(root, "d1", "r0")
    for i in range(8):
        os.setxattr(p, "user.k%d" % i, b"v" * (10 + 20 * i))
    os.setxattr(p, "user.big", b"x" * 1500)
    os.setxattr(p, "user.k0", b"replaced")
    os.listxattr(p)
    os.getxattr(p, "user.big")
    os.removexattr(p, "user.k1")
    t_step("truncate down, up, fallocate, punch, fsync, fdatasync")
    fp = os.path.join(root, "tr.bin")
    fd = os.open(fp, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        t_write_all(fd, t_pattern("tr", 8 * MIB), 0)
        os.fsync(fd)
        os.ftruncate(fd, 3 * MIB + 123)
        os.ftruncate(fd, 12 * MIB)
        os.posix_fallocate(fd, 16 * MIB, 4 * MIB)
        t_write_all(fd, b"y" * 5000, 14 * MIB)
        os.fdatasync(fd)
        os.ftruncate(fd, 5 * MIB)
        os.fsync(fd)
    finally:
        os.close(fd)
    t_step("mmap stores and msync, a read through the mapping after truncate")
    mp = os.path.join(root, "mm.bin")
    fd = os.open(mp, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 4 * MIB)
        with mmap.mmap(fd, 4 * MIB) as mm:
            for off in range(0, 4 * MIB, 65536):
                mm[off:off + 16] = b"mmap-store-%05d" % (off // 65536)
            mm.flush()
            os.ftruncate(fd, 3 * MIB)
            t_eq(mm[0:16], b"mmap-store-00000", "first store through the mapping")
        os.fsync(fd)
    finally:
        os.close(fd)
    t_step("overwrite below EOF from a second file descriptor, chmod, utimes")
    with open(os.path.join(root, "dd.bin"), "r+b") as f:
        for off in range(0, 64 * MIB, 7 * MIB):
            f.seek(off)
            f.write(b"z" * 8192)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(os.path.join(root, "tr.bin"), 0o600)
    os.utime(os.path.join(root, "tr.bin"), (1, 2))
    t_syncfs(root)


def body(env):
    if os.environ.get("WBCFS_LOCKDEP") != "1":
        raise TSkip("WBCFS_LOCKDEP=1 is not set (test/integration/meson.build sets it)")
    order, classes = doc_order()
    ok = allowed(order)
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, ["lockstat"])
    workload(m)
    text1, seen1 = read_lockdep(m)
    man = t_manifest(m.mnt)
    log = m.daemon_log()
    env.umount(m)
    t_step("remount: read everything back cold, delete it all")
    m = env.mount(dev)
    t_run(["sh", "-c", "cat $(find %s -type f) > /dev/null" % m.mnt])
    t_run(["rm", "-rf"] + [os.path.join(m.mnt, n) for n in os.listdir(m.mnt)
                           if n != "lost+found"])
    t_syncfs(m.mnt)
    text2, seen2 = read_lockdep(m)
    log += m.daemon_log()
    env.umount(m)
    env.fsck(dev)
    t_log("%d and %d edges seen:\n%s%s" % (len(seen1), len(seen2), text1, text2))
    out = os.environ.get("WBCFS_LOCKDEP_EDGES")
    if out:
        with open(out, "w") as f:
            f.write(text1 + text2)
    t_check("wbcfs lockdep" not in log, "the daemon complained:\n%s" % log)
    t_check(man, "empty manifest")
    bad = []
    for a, b, where in seen1 + seen2:
        if a not in classes or b not in classes:
            bad.append("%s -> %s (%s): a class doc/locking.md does not name" % (a, b, where))
        elif (a, b) not in ok:
            bad.append("%s -> %s (%s): not in doc/locking.md's order" % (a, b, where))
    if bad:
        t_fail("lock order seen but not documented:\n  " + "\n  ".join(bad))
    t_check(seen1, "no lock nesting seen at all: is lockdep recording?")


if __name__ == "__main__":
    t_main("lockdep", body, deadline_s=280)
