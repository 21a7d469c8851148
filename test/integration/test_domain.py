#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Cache domains (-o domain=NAME): several devices in one daemon and one
cache.  Three fresh 256 MiB loop devices A, B, C.

1. A starts domain NAME (foreground daemon, cache_size=96M).  B joins it
   with plain `wbcfs B MNT -o domain=NAME`: the command returns 0 once B
   is mounted, no second daemon is left running, /.wbcfs/domain in both
   mounts lists both devices.
2. Refusals, each with exit 1, a one-line message naming the reason, and
   nothing mounted: B again (already in the domain), C on B's mountpoint,
   C with cache_size=64M or dirty_ratio=30 (domain options that differ),
   C with write_log=.  C with cache_size=96M (the same value) joins.
3. One cache: vmstat is the domain's (reading a file on B moves
   nr_file_pages seen through A); after writing to A and B and syncing,
   each /.wbcfs/bdi has a WritebackShare and the shares add up to ~1000.
4. Per-device unmount while the other device is being written: a writer
   keeps writing files on A (checksummed) while B is unmounted; B's
   unmount completes, A's writer finishes, A's files read back intact,
   and B alone is gone from /.wbcfs/domain.
5. SIGTERM to the daemon ends every mount (A and C), it exits 0, and the
   socket is gone.  Every device is e2fsck -fn clean and the kernel's
   ext4 sees what was written through wbcfs.
6. A stale socket (a daemon killed without cleaning up) does not stop a
   new domain of the same name from starting.

    WBCFS_BIN=build/wbcfs test/integration/test_domain.py
