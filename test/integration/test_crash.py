#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Crash points: every state a power cut could leave the device in is
consistent and keeps what fsync promised.

For each workload of crashwork.py (random namespace and data operations,
the same with metadata writes failing now and then (commits retried) and
then the durability writer with some files' data writes failing for a
while, the durability writer, unsynced files written back while small files are
fsync'ed (ordered mode under load), dbench, and checkpoints of a full 4 MiB journal
while the running transaction has freed logged blocks) on a small
filesystem made on an image filled with a pattern (stale data: no block
of a file may show it, checked on the durability and ordered workloads'
files, whose every byte is known: ordered mode): copy the device,
mount it with -o write_log, run the workload, unmount, then hand the copy,
the log and the workload's record to tools/wbcfs-crash. It first checks
that the log applied to the copy gives the device as the unmount left it
(the log misses no write), then rebuilds crash states (at completed
flushes, prefixes and random subsets of the writes in flight) and checks
each: wbcfs mounts it and e2fsck -fn is clean after, e2fsck's own replay
leaves it clean, the kernel's ext4 mounts it, fsync'ed files are intact
and renames-over show the old or the new content.

Until wbcfs writes a journal, a state in the middle of a run is not
consistent (wbcfs refuses an unclean filesystem), so only the state at the
last completed flush must pass; a few mid-run states are checked and their
failures printed as expected. The full check runs when the mount shows
/.wbcfs/journal, or with WBCFS_CRASH_FULL=1 (WBCFS_CRASH_FULL=0: never).

The workloads of crashwork.NEW_WORKLOADS (syncwrite, inodechange,
replace, mmap, fullreuse) run only when named in WBCFS_CRASH_WORKLOADS
(each is its own meson test, crash-NAME, 30 states): their records hold
wbcfs to what the kernel's ext4 leaves, no NULs where data was written.
With --kernel (WBCFS_TEST_TARGET=kernel) the workloads named in
WBCFS_CRASH_WORKLOADS (any of them; none named: skip) run on the
kernel's ext4 (mounted WBCFS_CRASH_KERNEL_OPTS, default nodioread_nolock)
on a loop device over logdev's file, which logs the writes and flushes
the loop device sends: the same harness then checks the kernel's crash
states, which is how the records' rules are validated.

    WBCFS_BIN=build/wbcfs test/integration/test_crash.py
    WBCFS_CRASH_WORKLOADS=inodechange,replace test/integration/test_crash.py
    WBCFS_CRASH_WORKLOADS=inodechange WBCFS_LOGDEV=build/test/integration/logdev \
        test/integration/test_crash.py --kernel
