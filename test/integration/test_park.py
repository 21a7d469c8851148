#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Parked replies: FSYNC, FSYNCDIR and synchronous WRITEs are answered by
the mount's syncers when durable, not by a server thread that waits.
Run over both transports (WBCFS_TRANSPORT=uring and dev).

0. leaders: one writer's fsyncs, one at a time, each meeting no other
   sync, are synced in their server thread (nr_sync_leaders counts them
   all) and none is parked.
1. group (park_all=1: every sync request parked): 8 writers x 12 fsyncs,
   O_DSYNC writes and directory fsyncs. Every call succeeds, each one was
   parked (/.wbcfs/vmstat nr_parked_total counts exactly the calls made),
   none is left parked, the groups are no more than the requests; after a
   SIGKILL of the daemon the replay shows every byte synced. The same
   writers on a default mount: every call is a leader or parked.
2. interrupts: a writer syncing 16 MiB at a time is sent SIGUSR1 every
   millisecond. Its fsyncs all succeed (an INTERRUPT does not cut a sync
   short, as ext4's fsync waits for its commit), and the INTERRUPTs of
   parked requests were found (nr_park_interrupts). A writer killed with
   SIGKILL in a parked fsync goes away once it is answered; the daemon
   serves on.
3. kill -9 with replies parked: writers appending and fsyncing in a loop
   record each fsync that returned; the daemon is killed meanwhile. The
   remount replays: every recorded byte is there; e2fsck is clean.
4. unmount with requests parked: SIGTERM to the daemon while writers sync.
   The daemon answers what it parked, exits 0, and the filesystem is clean.
"""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, GIB, t_check, t_eq, t_log, t_main,  # noqa: E402
                    t_pattern, t_step, t_is_mounted)
from wbtrace import vmstat  # noqa: E402

OPTS = ["commit=600", "dirty_expire_centisecs=60000", "cache_size=256M"]


def chunk(tag, i, n):
    return t_pattern(("%s-%d" % (tag, i)).encode(), n)


def part_leaders(env, dev):
    t_step("0. a lone writer's fsyncs are leaders, synced in their own thread")
    m = env.mount(dev, OPTS)
    v0 = vmstat(m.mnt)
    fd = os.open(os.path.join(m.mnt, "lone"), os.O_CREAT | os.O_WRONLY, 0o644)
    for i in range(20):
        os.write(fd, chunk("lone", i, 4096))
        os.fsync(fd)
    os.close(fd)
    v = vmstat(m.mnt)
    t_eq(v["nr_sync_leaders"] - v0["nr_sync_leaders"], 20, "fsyncs synced as leaders")
    t_eq(v["nr_parked_total"] - v0["nr_parked_total"], 0, "fsyncs parked")
    env.umount(m)


def sync_writers(mnt, writers, rounds, piece, errors):
    def writer(k):
        try:
            path = os.path.join(mnt, "g%d" % k)
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            for i in range(rounds):
                os.write(fd, chunk("g%d" % k, i, piece))
                os.fsync(fd)
            os.close(fd)
            fd = os.open(path + ".dsync", os.O_CREAT | os.O_WRONLY | os.O_DSYNC | os.O_TRUNC,
                         0o644)
            for i in range(rounds):
                os.write(fd, chunk("d%d" % k, i, 4096))
            os.close(fd)
            d = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(d)
            os.close(d)
        except OSError as e:
            errors.append("writer %d: %s" % (k, e))

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def part_group(env, dev):
    t_step("1. a group of fsyncs, O_DSYNC writes and directory fsyncs, every one parked")
    m = env.mount(dev, OPTS + ["park_all"])
    v0 = vmstat(m.mnt)
    errors = []
    writers, rounds, piece = 8, 12, 64 * 1024

    sync_writers(m.mnt, writers, rounds, piece, errors)
    t_eq(errors, [], "errors of the syncing writers")
    v = vmstat(m.mnt)
    calls = writers * (rounds + rounds + 1)
    t_eq(v["nr_parked_total"] - v0["nr_parked_total"], calls,
         "requests parked (fsyncs, O_DSYNC writes, directory fsyncs)")
    t_eq(v["nr_parked"], 0, "requests parked after every call returned")
    groups = v["nr_park_groups"] - v0["nr_park_groups"]
    t_check(0 < groups <= calls, "syncs of parked requests: %d for %d requests" % (groups, calls))
    t_log("%d requests in %d group syncs; %d synced with others" %
          (calls, groups, v["nr_park_grouped"] - v0["nr_park_grouped"]))
    env.kill(m)
    m = env.mount(dev, OPTS)
    for k in range(writers):
        with open(os.path.join(m.mnt, "g%d" % k), "rb") as f:
            want = b"".join(chunk("g%d" % k, i, piece) for i in range(rounds))
            t_check(f.read() == want, "g%d after the replay" % k)
        with open(os.path.join(m.mnt, "g%d.dsync" % k), "rb") as f:
            want = b"".join(chunk("d%d" % k, i, 4096) for i in range(rounds))
            t_check(f.read() == want, "g%d.dsync after the replay" % k)
    env.umount(m)
    env.fsck(dev)

    t_step("1b. the same writers on a default mount: every call a leader or parked")
    m = env.mount(dev, OPTS)
    v0 = vmstat(m.mnt)
    sync_writers(m.mnt, writers, rounds, piece, errors)
    t_eq(errors, [], "errors of the syncing writers")
    v = vmstat(m.mnt)
    leaders = v["nr_sync_leaders"] - v0["nr_sync_leaders"]
    parked = v["nr_parked_total"] - v0["nr_parked_total"]
    t_eq(leaders + parked, calls, "sync requests led or parked")
    t_log("default mount: %d leaders, %d parked" % (leaders, parked))
    env.umount(m)


SYNCER = r"""
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda s, f: None)
path, rounds, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
buf = bytes([0x5a]) * size
print("ready", flush=True)
for i in range(rounds):
    os.pwrite(fd, buf, i * size)
    os.fsync(fd)
    print("synced %d" % i, flush=True)
