#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Corrupt filesystems, as the kernel's ext4 meets them.

  bitmap         group 0's block bitmap zeroed (no metadata_csum): the
                 mount goes ahead, one line on stderr names the group, and
                 /.wbcfs/vmstat counts it; new writes are allocated
                 elsewhere, never over the files the group holds; those
                 files read back intact; after unmount the superblock says
                 "with errors", the zeroed bitmap was not written back
                 (e2fsck -fn still sees it), and once e2fsck -fy repaired
                 it, every file, old and new, is intact.
  inode bitmap   group 0's inode bitmap zeroed: as the kernel finds a
                 reserved inode cleared, the group gives no new inodes (one
                 line on stderr), so no live file's inode is reused; marked
                 with errors; all files intact after e2fsck -fy.
  root inode     not a directory, or its inode table block zeroed: the
                 mount is refused (wbcfs: with one line, the device unchanged).
  descriptors    group 0's inode table outside the filesystem: the mount is
                 refused (wbcfs: one line, the device unchanged); group 0's
                 checksum wrong: read-write refused, -o ro mounts (as the
                 kernel's ext4_check_descriptors).
  journal inode  its extent zeroed: a read-write mount is refused (wbcfs:
                 with one line, the device unchanged; -o ro still mounts).

  shared blocks  two files share their blocks (debugfs); one is unlinked,
                 new files are written, then one syncfs: the survivor keeps
                 its data, as with the kernel's ext4, which reuses freed
                 blocks only after the transaction freeing them commits
                 (wbcfs: after the next sync).
  freed space    what an unlink freed serves fallocate and writes at once.
  last block     a file (made with debugfs) owns the filesystem's last
                 block: unlinked, or truncated to 0, e2fsck -fn stays clean.
  full           (wbcfs only) a full filesystem whose last free blocks go to
                 extent blocks: files using the filesystem's last block are
                 deleted (libext2fs before 1.47.4 cannot free it), and
                 writeback meets ENOSPC midway through mapping a run of new
                 blocks; e2fsck -fn stays clean.
  forgotten      (wbcfs only) a file whose writes fail when the kernel
                 forgets it keeps its data; once the fault is cleared it is
                 written and nothing is reported lost.
  faults         (wbcfs only) 1% of device writes fail (-o fault_inject,
                 trusted.wbcfs.fault_rate) on a nearly full 256 MiB
                 filesystem under three random workers (sparse writes,
                 punched holes, truncates, creates, unlinks, renames,
                 fsyncs), for several seeds; then the faults stop, a
                 syncfs writes everything, the unmount exits 0 and
                 e2fsck -fn is clean.

WBCFS_TEST_TARGET=kernel runs the same cases against the kernel's ext4
(but the wbcfs-only cases). WBCFS_CORRUPT_SEEDS (default 1,2,3) and
WBCFS_CORRUPT_SECONDS (per seed, default 6) set the faults case.

    WBCFS_BIN=build/wbcfs test/integration/test_corrupt.py
"""

import ctypes
import errno
import hashlib
import os
import random
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_pattern, MIB, TFail, t_check, t_eq, t_fail, t_is_kernel, t_log, t_main,  # noqa: E402
                    t_run, t_sha256_file, t_step)

BS = 4096


def debugfs(dev, *cmds):
    for c in cmds:
        p = t_run(["debugfs", "-w", "-R", c, dev], quiet=True)
        t_check("error" not in p.stdout.lower() or "bad" in c,
                "debugfs %r: %s" % (c, p.stdout))


def put_files(env, dev, files):
    """Write files into the unmounted filesystem with debugfs."""
    for name, content in files.items():
        src = os.path.join(env.tmp, "src-" + name)
        with open(src, "wb") as f:
            f.write(content)
        debugfs(dev, "write %s %s" % (src, name))
        os.unlink(src)


def bmap(dev, name, lblk):
    p = t_run(["debugfs", "-R", "bmap %s %d" % (name, lblk), dev], quiet=True)
    return int(p.stdout.split()[-1])


def group_desc(dev):
    """{group: {'bb': block bitmap, 'it': inode table, 'first': first block}}"""
    p = t_run(["dumpe2fs", dev], quiet=True)
    out = {}
    g = None
    for line in p.stdout.splitlines():
        m = re.match(r"Group (\d+): \(Blocks (\d+)-(\d+)", line)
        if m:
            g = int(m.group(1))
            out[g] = {"first": int(m.group(2)), "last": int(m.group(3))}
            continue
        m = re.match(r"\s+Block bitmap at (\d+)", line)
        if m and g is not None:
            out[g]["bb"] = int(m.group(1))
        m = re.match(r"\s+Inode table at (\d+)", line)
        if m and g is not None:
            out[g]["it"] = int(m.group(1))
    return out


def zero_block(dev, blk):
    fd = os.open(dev, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(BS), blk * BS)
        os.fsync(fd)
    finally:
        os.close(fd)
    t_run(["blockdev", "--flushbufs", dev], check=False)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def refused(env, dev, want, opts=()):
    """The target refuses to mount dev (wbcfs: one line saying `want`);
    the device is not modified."""
    before = t_sha256_file(dev)
    rc, out = env.mount(dev, list(opts) + ["cache_size=64M"], expect_fail=True)
    t_check(rc != 0, "mount of %s refused" % dev)
    if not t_is_kernel():
        lines = [ln for ln in out.splitlines() if ln.strip()]
        t_eq(len(lines), 1, "lines of error (%r)" % out)
        t_check(lines[0].startswith("wbcfs: ") and want in lines[0],
                "error %r does not say %r" % (lines[0], want))
        t_log("refused: %s" % lines[0])
        # (the kernel records the error in the superblock as it refuses)
        t_check(t_sha256_file(dev) == before, "the refused mount modified the device")


def bitmap_case(env):
    t_step("group 0's block bitmap zeroed: nothing is allocated over its files")
    dev = env.new_fs(128 * MIB, ["-O", "^metadata_csum,^uninit_bg", "-g", "8192"],
                     name="bitmap.img")
    old = {"f1": t_pattern(b"f1", 3 * MIB + 123), "f2": t_pattern(b"f2", 1 * MIB)}
    put_files(env, dev, old)
    gd = group_desc(dev)
    t_check(gd[0]["first"] <= bmap(dev, "f1", 0) <= gd[0]["last"], "f1 lies in group 0")
    zero_block(dev, gd[0]["bb"])
    m = env.mount(dev, ["cache_size=64M"])
    if not t_is_kernel():
        lines = [ln for ln in m.daemon_log().splitlines() if "corrupt" in ln]
        t_eq(len(lines), 1, "lines about corruption in the log")
        t_check("group 0" in lines[0], "the log names group 0: %r" % lines[0])
        vm = read_file(os.path.join(m.mnt, ".wbcfs", "vmstat")).decode()
        t_check("nr_corrupt_groups 1\n" in vm, "vmstat counts the group")
    new = {}
    for i in range(4):
        name = "n%d" % i
        new[name] = t_pattern(name.encode(), 6 * MIB + i)
        with open(os.path.join(m.mnt, name), "wb") as f:
            f.write(new[name])
            f.flush()
            os.fsync(f.fileno())
    for name, content in old.items():
        t_check(read_file(os.path.join(m.mnt, name)) == content, "%s intact" % name)
    env.umount(m)
    state = env.sb_state(dev)
    t_check("error" in state, "superblock state %r says errors" % state)
    t_log("superblock state: %s" % state)
    p = t_run(["e2fsck", "-fn", dev], check=False, quiet=True)
    t_check(p.returncode != 0, "e2fsck -fn finds the damage still there")
    t_check("Block bitmap differences" in p.stdout, "e2fsck -fn: bitmap differences")
    t_step("after e2fsck -fy, old and new files are intact")
    p = t_run(["e2fsck", "-fy", dev], check=False, quiet=True)
    t_check(p.returncode in (0, 1), "e2fsck -fy exit %d:\n%s" % (p.returncode, p.stdout))
    env.fsck(dev)
    k = env.kernel_ro(dev)
    try:
        for name, content in list(old.items()) + list(new.items()):
            t_check(read_file(os.path.join(k.mnt, name)) == content,
                    "%s intact after repair" % name)
    finally:
        env.umount(k)
    env.detach(dev)


def inode_bitmap_case(env):
    t_step("group 0's inode bitmap zeroed: no new inode is one a live file has")
    dev = env.new_fs(128 * MIB, ["-O", "^metadata_csum,^uninit_bg", "-g", "8192"],
                     name="ibitmap.img")
    old = t_pattern(b"old", 5000)
    put_files(env, dev, {"old": old})
    out = t_run(["dumpe2fs", dev], quiet=True).stdout
    ib = int(re.search(r"Group 0:.*?Inode bitmap at (\d+)", out, re.S).group(1))
    ipg = int(re.search(r"Inodes per group:\s+(\d+)", out).group(1))
    zero_block(dev, ib)
    m = env.mount(dev, ["cache_size=64M"])
    if not t_is_kernel():
        lines = [ln for ln in m.daemon_log().splitlines() if "corrupt" in ln]
        t_eq(len(lines), 1, "lines about corruption in the log")
        t_check("group 0: inode bitmap" in lines[0], "the log names it: %r" % lines[0])
    new = {}
    for i in range(3):
        name = "n%d" % i
        new[name] = t_pattern(name.encode(), 3000 + i)
        with open(os.path.join(m.mnt, name), "wb") as f:
            f.write(new[name])
        t_check(os.stat(os.path.join(m.mnt, name)).st_ino > ipg,
                "%s's inode is outside group 0" % name)
    t_check(read_file(os.path.join(m.mnt, "old")) == old, "old intact")
    env.umount(m)
    state = env.sb_state(dev)
    t_check("error" in state, "superblock state %r says errors" % state)
    p = t_run(["e2fsck", "-fy", dev], check=False, quiet=True)
    t_check(p.returncode in (0, 1), "e2fsck -fy exit %d:\n%s" % (p.returncode, p.stdout))
    env.fsck(dev)
    k = env.kernel_ro(dev)
    try:
        for name, content in [("old", old)] + list(new.items()):
            t_check(read_file(os.path.join(k.mnt, name)) == content,
                    "%s intact after repair" % name)
    finally:
        env.umount(k)
    env.detach(dev)


def root_cases(env):
    t_step("root inode not a directory: refused")
    dev = env.new_fs(64 * MIB, name="root.img")
    debugfs(dev, "sif <2> mode 0100644")
    refused(env, dev, "root inode")
    env.detach(dev)

    t_step("inode table block of the root zeroed: refused")
    dev = env.new_fs(64 * MIB, ["-O", "^metadata_csum"], name="itable.img")
    zero_block(dev, group_desc(dev)[0]["it"])
    refused(env, dev, "root inode")
    env.detach(dev)


def desc_case(env):
    t_step("group descriptor with its inode table outside the filesystem: refused")
    dev = env.new_fs(64 * MIB, ["-O", "^metadata_csum"], name="desc.img")
    debugfs(dev, "set_bg 0 inode_table 99999999", "set_bg 0 checksum calc")
    refused(env, dev, "corrupt group descriptors")
    env.detach(dev)

    t_step("group descriptor with a bad checksum: refused read-write, read-only mounts")
    dev = env.new_fs(64 * MIB, name="desccsum.img")
    debugfs(dev, "set_bg 0 checksum 0x1234")
    refused(env, dev, "bad checksum on group 0")
    before = t_sha256_file(dev)
    m = env.mount(dev, ["ro", "cache_size=64M"])
    os.listdir(m.mnt)
    env.umount(m)
    t_check(t_is_kernel() or t_sha256_file(dev) == before, "-o ro modified the device")
    env.detach(dev)


def journal_case(env):
    t_step("journal inode with a zeroed extent: refused read-write")
    dev = env.new_fs(64 * MIB, name="journal.img")
    debugfs(dev, "sif <8> block[3] 0", "sif <8> block[4] 0", "sif <8> block[5] 0")
    refused(env, dev, "journal inode")
    if not t_is_kernel():
        before = t_sha256_file(dev)
        m = env.mount(dev, ["ro", "cache_size=64M"])
        os.listdir(m.mnt)
        env.umount(m)
        t_check(t_sha256_file(dev) == before, "-o ro modified the device")
    env.detach(dev)


RATE = "trusted.wbcfs.fault_rate"
FAULT = "trusted.wbcfs.fault"
SOFT = (errno.EIO, errno.ENOSPC, errno.ENOENT)


def soft(fn, *args):
    """Run fn; EIO and ENOSPC are what a failing, full device gives
    (ENOENT: another worker removed the file)."""
    try:
        return fn(*args)
    except OSError as e:
        if e.errno not in SOFT:
            raise
        return None


libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
SPAN = 24 * MIB      # files are sparse within this


def _punch(p, off, n):
    fd = os.open(p, os.O_WRONLY)
    try:
        if libc.fallocate(fd, PUNCH, off, n) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)
    return True


def soft_errno(fn, *args):
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def random_ops(mnt, rnd, seconds):
    """Scattered small writes into sparse files (deep extent trees), punched
    holes, truncates, creates, unlinks, renames and fsyncs on a nearly
    full filesystem."""
    end = time.monotonic() + seconds
    nops = nerr = 0
    while time.monotonic() < end:
        d = os.path.join(mnt, "d%d" % rnd.randrange(4))
        names = sorted(os.listdir(d))
        op = rnd.random()
        nops += 1
        if not names or op < 0.05:
            p = os.path.join(d, "c%d" % rnd.randrange(10 ** 6))
            r = soft(lambda: _write(p, rnd, rnd.randrange(SPAN // 4096) * 4096,
                                    rnd.randrange(1, 64) * 1024, os.O_CREAT))
        else:
            p = os.path.join(d, rnd.choice(names))
            if op < 0.6:
                r = soft(lambda: _write(p, rnd, rnd.randrange(SPAN // 4096) * 4096
                                        + rnd.randrange(2) * 512,
                                        rnd.randrange(1, 48) * 1024, 0))
            elif op < 0.8:
                r = soft(_punch, p, rnd.randrange(SPAN // 4096) * 4096,
                         rnd.randrange(1, 64) * 4096)
            elif op < 0.84:
                r = soft(os.truncate, p, rnd.randrange(SPAN))
            elif op < 0.88:
                r = soft(os.unlink, p)
            elif op < 0.9:
                q = os.path.join(mnt, "d%d" % rnd.randrange(4), "r%d" % rnd.randrange(10 ** 6))
                r = soft(os.rename, p, q)
            else:
                r = soft(_fsync, p)
        if r is None:
            nerr += 1
    return nops, nerr


def _write(p, rnd, off, n, flags):
    fd = os.open(p, os.O_WRONLY | flags, 0o644)
    try:
        os.pwrite(fd, rnd.randbytes(n), off)
        if rnd.random() < 0.1:
            os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _fsync(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def faults_case(env, seeds):
    t_step("1%% of device writes fail on a nearly full filesystem: "
           "seeds %s, then recovery, exit 0, e2fsck -fn clean" % (seeds,))
    dev = env.new_fs(256 * MIB, name="faults.img")
    opts = ["fault_inject", "cache_size=32M"]
    m = env.mount(dev, opts)
    for i in range(4):
        d = os.path.join(m.mnt, "d%d" % i)
        os.mkdir(d)
        for j in range(12):
            with open(os.path.join(d, "f%d" % j), "wb") as f:
                f.write(random.Random(i * 100 + j).randbytes(4 * MIB + j * 4096))
    env.umount(m)
    for seed in seeds:
        rnd = random.Random(seed)
        m = env.mount(dev, opts)
        for bad in (b"1001", b"x", b""):
            t_eq(soft_errno(os.setxattr, m.mnt, RATE, bad), errno.EINVAL,
                 "%s = %r" % (RATE, bad))
        os.setxattr(m.mnt, RATE, b"10")
        t_eq(os.getxattr(m.mnt, RATE), b"10", RATE)
        secs = float(os.environ.get("WBCFS_CORRUPT_SECONDS", "6"))
        res = []
        ths = [threading.Thread(target=lambda r: res.append(random_ops(m.mnt, r, secs)),
                                args=(random.Random(rnd.random()),)) for _ in range(3)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        t_check(len(res) == len(ths), "every worker finished")
        nops, nerr = sum(r[0] for r in res), sum(r[1] for r in res)
        os.setxattr(m.mnt, RATE, b"0")
        # recovery: every page kept dirty is written now
        for _ in range(5):
            if subprocess.run(["sync", "-f", m.mnt]).returncode == 0:
                break
        t_log("seed %d: %d operations, %d gave EIO or ENOSPC" % (seed, nops, nerr))
        env.umount(m)
        p = t_run(["e2fsck", "-fn", dev], check=False, quiet=True)
        if p.returncode != 0:
            raise TFail("seed %d: e2fsck -fn exit %d\n%s" % (seed, p.returncode, p.stdout))
    env.detach(dev)


def full_fs_case(env, nf, delete):
    """Fill a 64 MiB filesystem, leave room for the data of nf files of 6
    one-block extents but not for their extent blocks, and write them: the
    extent blocks take the last free blocks (the filesystem's last block
    among them) and writeback meets ENOSPC midway through a mapping. With
    delete, every file is then unlinked; without, what cannot be written
    is lost at unmount. Either way e2fsck -fn must be clean."""
    dev = env.new_fs(64 * MIB, name="full%d.img" % nf)
    m = env.mount(dev, ["cache_size=128M"])
    big = os.path.join(m.mnt, "big")
    fd = os.open(big, os.O_CREAT | os.O_WRONLY, 0o644)
    n = 0
    try:
        while True:
            os.write(fd, b"y" * 4096)
            n += 1
    except OSError as e:
        t_check(e.errno == errno.ENOSPC, "filling: %s" % e)
    os.fsync(fd)
    os.ftruncate(fd, (n - 6 * nf) * 4096)
    os.fsync(fd)
    os.close(fd)
    names = []
    for i in range(nf):
        p = os.path.join(m.mnt, "s%d" % i)
        if soft(lambda: _sparse(p)) is None:
            break
        names.append(p)
    subprocess.run(["sync", "-f", m.mnt], stderr=subprocess.DEVNULL)
    t_log("%d files of 6 extents, %d blocks free" % (len(names), os.statvfs(m.mnt).f_bfree))
    if delete:
        for p in names + [big]:
            os.unlink(p)
        env.umount(m)
    else:
        t_run(["umount", m.mnt])
        rc = m.proc.wait(120)
        m.mounted = False
        env.mounts.remove(m)
        lost = [ln for ln in m.daemon_log().splitlines() if "lost" in ln]
        t_log("daemon exit %d, %d lines about lost pages" % (rc, len(lost)))
    env.fsck(dev)
    env.detach(dev)


def _sparse(p):
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for k in range(6):
            os.pwrite(fd, b"x" * 4096, k * 8192)
    finally:
        os.close(fd)
    return True


def owned_last_block_case(env, how):
    t_step("a file that owns the filesystem's last block: %s, e2fsck -fn is clean" % how)
    dev = env.new_fs(64 * MIB, name="owned-%s.img" % how)
    content = t_pattern(b"last", BS)
    put_files(env, dev, {"f": content})
    old = bmap(dev, "f", 0)
    last = int(re.search(r"Block count:\s+(\d+)",
                         t_run(["dumpe2fs", "-h", dev], quiet=True).stdout).group(1)) - 1
    fd = os.open(dev, os.O_RDWR)
    try:
        os.pwrite(fd, content, last * BS)
        os.fsync(fd)
    finally:
        os.close(fd)
    # the extent's start (ee_start_lo) is i_block[5]
    debugfs(dev, "sif f block[5] %d" % last, "setb %d" % last, "freeb %d" % old)
    t_eq(bmap(dev, "f", 0), last, "f's block")
    env.fsck(dev)
    m = env.mount(dev, ["cache_size=64M"])
    p = os.path.join(m.mnt, "f")
    t_check(read_file(p) == content, "f reads")
    if how == "unlink":
        os.unlink(p)
    else:
        os.truncate(p, 0)
    env.umount(m)
    env.fsck(dev)
    env.detach(dev)


def shared_case(env):
    t_step("two files share their blocks: the survivor of an unlink is not "
           "overwritten by writes before the next sync")
    dev = env.new_fs(64 * MIB, name="shared.img")
    a = t_pattern(b"a", 1 * MIB)
    put_files(env, dev, {"a": a, "b": t_pattern(b"b", 1 * MIB)})
    ablk, bblk = bmap(dev, "a", 0), bmap(dev, "b", 0)
    sb = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
    free = int(re.search(r"Free blocks:\s+(\d+)", sb).group(1)) + 256
    g0 = re.search(r"Group 0:.*?\n\s+.*?(\d+) free blocks",
                   t_run(["dumpe2fs", dev], quiet=True).stdout, re.S)
    # b's one extent (i_block[5]: its start) now points at a's blocks
    debugfs(dev, "sif b block[5] %d" % ablk, "freeb %d 256" % bblk,
            "set_bg 0 free_blocks_count %d" % (int(g0.group(1)) + 256),
            "set_bg 0 checksum calc", "ssv free_blocks_count %d" % free)
    p = t_run(["e2fsck", "-fn", dev], check=False, quiet=True)
    t_check("Multiply-claimed" in p.stdout, "a and b share blocks:\n%s" % p.stdout)
    m = env.mount(dev, ["cache_size=64M"])
    t_check(read_file(os.path.join(m.mnt, "b")) == a, "b reads a's data")
    os.unlink(os.path.join(m.mnt, "a"))
    for i in range(4):
        with open(os.path.join(m.mnt, "c%d" % i), "wb") as f:
            f.write(t_pattern(b"c%d" % i, 1 * MIB))
    # one syncfs: the new files' blocks are allocated before it commits
    # the unlink (an fsync of each would commit it on ext4 first)
    t_run(["sync", "-f", m.mnt])
    t_check(read_file(os.path.join(m.mnt, "b")) == a, "b intact while mounted")
    env.umount(m)
    k = env.kernel_ro(dev)
    try:
        t_check(read_file(os.path.join(k.mnt, "b")) == a, "b intact on disk")
    finally:
        env.umount(k)
    env.detach(dev)


def freed_space_case(env):
    t_step("space an unlink freed serves fallocate and writes before any sync")
    dev = env.new_fs(64 * MIB, name="freed.img")
    m = env.mount(dev, ["cache_size=64M"])
    for name in ("x", "y"):
        with open(os.path.join(m.mnt, name), "wb") as f:
            f.write(t_pattern(name.encode(), 20 * MIB))
    t_run(["sync", "-f", m.mnt])
    os.unlink(os.path.join(m.mnt, "x"))
    os.unlink(os.path.join(m.mnt, "y"))
    fd = os.open(os.path.join(m.mnt, "fa"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.posix_fallocate(fd, 0, 30 * MIB)
    finally:
        os.close(fd)
    w = t_pattern(b"w", 8 * MIB)
    with open(os.path.join(m.mnt, "w"), "wb") as f:
        f.write(w)
        f.flush()
        os.fsync(f.fileno())
    # the unlinked files are freed at their FORGET, which the kernel sends
    # as the unlink drops the inode but another daemon thread may serve
    # after the fallocate: ENOSPC then waits for it (8 of 30 rounds failed
    # before it did)
    os.unlink(os.path.join(m.mnt, "fa"))
    os.unlink(os.path.join(m.mnt, "w"))
    t_run(["sync", "-f", m.mnt])
    for i in range(10):
        for name in ("x", "y"):
            with open(os.path.join(m.mnt, name), "wb") as f:
                f.write(t_pattern(name.encode(), 20 * MIB))
        t_run(["sync", "-f", m.mnt], quiet=True)
        os.unlink(os.path.join(m.mnt, "x"))
        os.unlink(os.path.join(m.mnt, "y"))
        fa = os.path.join(m.mnt, "fa")
        fd = os.open(fa, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.posix_fallocate(fd, 0, 30 * MIB)
        except OSError as e:
            t_fail("round %d: fallocate of 30 MiB right after deleting 40 MiB: %s"
                   % (i, e))
        finally:
            os.close(fd)
        os.unlink(fa)
        t_run(["sync", "-f", m.mnt], quiet=True)
    env.umount(m)
    env.fsck(dev)
    env.detach(dev)


def forgotten_case(env):
    t_step("a file the kernel forgets while its writes fail keeps its data for a retry")
    dev = env.new_fs(64 * MIB, name="forget.img")
    m = env.mount(dev, ["fault_inject", "cache_size=64M"])
    p = os.path.join(m.mnt, "e")
    content = t_pattern(b"e", 1 * MIB + 17)
    with open(p, "wb") as f:
        os.setxattr(p, FAULT, b"write")
        f.write(content)
    t_eq(soft_errno(_fsync, p), errno.EIO, "fsync under the fault")
    # the kernel drops its unused inodes: FUSE forgets e
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")
    time.sleep(1)
    os.setxattr(p, FAULT, b"none")
    t_run(["sync", "-f", m.mnt])
    t_check("lost" not in m.daemon_log(), "nothing reported lost:\n%s" % m.daemon_log())
    env.umount(m)
    env.fsck(dev)
    k = env.kernel_ro(dev)
    try:
        t_check(read_file(os.path.join(k.mnt, "e")) == content, "e intact")
    finally:
        env.umount(k)
    env.detach(dev)


def body(env):
    shared_case(env)
    freed_space_case(env)
    owned_last_block_case(env, "unlink")
    owned_last_block_case(env, "truncate")
    if not t_is_kernel():
        t_step("a full filesystem: files whose extent blocks take the last "
               "free blocks are deleted; e2fsck -fn is clean")
        full_fs_case(env, 150, True)
        t_step("a full filesystem: ENOSPC midway through a mapping at writeback; "
               "e2fsck -fn is clean")
        full_fs_case(env, 230, False)
        forgotten_case(env)
        faults_case(env, [int(x) for x in os.environ.get("WBCFS_CORRUPT_SEEDS", "1,2,3").split(",")])
    bitmap_case(env)
    inode_bitmap_case(env)
    root_cases(env)
    desc_case(env)
    journal_case(env)


if __name__ == "__main__":
    t_main("corrupt", body, deadline_s=240)