Env: WBCFS_SEED (default: random, printed), WBCFS_CRASH_STATES (total
states in full mode, default 90), WBCFS_CRASH_FULL_EVERY (e2fsck replay
and kernel checks on every K-th state, default 2; 4 for the checkpoint
workload, whose every state is checked).
"""

import json
import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crashwork  # noqa: E402
from wbtest import (MIB, Mount, TFail, TSkip, t_is_kernel, t_is_mounted,  # noqa: E402
                    t_log, t_main, t_run, t_step, t_wbcfs_bin)

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get("WBCFS_CRASH") or os.path.join(HERE, "..", "..", "tools",
                                                      "wbcfs-crash")
IMG_BYTES = 96 * MIB
# what every block of a new image holds until written: stale data that
# must never show in a file (the stream records of the durability and
# ordered workloads)
STALE = b"stale block, never file data "
# share of the states, per workload; None: every flush and prefix state
# (the checkpoint workload's window is two flushes wide: sampling could
# miss it)
WORKLOADS = (("random", 0.25), ("faults", 0.10), ("durability", 0.20), ("ordered", 0.25),
             ("dbench", 0.20), ("checkpoint", None))
# crashwork.NEW_WORKLOADS: synchronous writes, inode changes after
# unsynced writes, replacements without fsync, mmap stores, block reuse on
# a full filesystem; each is its own meson test (crash-NAME,
# WBCFS_CRASH_WORKLOADS=NAME) with this many states
NEW_STATES = 30
# the ordered workload's streamer must be written back while the syncer
# commits: background writeback from 1 MiB of dirty data on, expiry 1 s
ORDERED_OPTS = ["dirty_background_bytes=1048576", "dirty_expire_centisecs=100",
                "dirty_writeback_centisecs=50"]


def copy_dev(src, dst):
    with open(src, "rb") as a, open(dst, "wb") as b:
        shutil.copyfileobj(a, b, 4 * MIB)


def journal_mode(mnt):
    v = os.environ.get("WBCFS_CRASH_FULL")
    if v in ("0", "1"):
        return v == "1"
    return os.path.exists(os.path.join(mnt, ".wbcfs", "journal"))


def run_tool(args, timeout=600):
    cmd = [sys.executable, TOOL, "--wbcfs", t_wbcfs_bin()] + args
    t_log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    return p.returncode, p.stdout


LOGDEV = os.environ.get("WBCFS_LOGDEV") or os.path.join(HERE, "..", "..", "build", "test",
                                                        "integration", "logdev")


# --kernel: how the kernel's ext4 is mounted. Since Linux 5.6 ext4 mounts
# with dioread_nolock by default: writeback allocates unwritten extents
# and commits the new size with them, converted only once the data is
# written, in a later transaction, so a crash in between leaves a file
# its new size in NULs (the inodechange workload shows it). With
# nodioread_nolock new blocks are ordered data again: the data is written
# before the commit that records them, which is what wbcfs promises.
KERNEL_OPTS = os.environ.get("WBCFS_CRASH_KERNEL_OPTS", "nodioread_nolock")


class KernelDev:
    """--kernel: the kernel's ext4 writes through a loop device over
    logdev's file (an image served by FUSE that logs its writes and
    flushes as wbcfs's write_log does): the same record, the same states,
    with the kernel as the oracle of what a crash may leave."""

    def __init__(self, env, img, log):
        self.env = env
        self.lmnt = env.mkdir("logdev-" + os.path.basename(img))
        out = open(os.path.join(env.tmp, "logdev.log"), "w")
        cmd = [LOGDEV, img, log, self.lmnt, "-f", "-o", "allow_other"]
        t_log("$ " + " ".join(cmd) + " &")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        out.close()
        self.m = Mount(self.lmnt, img, "external", proc, out.name)
        env.mounts.append(self.m)
        for _ in range(500):
            if t_is_mounted(self.lmnt) or proc.poll() is not None:
                break
            time.sleep(0.02)
        if not t_is_mounted(self.lmnt):
            raise TFail("logdev did not mount:\n" + self.m.daemon_log())
        # buffered: the file is direct_io, each write reaches logdev
        p = t_run(["losetup", "--find", "--show", os.path.join(self.lmnt, "dev")])
        self.dev = p.stdout.strip().splitlines()[-1]
        env.loops.append(self.dev)

    def close(self):
        self.env.detach(self.dev)
        t_run(["umount", self.lmnt])
        self.m.proc.wait(60)
        self.env.mounts.remove(self.m)


def run_workload(env, name, seed, size=1):
    """Run one workload on a fresh filesystem with a write log. Returns
    the paths (base, log, record, after) and whether the mount has a
    journal, or None when the workload cannot run here. @size scales it."""
    # checkpoint: a 4 MiB journal (mkfs -J size=4), so that it fills
    # checkpoint and faults: a 4 MiB journal (mkfs -J size=4), so that it
    # fills (faults: checkpoints meet failing writes too)
    mkfs = ["-J", "size=4"] if name in ("checkpoint", "faults") else None
    # fullreuse fills the filesystem: a small one, quick to fill and read
    dev = env.new_fs(32 * MIB if name == "fullreuse" else IMG_BYTES, mkfs_opts=mkfs,
                     name=name + ".img", fill=STALE)
    base = os.path.join(env.tmp, name + "-base.img")
    after = os.path.join(env.tmp, name + "-after.img")
    log = os.path.join(env.tmp, name + ".wlog")
    record = os.path.join(env.tmp, name + ".rec")
    copy_dev(dev, base)
    kdev = None
    if t_is_kernel():
        env.detach(dev)
        kdev = KernelDev(env, os.path.join(env.tmp, name + ".img"), log)
        dev = kdev.dev
    if kdev:
        m = Mount(env.mkdir("kmnt-" + name), dev, "kernel")
        t_run(["mount", "-t", "ext4", "-o", KERNEL_OPTS, dev, m.mnt])
        env.mounts.append(m)
    else:
        m = env.mount(dev, opts=["write_log=" + log, "cache_size=64M"] +
                      (ORDERED_OPTS if name == "ordered" else []) +
                      (["fault_inject"] if name == "faults" else []) +
                      (["dirty_writeback_centisecs=0"] if name == "checkpoint" else []))
    full = kdev is not None or journal_mode(m.mnt)
    rec = crashwork.Record(log, record)
    ran = True
    try:
        if name in ("random", "faults"):
            crashwork.random_ops(m.mnt, rec, seed, 160 * size, faults=name == "faults")
            if name == "faults":
                crashwork.durability(m.mnt, rec, seed, 20 * size, faults=True)
        elif name == "durability":
            crashwork.durability(m.mnt, rec, seed, 30 * size)
        elif name == "ordered":
            crashwork.ordered(m.mnt, rec, seed, 16 * size)
        elif name == "checkpoint":
            crashwork.checkpoint(m.mnt, rec)
        elif name in crashwork.NEW_WORKLOADS:
            problems = crashwork.run_new(name, m.mnt, rec, seed, size)
            if problems:
                raise TFail("%s: %s" % (name, "; ".join(problems[:5])))
        else:
            rc = crashwork.dbench(m.mnt, 3 * size, 2)
            if rc is None:
                t_log("dbench not installed: not run")
                ran = False
            elif rc:
                raise TFail("dbench: exit %d" % rc)
    finally:
        rec.close()
    jpath = os.path.join(m.mnt, ".wbcfs", "journal")
    if os.path.exists(jpath):
        with open(jpath) as f:
            st = dict(line.split() for line in f if line.strip())
        t_log("%s: journal: %s" % (name, ", ".join(
            "%s %s" % (k, st.get(k)) for k in ("commits", "checkpoints", "failed",
                                               "unwritten_after_error", "wraps",
                                               "tail_lazy", "tail_forced",
                                               "checkpoint_blocks", "homed"))))
        # the checkpoint's crash states are among those checked: a log
        # that wrapped, a forced checkpoint's home writes, flush and new
        # start; dbench's tail advances ride on its commits' flushes
        need = {"checkpoint": ("wraps", "tail_forced"), "dbench": ("wraps", "tail_lazy")}
        for k in need.get(name, ()) if not kdev else ():
            if int(st.get(k, 0)) < 1:
                raise TFail("%s: the journal shows no %s" % (name, k))
    env.umount(m)
    if kdev:
        kdev.close()
        copy_dev(os.path.join(env.tmp, name + ".img"), after)
    else:
        copy_dev(dev, after)
        env.detach(dev)
    os.unlink(os.path.join(env.tmp, name + ".img"))
    if not ran:
        for f in (base, after, log, record):
            os.unlink(f)
        shutil.rmtree(record + ".d", ignore_errors=True)
        return None
    return base, log, record, after, full


def one(env, name, seed, nstates):
    """One workload and its crash states; False when states failed."""
    t_step("%s workload, seed %d" % (name, seed))
    r = run_workload(env, name, seed)
    if r is None:
        return True
    base, log, record, after, full = r
    t_log("write log %.1f MiB, record %d lines" % (os.path.getsize(log) / MIB,
                                                   sum(1 for _ in open(record))))
    keep = "/var/tmp/wbcfs-crash-%d-%s" % (os.getpid(), name)
    common = ["--base", base, "--log", log, "--oracle", record, "--seed", str(seed),
              "--keep-failed", keep]
    if full:
        # every state of the checkpoint workload is checked (nstates 0):
        # e2fsck's and the kernel's replays on every fourth of them
        every = os.environ.get("WBCFS_CRASH_FULL_EVERY", "2" if nstates else "4")
        states = ["--states", str(nstates)] if nstates else ["--states", "0", "--random", "0"]
        if name == "ordered":
            states.append("--all-carried")     # its point: few, and cheap
        rc, out = run_tool(common + ["--verify-final", after, "--full-every", every] + states)
        print(out, flush=True)
        ok = rc == 0
        if rc:
            t_log("%s: crash states failed (images kept in %s)" % (name, keep))
    else:
        rc, out = run_tool(common + ["--verify-final", after, "--final-only"])
        print(out, flush=True)
        if rc:
            raise TFail("%s: the state at the last flush failed (images kept in %s)"
                        % (name, keep))
        ok = True
        # no journal yet: mid-run states are expected to fail; say how many
        rc, out = run_tool(["--base", base, "--log", log, "--oracle", record,
                            "--seed", str(seed), "--states", "8", "--full-every", "4",
                            "--report-only", "--quiet", "--max-details", "1"])
        t_log("no journal yet: mid-run states (failures expected):\n" + out.strip())
    if name == "random":
        oracle_selftest(log, base, record, seed)
    elif name == "durability":
        stream_selftest(log, base, record, seed)
    for f in (base, after, log, record):
        os.unlink(f)
    shutil.rmtree(record + ".d", ignore_errors=True)
    return ok


def expect_caught(log, base, record, seed, line, needle, what):
    """The final state checked against the record plus @line (a bogus
    expectation) must fail, saying @needle."""
    bogus = record + ".bogus"
    with open(record) as f, open(bogus, "w") as g:
        g.write(f.read())
        g.write(line)
    rc, out = run_tool(["--base", base, "--log", log, "--oracle", bogus, "--seed",
                        str(seed), "--final-only", "--full-every", "0"])
    if rc != 1 or needle not in out:
        raise TFail("%s went unnoticed (exit %d):\n%s" % (what, rc, out))
    t_log("%s is caught" % what)
    os.unlink(bogus)


def oracle_selftest(log, base, record, seed):
    """The harness must notice a broken promise: the final state checked
    against a record whose last fsync'ed file has a wrong checksum fails."""
    final = {}
    with open(record) as f:
        for line in f:
            final[json.loads(line)["path"]] = line
    kept = [ln for ln in final.values() if '"fsync"' in ln]
    if kept:
        expect_caught(log, base, record, seed, kept[-1].replace('"sha": "', '"sha": "00'),
                      "content differs", "a wrong checksum in the record")


