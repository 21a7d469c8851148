#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Durability: what fsync promised survives kill -9; SIGTERM, umount and
fusermount -u write everything before the daemon exits.

Crash rounds: a writer process creates many files of varied sizes (some in
new directories, some appended to after their fsync), fsyncs or fdatasyncs
about a third of them and records each promise (name, size, sha256 of the
first `size` bytes) in a journal on tmpfs only after the call returned.
The daemon is killed with SIGKILL in mid-stream, the dead mount is taken
down, `e2fsck -fy` repairs the device, `e2fsck -fn` must then be clean, and
every promised file must be intact through the kernel's ext4. The next
round mounts the repaired filesystem, so earlier promises are re-checked.

Clean-exit rounds: unsynced files, then SIGTERM / fusermount -u / umount;
the daemon must exit 0, the superblock must be clean, e2fsck -fn clean and
every file intact through the kernel's ext4.

    WBCFS_BIN=build/wbcfs test/integration/test_durability.py [--kernel]
Env: WBCFS_SEED (default: random, printed), WBCFS_CRASH_ROUNDS (3).
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TFail, t_check, t_eq, t_is_kernel,  # noqa: E402
                    t_is_mounted, t_log, t_main, t_manifest, t_run, t_step)

SIZES = (0, 1, 100, 4095, 4096, 4097, 65536 + 13, 300000, MIB, 3 * MIB + 517,
         8 * MIB)


def content(seed, name, n):
    """Deterministic bytes of a file: a function of (seed, name) only, so an
    appended file's prefix is the same content cut short."""
    r = random.Random("%d/%s" % (seed, name))
    return r.randbytes(n)


