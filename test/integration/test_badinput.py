#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Bad input: every refusal is one line naming the thing and the reason,
a non-zero exit, and not one byte written to the device.

Cases: a missing path; a character device, a directory and a FIFO; no ext4
magic (zeros, random bytes); a corrupt superblock (more blocks than the
device, a bad superblock checksum); block size and features wbcfs cannot
write (refused read-write, mounted with -o ro where that is safe); a
journal that needs recovery with a corrupt superblock; a device already mounted; a read-only device
without -o ro; an image held by another wbcfs; unknown options and bad
values. The device's sha256 is compared before and after each attempt.

    WBCFS_BIN=build/wbcfs test/integration/test_badinput.py
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, TSkip, t_check, t_is_kernel, t_log,  # noqa: E402
                    t_main, t_run, t_sha256_file, t_step, t_wbcfs_bin)

IMG = 256 * MIB


def refused(env, dev, backing, args, want, what):
    """wbcfs DEV MNT -f ARGS must fail with one line containing the device
    (or option) name and `want`; backing's bytes must not change."""
    before = t_sha256_file(backing) if backing else None
    mnt = env.mkdir("mnt-refuse")
    cmd = [t_wbcfs_bin(), dev, mnt, "-f"] + list(args)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        raise TFail("%s: wbcfs did not refuse within 60 s" % what)
    dt = time.monotonic() - t0
    if p.returncode == 0 or os.path.ismount(mnt):
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        raise TFail("%s: wbcfs accepted it (exit %d): %s" % (what, p.returncode, p.stdout))
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    t_check(len(lines) == 1, "%s: want one line of error, got %d:\n%s"
            % (what, len(lines), p.stdout))
    line = lines[0]
    t_check(line.startswith("wbcfs: "), "%s: error does not start 'wbcfs: ': %r"
            % (what, line))
    t_check(want.lower() in line.lower(), "%s: error %r does not say %r"
            % (what, line, want))
    if backing:
        t_check(t_sha256_file(backing) == before, "%s: the device was modified" % what)
    t_log("%-34s exit %d in %.2fs: %s" % (what, p.returncode, dt, line))
    return line


def image(env, name, mkfs=None, size=IMG):
    p = env.image(size, name)
    if mkfs is not None:
        t_run(["mkfs.ext4", "-q", "-F", "-b", "4096"] + mkfs + [p])
    return p


def mounts_ro(env, dev, what):
    """-o ro is accepted where read-only is safe."""
    m = env.mount(dev, ["ro", "cache_size=64M"])
    os.listdir(m.mnt)
    env.umount(m)
    t_log("%-34s mounts with -o ro" % what)