"""

import hashlib
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, Mount, TFail, TSkip, t_check, t_eq,  # noqa: E402
                    t_is_kernel, t_is_mounted, t_log, t_main, t_manifest, t_run,
                    t_sha256_file, t_step, t_wbcfs_bin)

RUN_DIR = "/run/wbcfs"
CACHE = "96M"


def ctl(mnt, name):
    with open(os.path.join(mnt, ".wbcfs", name)) as f:
        return f.read()


def domain_devices(mnt):
    lines = ctl(mnt, "domain").splitlines()
    return [ln.split()[0] for ln in lines[2:]]


def vmstat(mnt, key):
    for ln in ctl(mnt, "vmstat").splitlines():
        k, v = ln.split()
        if k == key:
            return int(v)
    raise TFail("vmstat has no %s" % key)


def bdi_share(mnt):
    for ln in ctl(mnt, "bdi").splitlines():
        if ln.startswith("WritebackShare:"):
            return int(ln.split()[1])
    raise TFail("bdi has no WritebackShare line")


def mounts_on(mnt):
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[9] for ln in f if ln.split()[4] == mnt]


def join(env, dev, mnt, opts, expect_fail=False):
    """`wbcfs DEV MNT -o allow_other,...,domain=NAME`: returns when the
    daemon has mounted it (or refused); a Mount without a process."""
    cmd = [t_wbcfs_bin(), dev, mnt, "-o", ",".join(["allow_other"] + opts)]
    before = mounts_on(mnt)
    p = t_run(cmd, check=False, timeout=120)
    if expect_fail:
        t_check(p.returncode == 1, "%s: exit %d, want 1:\n%s"
                % (" ".join(cmd), p.returncode, p.stdout))
        t_eq(mounts_on(mnt), before, "mounts on %s after a refused join" % mnt)
        lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
        t_check(len(lines) == 1, "one line of error, got:\n%s" % p.stdout)
        return lines[0]
    t_check(p.returncode == 0, "%s: exit %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    t_check(t_is_mounted(mnt), "join returned 0 but %s is not mounted" % mnt)
    m = Mount(mnt, dev, "wbcfs")
    env.mounts.append(m)
    os.stat(mnt)
    return m


def write_files(d, prefix, n, size, seed):
    sums = {}
    for i in range(n):
        data = hashlib.sha256(b"%d-%d" % (seed, i)).digest() * (size // 32)
        path = os.path.join(d, "%s%d" % (prefix, i))
        with open(path, "wb") as f:
            f.write(data)
        sums[path] = hashlib.sha256(data).hexdigest()
    return sums


def check_sums(sums, what):
    for path, want in sums.items():
        t_eq(t_sha256_file(path), want, "%s: %s" % (what, path))


def procs_naming(dev):
    """wbcfs processes whose command line names dev."""
    out = t_run(["pgrep", "-f", "wbcfs .*%s " % dev], check=False).stdout.split()
    return [int(p) for p in out]


def body(env):
    if t_is_kernel():
        raise TSkip("cache domains are wbcfs's")
    name = "wbt%d" % os.getpid()
    sock = os.path.join(RUN_DIR, name + ".sock")
    dom = ["domain=" + name]
    devs = []
    for i in range(3):
        devs.append(env.new_fs(256 * MIB, name="d%d.img" % i))
    a_dev, b_dev, c_dev = devs
    mnt_a, mnt_b, mnt_c = env.mkdir("a"), env.mkdir("b"), env.mkdir("c")

    t_step("1. A starts domain %s; B joins it" % name)
    a = env.mount(a_dev, ["cache_size=" + CACHE] + dom, mnt=mnt_a)
    t_check(os.path.exists(sock), "no socket %s" % sock)
    b = join(env, b_dev, mnt_b, dom)
    t_eq(procs_naming(b_dev), [], "wbcfs processes for B after the join")
    for m in (a, b):
        t_eq(domain_devices(m.mnt), [a_dev, b_dev], "devices in %s/.wbcfs/domain" % m.mnt)

    t_step("2. refusals")
    msg = join(env, b_dev, mnt_c, dom, expect_fail=True)
    t_check("already in domain" in msg, "B twice: %s" % msg)
    msg = join(env, c_dev, mnt_b, dom, expect_fail=True)
    t_check("already serves" in msg, "C on B's mountpoint: %s" % msg)
    msg = join(env, c_dev, mnt_c, dom + ["cache_size=64M"], expect_fail=True)
    t_check("cache_size" in msg and name in msg, "cache_size: %s" % msg)
    msg = join(env, c_dev, mnt_c, dom + ["dirty_ratio=30"], expect_fail=True)
    t_check("dirty_ratio" in msg, "dirty_ratio: %s" % msg)
    msg = join(env, c_dev, mnt_c, dom + ["write_log=" + os.path.join(env.tmp, "w.log")],
               expect_fail=True)
    t_check("write_log" in msg, "write_log: %s" % msg)
    # the pool's size means nothing to this domain's per-device flushers
    msg = join(env, c_dev, mnt_c, dom + ["pdflush_threads=1"], expect_fail=True)
    t_check("pdflush_threads" in msg, "pdflush_threads: %s" % msg)
    msg = join(env, c_dev, mnt_c, ["domain=%s-p" % name, "pdflush_threads=1"],
               expect_fail=True)
    t_check("pdflush_threads" in msg, "a new domain with pdflush_threads: %s" % msg)
    c = join(env, c_dev, mnt_c, dom + ["cache_size=" + CACHE])
    t_eq(len(domain_devices(mnt_a)), 3, "devices after C joined")

    t_step("3. one cache: B's pages show in A's vmstat; shares of writeback")
    sums_b = write_files(mnt_b, "b", 4, 4 * MIB, 2)
    sums_a = write_files(mnt_a, "a", 4, 4 * MIB, 1)
    os.sync()
    pages0 = vmstat(mnt_a, "nr_file_pages")
    big = os.path.join(mnt_b, "big")
    with open(big, "wb") as f:
        f.write(os.urandom(8 * MIB))
    pages1 = vmstat(mnt_a, "nr_file_pages")
    t_check(pages1 >= pages0 + 8 * MIB // 4096 - 64,
            "A's vmstat nr_file_pages %d -> %d after 8 MiB written on B" % (pages0, pages1))
    sums_b[big] = t_sha256_file(big)
    os.sync()
    shares = [bdi_share(m.mnt) for m in (a, b, c)]
    t_log("WritebackShare A %d B %d C %d" % tuple(shares))
    t_check(shares[0] > 0 and shares[1] > 0, "A and B wrote back: shares %s" % shares)
    t_check(980 <= sum(shares) <= 1000, "shares add up to %d" % sum(shares))

    t_step("3b. both devices change metadata at once: creates, writes, fsyncs")
    # two devices' libext2fs work runs under two locks at once: nothing the
    # devices' metadata paths keep may be shared (this caught a shared
    # scratch page that sent one device's inode tables to the other)
    sums_c, errs = {}, []

    def creator(d, tag):
        try:
            for i in range(400):
                data = hashlib.sha256(b"%s-%d" % (tag.encode(), i)).digest() * 512
                path = os.path.join(d, "%s-%d" % (tag, i))
                with open(path, "wb") as f:
                    f.write(data)
                    if i % 50 == 49:
                        os.fsync(f.fileno())
                sums_c[path] = hashlib.sha256(data).hexdigest()
        except OSError as e:
            errs.append("%s: %s" % (tag, e))
    ths = [threading.Thread(target=creator, args=(m.mnt, "c%d%s" % (k, m.mnt[-1])))
           for m in (a, b) for k in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    t_check(not errs, "creators: %s" % errs)
    check_sums(sums_c, "created on A and B at once")

    t_step("4. B unmounted while A is being written")
    errs, sums_w = [], {}
    stop = threading.Event()

    def writer():
        i = 0
        try:
            # 20 names rewritten in turn: 40 MiB at most on A's 256 MiB
            while not stop.is_set() or i < 8:
                sums_w.update(write_files(mnt_a, "w%d-" % (i % 20), 1, 2 * MIB, 100 + i))
                i += 1
        except OSError as e:
            errs.append(e)
    th = threading.Thread(target=writer)
    th.start()
    try:
        time.sleep(0.5)
        man_b = t_manifest(mnt_b)
        env.umount(b)
    finally:
        stop.set()
        th.join(120)
    t_check(not th.is_alive(), "A's writer still running 120 s after B's unmount")
    t_check(not errs, "A's writer: %s" % errs)
    t_check(len(sums_w) >= 8, "A's writer wrote %d files" % len(sums_w))
    check_sums(sums_a, "A")
    check_sums(sums_w, "A during B's unmount")
    t_eq(domain_devices(mnt_a), [a_dev, c_dev], "devices after B left")
    env.verify_after_umount(b_dev, man_b)
    b = join(env, b_dev, mnt_b, dom)
    check_sums(sums_b, "B after rejoining")

    t_step("5. SIGTERM ends every mount of the daemon, a blocked trace reader too")
    mans = {m.dev: t_manifest(m.mnt) for m in (a, b, c)}

    def trace_reader():
        # a read that waits for throttle records: the session's end must end it
        try:
            with open(os.path.join(mnt_a, ".wbcfs", "trace"), "rb", buffering=0) as f:
                while f.read(65536):
                    pass
        except OSError:
            pass
    tr = threading.Thread(target=trace_reader, daemon=True)
    tr.start()
    time.sleep(0.3)
    a.proc.send_signal(signal.SIGTERM)
    rc = a.proc.wait(120)
    t_eq(rc, 0, "daemon exit status after SIGTERM")
    for m in (a, b, c):
        t_check(not t_is_mounted(m.mnt), "%s still mounted after SIGTERM" % m.mnt)
        m.mounted = False
        env.mounts.remove(m)
    t_check(not os.path.exists(sock), "the socket outlived the daemon")
    for dev in (a_dev, b_dev, c_dev):
        env.verify_after_umount(dev, mans[dev])

    t_step("6. a stale socket does not stop a new domain")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(sock)
    s.close()		# bound, never listened: what a killed daemon leaves
    a = env.mount(a_dev, ["cache_size=" + CACHE] + dom, mnt=mnt_a)
    c = join(env, c_dev, mnt_c, dom)
    t_eq(len(domain_devices(mnt_a)), 2, "devices in the new domain")
    check_sums(sums_a, "A in the new domain")
    env.umount(c)
    env.umount(a)
    t_check(not os.path.exists(sock), "the socket outlived the daemon")
    t_check(not os.path.exists(os.path.join(RUN_DIR, name + ".lock")),
            "the lock file outlived the daemon")
    for dev in (a_dev, c_dev):
        env.fsck(dev)


if __name__ == "__main__":
    t_main("domain", body, deadline_s=300)