def stream_selftest(log, base, record, seed):
    """The harness must notice data that is not the file's: the final state
    checked against a record whose largest file's stream has another key
    fails with stale data."""
    streams = [json.loads(ln) for ln in open(record) if '"stream"' in ln]
    if not streams:
        raise TFail("the durability workload recorded no streams")
    big = max(streams, key=lambda r: r["max"])
    expect_caught(log, base, record, seed, json.dumps(dict(big, key=big["key"] + "x")) + "\n",
                  "stale data", "a file's content that is not its own")


def body(env):
    if t_is_kernel() and not os.path.exists(LOGDEV):
        raise TSkip("--kernel needs logdev (WBCFS_LOGDEV, built as %s)" % LOGDEV)
    if not os.path.exists(TOOL):
        raise TFail("tools/wbcfs-crash not found at %s" % TOOL)
    seed = int(os.environ.get("WBCFS_SEED") or random.randrange(1, 1 << 30))
    t_log("seed %d (WBCFS_SEED=%d reproduces)" % (seed, seed))
    total = int(os.environ.get("WBCFS_CRASH_STATES", "90"))
    failed = []
    only = os.environ.get("WBCFS_CRASH_WORKLOADS")
    if t_is_kernel() and not only:
        # the kernel validates the workloads' records, one at a time
        # (the crash-NAME tests under WBCFS_TEST_TARGET=kernel)
        raise TSkip("--kernel: name the workloads in WBCFS_CRASH_WORKLOADS (e.g. %s)"
                    % ",".join(crashwork.NEW_WORKLOADS))
    todo = [(n, max(1, int(total * sh)) if sh else 0) for n, sh in WORKLOADS]
    if only:
        known = dict(todo)
        known.update((n, int(os.environ.get("WBCFS_CRASH_STATES", NEW_STATES)))
                     for n in crashwork.NEW_WORKLOADS)
        bad = [n for n in only.split(",") if n not in known]
        if bad:
            raise TFail("WBCFS_CRASH_WORKLOADS: unknown %s (known: %s)"
                        % (", ".join(bad), ", ".join(known)))
        todo = [(n, known[n]) for n in only.split(",")]
    for i, (name, nstates) in enumerate(todo):
        if not one(env, name, seed + i, nstates):
            failed.append(name)
    if failed:
        raise TFail("crash states failed in: %s (seed %d)" % (", ".join(failed), seed))


if __name__ == "__main__":
    t_main("crash", body, deadline_s=560)