def body(env):
    if t_is_kernel():
        raise TSkip("wbcfs's own refusals; nothing to compare with the kernel")
    t_step("paths that are not a device")
    refused(env, "/nonexistent/wbcfs-dev", None, [], "No such file", "missing path")
    refused(env, "/dev/null", None, [], "not a block device", "character device")
    refused(env, env.mkdir("adir"), None, [], "not a block device", "directory")
    fifo = os.path.join(env.tmp, "fifo")
    os.mkfifo(fifo)
    refused(env, fifo, None, [], "not a block device", "FIFO")

    t_step("not ext4: bad magic")
    z = image(env, "zeros.img")
    refused(env, z, z, [], "bad magic", "all zeros")
    r = os.path.join(env.tmp, "random.img")
    with open(r, "wb") as f:
        for _ in range(16):
            f.write(os.urandom(MIB))
    refused(env, r, r, [], "bad magic", "random bytes")

    t_step("corrupt superblocks")
    big = image(env, "big.img", [], size=2 * IMG)
    os.truncate(big, IMG)
    refused(env, big, big, [], "exceed the device", "block count > device size")
    csum = image(env, "csum.img", [])
    with open(csum, "r+b") as f:        # s_checksum: last 4 bytes of the sb
        f.seek(1024 + 0x3FC)
        f.write(b"\xde\xad\xbe\xef")
    refused(env, csum, csum, [], "checksum", "bad superblock checksum")

    t_step("block sizes and features not written safely: refused rw, ro allowed")
    k1 = env.image(IMG, "k1.img")
    t_run(["mkfs.ext4", "-q", "-F", "-b", "1024", k1])
    refused(env, k1, k1, [], "block size 1024", "1 KiB blocks, rw")
    mounts_ro(env, k1, "1 KiB blocks, ro")
    for feat in ("inline_data", "bigalloc", "quota", "verity", "mmp",
                 "encrypt", "casefold"):
        p = image(env, feat + ".img", ["-O", feat])
        refused(env, p, p, [], "feature " + feat, feat + ", rw")
        if feat in ("quota", "verity", "mmp", "bigalloc"):
            before = t_sha256_file(p)
            mounts_ro(env, p, feat + ", ro")
            t_check(t_sha256_file(p) == before, "%s: -o ro mount modified the device" % feat)
        os.unlink(p)

    t_step("a journal that needs recovery, its superblock corrupt")
    j = image(env, "recover.img", [])
    t_run(["debugfs", "-w", "-R", "feature needs_recovery", j])
    p = t_run(["debugfs", "-R", "bmap <8> 0", j], quiet=True)
    with open(j, "r+b") as f:
        f.seek(int(p.stdout.split()[-1]) * 4096)
        f.write(bytes(4))                   # the journal superblock's magic
    refused(env, j, j, [], "journal superblock", "needs_recovery, bad journal")

    t_step("a device in use")
    ok = image(env, "ok.img", [])
    dev = env.loop(ok)
    kmnt = env.mkdir("kmnt")
    t_run(["mount", "-t", "ext4", "-o", "ro,noload", dev, kmnt])
    try:
        refused(env, dev, ok, [], "busy", "mounted by the kernel")
    finally:
        t_run(["umount", kmnt])
    m = env.mount(ok, ["cache_size=64M"])     # the image itself, plain fuse
    refused(env, ok, None, [], "in use", "image held by another wbcfs")
    env.umount(m)
    env.detach(dev)

    t_step("a read-only device without -o ro")
    rodev = t_run(["losetup", "-r", "--find", "--show", ok]).stdout.strip()
    env.loops.append(rodev)
    refused(env, rodev, ok, [], "read-only", "read-only device, rw")
    before = t_sha256_file(ok)
    mounts_ro(env, rodev, "read-only device, -o ro")
    t_check(t_sha256_file(ok) == before, "-o ro mount of a read-only device wrote to it")
    env.detach(rodev)

    t_step("unknown options and bad values")
    for opt, want in (("no_such_option", "no_such_option"),
                      ("dirty_ratio=101", "dirty_ratio"),
                      ("dirty_ratio=-1", "dirty_ratio"),
                      ("dirty_ratio=ten", "dirty_ratio"),
                      ("dirty_expire_centisecs=", "dirty_expire_centisecs"),
                      ("cache_size=12Q", "cache_size"),
                      ("cache_size=1k", "cache_size"),
                      ("cache_size=99999999999T", "cache_size"),
                      ("queue_depth=0", "queue_depth"),
                      ("io_engine=spdk", "io_engine"),
                      ("flushers=17", "flushers"),
                      ("prefault=lots", "prefault"),
                      ("zones=0", "zones"),
                      ("cache_size=512M,zones=64M:64M", "zones: sizes add up to"),
                      ("zones=1M:512k", "zones: '512k'"),
                      ("fair_zone_alloc=2", "fair_zone_alloc"),
                      ("zone_dirty=yes", "zone_dirty")):
        refused(env, ok, ok, ["-o", opt], want, "-o " + opt)


if __name__ == "__main__":
    t_main("badinput", body, deadline_s=600)