def writer(mnt, journal, seed, nfiles):
    """Child process: create files, sync some, log each promise after it is
    kept. Exits quietly when the mount dies under it."""
    r = random.Random(seed)
    jf = open(journal, "a")

    def promise(rel, size, data):
        jf.write(json.dumps({"name": rel, "size": size,
                             "sha": hashlib.sha256(data[:size]).hexdigest()})
                 + "\n")
        jf.flush()
        os.fsync(jf.fileno())

    try:
        d = "r%d" % seed
        os.mkdir(os.path.join(mnt, d))
        for i in range(nfiles):
            if i % 7 == 0:
                d = "r%d/d%d" % (seed, i)
                os.mkdir(os.path.join(mnt, d))
            rel = "%s/f%d" % (d, i)
            size = r.choice(SIZES)
            mode = r.choice(("fsync", "fdatasync", "none", "none", "append"))
            data = content(seed, rel, size + (MIB + 33 if mode == "append" else 0))
            fd = os.open(os.path.join(mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
            off = 0
            while off < size:
                n = min(size - off, r.choice((1, 512, 4096, 65536, 262144 + 7)))
                os.write(fd, data[off:off + n])
                off += n
            if mode in ("fsync", "append"):
                os.fsync(fd)
                promise(rel, size, data)
            elif mode == "fdatasync":
                os.fdatasync(fd)
                promise(rel, size, data)
            if mode == "append":
                os.write(fd, data[size:])
            os.close(fd)
    except OSError:
        pass
    os._exit(0)


def check_promises(root, journal, what):
    """Every promise in the journal holds under root (the kernel's ext4)."""
    if not os.path.exists(journal):
        return 0
    n = 0
    with open(journal) as f:
        for line in f:
            if not line.endswith("\n"):
                break       # a torn last line: the promise was never logged
            p = json.loads(line)
            path = os.path.join(root, p["name"])
            try:
                with open(path, "rb") as g:
                    got = g.read(p["size"])
            except OSError as e:
                raise TFail("%s: fsync'ed file %s: %s" % (what, p["name"], e))
            t_check(len(got) == p["size"],
                    "%s: fsync'ed file %s has %d bytes, fsync'ed with %d"
                    % (what, p["name"], len(got), p["size"]))
            t_check(hashlib.sha256(got).hexdigest() == p["sha"],
                    "%s: fsync'ed file %s: content differs" % (what, p["name"]))
            n += 1
    return n


def kill_mount(env, m):
    """SIGKILL the daemon, then take down the dead mount."""
    env.kill(m)


def repair(env, dev):
    p = t_run(["e2fsck", "-fy", dev], check=False, timeout=600)
    t_log("e2fsck -fy: exit %d, %s" % (p.returncode,
                                        (p.stdout.strip().splitlines() or [""])[-1]))
    t_check(p.returncode in (0, 1, 2),
            "e2fsck -fy could not repair %s (exit %d):\n%s"
            % (dev, p.returncode, p.stdout[-3000:]))
    env.fsck(dev)


def crash_rounds(env, dev, seed, rounds, journal):
    for rnd in range(rounds):
        rseed = seed * 100 + rnd
        t_step("crash round %d (seed %d): write, fsync some, kill -9" % (rnd, rseed))
        m = env.mount(dev, ["cache_size=256M"])
        pid = os.fork()
        if pid == 0:
            try:
                writer(m.mnt, journal, rseed, 400)
            finally:
                os._exit(0)
        delay = random.Random(rseed).uniform(1.0, 4.0)
        time.sleep(delay)
        kill_mount(env, m)
        os.waitpid(pid, 0)
        repair(env, dev)
        k = env.kernel_ro(dev)
        try:
            n = check_promises(k.mnt, journal, "after kill at %.1fs" % delay)
            files = sum(len(fs) for _, _, fs in os.walk(k.mnt))
        finally:
            env.umount(k)
        t_log("round %d: %d fsync'ed files intact (%d files on disk)"
              % (rnd, n, files))
        t_check(n > 0 or t_is_kernel(), "no file was fsync'ed before the kill")


def fill_unsynced(root, tag, seed):
    want = {}
    os.makedirs(os.path.join(root, tag))
    for i, size in enumerate(SIZES * 3):
        rel = "%s/u%d" % (tag, i)
        data = content(seed, rel, size)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        want[rel] = hashlib.sha256(data).hexdigest()
    return want


def check_files(root, want, what):
    for rel, sha in want.items():
        with open(os.path.join(root, rel), "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        t_check(got == sha, "%s: %s differs" % (what, rel))


def clean_exit_rounds(env, dev, seed):
    for how in ("SIGTERM", "fusermount -u", "umount"):
        t_step("unsynced files, then %s: all written, daemon exits 0" % how)
        m = env.mount(dev, ["cache_size=256M", "dirty_expire_centisecs=100000",
                            "dirty_writeback_centisecs=0"])
        tag = "clean-" + how.split()[0]
        want = fill_unsynced(m.mnt, tag, seed)
        man = t_manifest(m.mnt)
        if t_is_kernel() or how == "umount":
            env.umount(m)
        else:
            if how == "SIGTERM":
                m.proc.send_signal(signal.SIGTERM)
            else:
                fm = shutil.which("fusermount3") or shutil.which("fusermount")
                t_check(fm is not None, "fusermount3 not installed")
                t_run([fm, "-u", m.mnt])
            env.wait_daemon(m)
            m.mounted = False
            env.mounts.remove(m)
            t_check(not t_is_mounted(m.mnt), "%s left %s mounted" % (how, m.mnt))
        t_eq(env.sb_state(dev), "clean", "superblock state after " + how)
        env.fsck(dev)
        k = env.kernel_ro(dev)
        try:
            check_files(k.mnt, want, "after " + how)
            got = t_manifest(k.mnt)
        finally:
            env.umount(k)
        t_check(set(got) == set(man), "after %s the kernel sees a different "
                "tree: %s" % (how, sorted(set(got) ^ set(man))[:10]))


def body(env):
    seed = int(os.environ.get("WBCFS_SEED") or random.randrange(1 << 30))
    rounds = int(os.environ.get("WBCFS_CRASH_ROUNDS", "3"))
    t_log("seed %d (WBCFS_SEED=%d reproduces)" % (seed, seed))
    dev = env.new_fs(3 * GIB)
    journal = os.path.join(env.shm_dir("journal"), "promises")
    crash_rounds(env, dev, seed, rounds, journal)
    clean_exit_rounds(env, dev, seed)
    t_step("all promises of all rounds still hold after the clean rounds")
    k = env.kernel_ro(dev)
    try:
        n = check_promises(k.mnt, journal, "at the end")
    finally:
        env.umount(k)
    t_log("%d promises checked" % n)


if __name__ == "__main__":
    if "--kernel" in sys.argv:
        os.environ["WBCFS_TEST_TARGET"] = "kernel"
    t_main("durability", body, deadline_s=900)