os.close(fd)
# no default action at the interpreter's exit while signals still come
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
"""


def part_interrupts(env, dev):
    t_step("2. INTERRUPTs of parked fsyncs: counted, the fsyncs still succeed")
    m = env.mount(dev, OPTS + ["park_all"])
    v0 = vmstat(m.mnt)
    rounds = 6
    p = subprocess.Popen([sys.executable, "-c", SYNCER, os.path.join(m.mnt, "i"),
                          str(rounds), str(16 * MIB)], stdout=subprocess.PIPE, text=True)
    t_eq(p.stdout.readline().strip(), "ready", "the syncing child started")
    while p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    out = p.stdout.read()
    t_eq(p.wait(), 0, "exit status of the signalled syncer")
    t_eq(out.split().count("synced"), rounds, "fsyncs that returned 0 under signals")
    v = vmstat(m.mnt)
    t_check(v["nr_park_interrupts"] > v0["nr_park_interrupts"],
            "INTERRUPTs of parked requests found (%d)" %
            (v["nr_park_interrupts"] - v0["nr_park_interrupts"]))

    t_step("2b. SIGKILL of a writer in a parked fsync")
    p = subprocess.Popen([sys.executable, "-c", SYNCER, os.path.join(m.mnt, "k"),
                          "1", str(64 * MIB)], stdout=subprocess.PIPE, text=True)
    t_eq(p.stdout.readline().strip(), "ready", "the syncing child started")
    end = time.monotonic() + 60
    while vmstat(m.mnt)["nr_parked"] == 0 and p.poll() is None and time.monotonic() < end:
        time.sleep(0.001)
    p.kill()
    p.wait(120)
    end = time.monotonic() + 120
    while vmstat(m.mnt)["nr_parked"] and time.monotonic() < end:
        time.sleep(0.05)
    t_eq(vmstat(m.mnt)["nr_parked"], 0, "requests parked after the killed writer went")
    with open(os.path.join(m.mnt, "after"), "w") as f:
        f.write("still serving")
        f.flush()
        os.fsync(f.fileno())
    env.umount(m)
    env.fsck(dev)


APPENDER = r"""
import os, sys
path, tag, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
i = 0
while True:
    unit = ("%s-%d:" % (tag, i)).encode() * 4 + b"\n"
    data = (unit * (size // len(unit) + 1))[:size]
    try:
        os.write(fd, data)
        os.fsync(fd)
    except OSError:
        break
    print(i, flush=True)
    i += 1
"""


def appended(tag, i, size):
    unit = ("%s-%d:" % (tag, i)).encode() * 4 + b"\n"
    return (unit * (size // len(unit) + 1))[:size]


class Appenders:
    """Processes appending and fsyncing, each fsync that returned recorded."""

    def __init__(self, mnt, n, size, prefix):
        self.procs = [subprocess.Popen([sys.executable, "-c", APPENDER,
                                        os.path.join(mnt, "%s%d" % (prefix, k)),
                                        "%s%d" % (prefix, k), str(size)],
                                       stdout=subprocess.PIPE, text=True)
                      for k in range(n)]
        self.last = [-1] * n
        self.readers = [threading.Thread(target=self._read, args=(k,)) for k in range(n)]
        for t in self.readers:
            t.start()

    def _read(self, k):
        for line in self.procs[k].stdout:
            self.last[k] = int(line)

    def wait_each_synced(self, seconds=120):
        end = time.monotonic() + seconds
        while min(self.last) < 0 and time.monotonic() < end:
            time.sleep(0.01)
        t_check(min(self.last) >= 0, "every appender's first fsync returned")

    def acked(self):
        """The last fsync each appender saw return, once they have ended."""
        for p in self.procs:
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in self.readers:
            t.join()
        return list(self.last)


def check_appended(mnt, acks, size, prefix):
    for k, last in enumerate(acks):
        name = "%s%d" % (prefix, k)
        with open(os.path.join(mnt, name), "rb") as f:
            got = f.read((last + 1) * size)
        want = b"".join(appended(name, i, size) for i in range(last + 1))
        t_check(got == want, "%s: its %d fsynced appends" % (name, last + 1))


def wait_parked(mnt, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if vmstat(mnt)["nr_parked"]:
            return True
        time.sleep(0.002)
    return False


APPEND = 1 * MIB


def mount_appending(env, dev, prefix):
    """A mount with 4 appenders running, each past its first fsync, and
    (most likely: the machine decides) one of their fsyncs parked."""
    m = env.mount(dev, OPTS + ["park_all"])
    apps = Appenders(m.mnt, 4, APPEND, prefix)
    apps.wait_each_synced()
    return m, apps, wait_parked(m.mnt, 20)


def part_kill(env, dev):
    t_step("3. SIGKILL of the daemon with replies parked: the replay keeps every fsync")
    m, apps, parked = mount_appending(env, dev, "k")
    env.kill(m)
    acks = apps.acked()
    t_log("parked at the kill: %s; fsyncs returned: %s" % (parked, acks))
    m = env.mount(dev, OPTS)
    check_appended(m.mnt, acks, APPEND, "k")
    env.umount(m)
    env.fsck(dev)


def part_unmount(env, dev):
    t_step("4. SIGTERM with requests parked: answered, clean exit")
    m, apps, parked = mount_appending(env, dev, "t")
    m.proc.send_signal(signal.SIGTERM)
    try:
        rc = m.proc.wait(120)
    except subprocess.TimeoutExpired:
        rc = "still running after 120 s"
    acks = apps.acked()
    t_log("parked at SIGTERM: %s; fsyncs returned: %s" % (parked, acks))
    t_eq(rc, 0, "daemon exit status after SIGTERM")
    t_check(not t_is_mounted(m.mnt), "%s still mounted after SIGTERM" % m.mnt)
    m.mounted = False
    env.mounts.remove(m)
    env.fsck(dev)
    m = env.mount(dev, OPTS)
    check_appended(m.mnt, acks, APPEND, "t")
    env.umount(m)
    env.fsck(dev)


def body(env):
    dev = env.new_fs(1 * GIB)
    part_leaders(env, dev)
    part_group(env, dev)
    part_interrupts(env, dev)
    part_kill(env, dev)
    part_unmount(env, dev)
    env.detach(dev)


if __name__ == "__main__":
    t_main("park", body, deadline_s=400)
