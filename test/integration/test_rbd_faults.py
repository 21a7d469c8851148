#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""wbcfs on a Ceph RBD image while the cluster loses daemons: one
tools/ceph-dev cluster with three bluestore OSDs (pool size 3, min_size 2),
one image, one mount (rbd_timeout=5), for every case.

  a. one OSD killed while dbench runs and a dd (oflag=dsync, fed through
     a pipe so that it still writes after the kill) writes: no error
     anywhere (dd and dbench exit 0, /.wbcfs/rbd counts no failed request).
  b. with that OSD still down, the mon killed while a writer fsyncs files
     in a loop, and restarted on its data (fsyncs completed while it was
     gone, and after): no error.
  c. every OSD killed (the two others): an fsync of a file of several writeback batches
     fails with EIO, the first request's timeout marking the cluster
     unreachable (/.wbcfs/rbd: reachable 0, fewer timeouts than the file's
     requests: the rest failed at once), the daemon lives and fails a
     second fsync as well. Two OSDs started again (bluestore keeps the
     data; two are min_size): the cluster answers again (said once in the daemon's log), the
     same fd's fsync succeeds, a new file is written.
  Unmounted (exit 0, nothing reported lost): `rbd export` is e2fsck -fn
  clean and the kernel's ext4 reads every file fsync'ed in a-c, with its
  checksum, the one fsync'ed before the outage included.

Skips (77) when the ceph daemons, the rbd tool or librbd support are
missing (tools/deps.sh installs them).

    WBCFS_BIN=build/wbcfs test/integration/test_rbd_faults.py
"""

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, TSkip, t_check, t_eq, t_log, t_main, t_run,  # noqa: E402
                    t_step, t_is_kernel, t_wbcfs_bin)
from test_rbd import CEPH_DEV, Cluster, ctl_rbd, export_check, make_image  # noqa: E402

TIMEOUT_S = 5               # rbd_timeout
LONG_S = 120                # a generous bound for anything that should come


def ceph_dev(cl, cmd, *ids):
    """tools/ceph-dev CMD DIR [ID...]: stop-osds, start-osds, stop-mon, start-mon."""
    t_run([CEPH_DEV, cmd, cl.dir] + list(ids), timeout=180)


def wait_for(what, pred, timeout=LONG_S):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TFail("%s: not within %d s" % (what, timeout))
        time.sleep(0.1)


def pattern(n, seed):
    block = hashlib.sha256(b"%d" % seed).digest() * 128      # 4 KiB
    return (block * (n // len(block) + 1))[:n]


def write_file(path, data, fsync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return hashlib.sha256(data).hexdigest()


def no_failures(m, what):
    c = ctl_rbd(m)
    t_eq((c["failed"], c["timeouts"], c["reachable"]), ("0", "0", "1"),
         "/.wbcfs/rbd failed, timeouts, reachable after %s" % what)


def start_dbench(env, m):
    """dbench, 4 clients for 10 s, once it executes; None without dbench."""
    dbench = shutil.which("dbench")
    loadfile = "/usr/share/dbench/client.txt"
    if not dbench or not os.path.exists(loadfile):
        t_log("dbench or its client.txt not installed: dd alone")
        return None
    out = os.path.join(env.tmp, "dbench.out")
    with open(out, "w") as f:
        p = subprocess.Popen([dbench, "-D", m.mnt, "-t", "10", "-c", loadfile, "4"],
                             stdout=f, stderr=subprocess.STDOUT)
    p.out = out
    wait_for("dbench executing", lambda: "execute" in open(out).read())
    return p


def case_a(env, cl, m, files):
    t_step("a. one OSD of three killed during a dd and dbench: no error")
    data = pattern(32 * MIB, 1)
    path = os.path.join(m.mnt, "dd")
    db = start_dbench(env, m)
    dd = subprocess.Popen(["dd", "of=" + path, "bs=1M", "iflag=fullblock", "oflag=dsync",
                           "status=none"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # fed through a pipe: dd writes after the kill whatever the speed
        dd.stdin.write(data[:8 * MIB])
        dd.stdin.flush()
        wait_for("dd's first 8 MiB", lambda: os.path.getsize(path) >= 8 * MIB)
        ceph_dev(cl, "stop-osds", "1")
        t_log("osd.1 killed with dd at %d MiB" % (os.path.getsize(path) // MIB))
        t_check(db is None or db.poll() is None, "dbench still running when osd.1 was killed")
        dd.stdin.write(data[8 * MIB:])
        dd.stdin.close()
        dd.wait(LONG_S)
        err = dd.stderr.read()
        rc = db.wait(LONG_S) if db else 0
    finally:
        for p in (dd, db):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    t_eq((dd.returncode, err.decode().strip()), (0, ""), "dd's exit and errors")
    files["dd"] = hashlib.sha256(data).hexdigest()
    if db:
        text = open(db.out).read()
        t_log("dbench: " + " | ".join(l.strip() for l in text.splitlines()
                                      if "Throughput" in l or "ERROR" in l or "failed" in l))
        t_check(rc == 0 and "ERROR" not in text, "dbench exit %d:\n%s" % (rc, text[-3000:]))
        shutil.rmtree(os.path.join(m.mnt, "clients"))
    no_failures(m, "dd and dbench")


def case_b(env, cl, m, files):
    t_step("b. the mon killed and restarted while a writer fsyncs: no error")
    done, errors, stop = [0], [], threading.Event()
    sums = {}

    def writer():
        i = 0
        while not stop.is_set():
            rel = "mon/f%d" % (i % 16)
            try:
                sums[rel] = write_file(os.path.join(m.mnt, rel), pattern(256 * 1024, 100 + i))
            except OSError as e:
                errors.append(e)
            done[0] += 1
            i += 1

    os.mkdir(os.path.join(m.mnt, "mon"))
    th = threading.Thread(target=writer)
    th.start()
    try:
        def after(n):
            k = done[0] + n
            wait_for("%d more fsyncs" % n, lambda: done[0] >= k or not th.is_alive())
        after(3)
        ceph_dev(cl, "stop-mon")
        # the OSDs go on without it: fsyncs for a while (its clients notice)
        gone = time.monotonic()
        after(3)
        wait_for("2 s", lambda: time.monotonic() - gone >= 2)
        t_log("%d fsyncs so far, mon down" % done[0])
        ceph_dev(cl, "start-mon")
        after(3)
    finally:
        stop.set()
        th.join(LONG_S)
    t_log("%d fsyncs, %d errors" % (done[0], len(errors)))
    t_check(not errors, "errors with the mon restarted: %s" % errors[:3])
    files.update(sums)
    no_failures(m, "the mon's restart")


def case_c(env, cl, m, files):
    t_step("c. every OSD killed: fsync fails with EIO after rbd_timeout, the daemon lives")
    files["kept"] = write_file(os.path.join(m.mnt, "kept"), pattern(4 * MIB, 7))
    # opened now: a create during the outage reads an inode table block
    fd = os.open(os.path.join(m.mnt, "late"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        ceph_dev(cl, "stop-osds")
        data = pattern(32 * MIB, 8)     # 8 writeback batches, 32 requests
        os.write(fd, data)
        t0 = time.monotonic()
        try:
            os.fsync(fd)
            raise TFail("fsync with every OSD gone succeeded")
        except OSError as e:
            t_eq(e.errno, errno.EIO, "fsync's errno with every OSD gone")
        took = time.monotonic() - t0
        c = ctl_rbd(m)
        t_log("fsync failed after %.1f s (rbd_timeout %d s); /.wbcfs/rbd: %s" % (
              took, TIMEOUT_S, ", ".join("%s %s" % kv for kv in c.items()
                                         if kv[0] in ("failed", "timeouts", "reachable"))))
        t_check(took < LONG_S, "fsync took %.0f s" % took)
        t_eq(c["reachable"], "0", "/.wbcfs/rbd reachable with every OSD gone")
        # each batch of the file waiting out the timeout would count 32
        t_check(0 < int(c["timeouts"]) < 16 and int(c["failed"]) > int(c["timeouts"]),
                "requests failed at once once unreachable: %s" % c)
        t_check(m.proc.poll() is None, "the daemon lives")
        os.stat(os.path.join(m.mnt, "kept"))
        t0 = time.monotonic()
        try:
            os.fsync(fd)
            raise TFail("a second fsync with every OSD gone succeeded")
        except OSError as e:
            t_eq(e.errno, errno.EIO, "second fsync's errno")
        t_log("second fsync failed after %.1f s" % (time.monotonic() - t0))

        t_step("c. two OSDs back: the cluster answers again, writing resumes")
        ceph_dev(cl, "start-osds", "0", "2")     # min_size: osd.1 may stay down
        t0 = time.monotonic()
        wait_for("reachable again", lambda: ctl_rbd(m)["reachable"] == "1")
        t_log("reachable again %.1f s after the OSDs were up" % (time.monotonic() - t0))
        # the data stayed dirty: the same fd's fsync writes them now (a PG
        # still peering may time out once more: then again, once answered)
        end = time.monotonic() + LONG_S
        while True:
            try:
                os.fsync(fd)
                break
            except OSError as e:
                t_eq(e.errno, errno.EIO, "fsync's errno")
                t_check(time.monotonic() < end, "fsync still fails %d s after the OSDs "
                        "returned" % LONG_S)
                t_log("fsync after the OSDs returned: EIO again; retrying")
                wait_for("reachable again", lambda: ctl_rbd(m)["reachable"] == "1")
        t_log("the fsync that failed, again: written")
    finally:
        os.close(fd)
    files["late"] = hashlib.sha256(data).hexdigest()
    files["after"] = write_file(os.path.join(m.mnt, "after"), pattern(4 * MIB, 9))
    log = m.daemon_log()
    t_eq(log.count("no answer from the cluster within %d s" % TIMEOUT_S), 1,
         "outages reported in the daemon's log:\n" + log)
    t_check("the cluster answers again" in log, "the return is reported:\n" + log)


def body(env):
    if t_is_kernel():
        raise TSkip("RBD images are wbcfs's (the kernel target has no rbd: devices)")
    for prog, pkg in (("ceph-mon", "ceph-mon"), ("ceph-osd", "ceph-osd"),
                      ("ceph-mgr", "ceph-mgr"), ("rbd", "ceph-common")):
        if not shutil.which(prog):
            raise TSkip("%s not installed (package %s; tools/deps.sh)" % (prog, pkg))
    ldd = subprocess.run(["ldd", t_wbcfs_bin()], capture_output=True, text=True)
    if "librbd" not in ldd.stdout:
        raise TSkip("this wbcfs was built without librbd (librbd-dev)")
    cl = Cluster(env, osds=3)
    dev = make_image(env, cl, "f")
    m = env.mount(dev, ["rbd_timeout=%d" % TIMEOUT_S])
    files = {}
    case_a(env, cl, m, files)
    case_b(env, cl, m, files)
    case_c(env, cl, m, files)
    env.umount(m)
    t_check("are lost" not in m.daemon_log(), "nothing reported lost:\n" + m.daemon_log())
    export_check(env, cl, "f", files)


if __name__ == "__main__":
    t_main("rbd_faults", body, deadline_s=300)
