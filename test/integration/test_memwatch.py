#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The memory watcher and the daemon's place in memory:
- a default mount says on its standard error which memory signals it
  watches, counts its steps in vmstat (mem_*), and sets its oom_score_adj
  to -500, or says why it could not (lowering needs CAP_SYS_RESOURCE);
- mem_watch=0 starts no watcher; oom_score_adj=N is written as given;
- in a 1 GiB cgroup v1 memory group, the default cache_size is a quarter
  of the group's limit, not of the host; a program allocating past
  limit - headroom fires the usage threshold: vmstat counts the event and
  a change of target, and both programs live;
- once the cache gives memory back (vmstat cache_resident_pages; skipped
  before): in a 3 GiB group, cache_size=2G holding 1.5 GiB written and
  synced and 300 MiB not yet synced, a program takes 2.25 GiB: it gets
  it, the group's OOM killer kills nothing, the daemon lives, both files
  read back whole through wbcfs and the kernel's ext4.
Ends with e2fsck -fn.

    WBCFS_BIN=build/wbcfs WBCFS_MEMHOG=build/test/integration/memhog \\
        test/integration/test_memwatch.py
"""

import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TSkip, t_check, t_eq, t_log, t_main,  # noqa: E402
                    t_step, t_wbcfs_pids)

PAGE = 4096


def vmstat(m):
    out = {}
    with open(os.path.join(m.mnt, ".wbcfs", "vmstat")) as f:
        for line in f:
            k, v = line.split()
            out[k] = int(v)
    return out


def wait_for(what, fn, timeout=60):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def daemon_pid(m):
    pids = t_wbcfs_pids(m.mnt)
    t_eq(len(pids), 1, "daemons serving %s" % m.mnt)
    return pids[0]


def oom_score_adj(pid):
    with open("/proc/%d/oom_score_adj" % pid) as f:
        return int(f.read())


def memhog_bin():
    p = os.environ.get("WBCFS_MEMHOG")
    if not p:
        p = os.path.join(os.path.dirname(os.path.realpath(os.environ.get(
            "WBCFS_BIN", "build/wbcfs"))), "test", "integration", "memhog")
    if not os.access(p, os.X_OK):
        raise TSkip("memhog not built (WBCFS_MEMHOG=%r)" % p)
    return os.path.abspath(p)


def default_mount(env, dev):
    t_step("default mount: the watcher's line, its steps, oom_score_adj")
    m = env.mount(dev, ["cache_size=64M"])
    log = m.daemon_log()
    t_check("wbcfs: memory: " in log, "no memory signals line in:\n" + log)
    t_check("MemAvailable" in log, "MemAvailable not watched:\n" + log)
    st = wait_for("two watcher steps", lambda: vmstat(m)["mem_watch_steps"] >= 2 and vmstat(m))
    t_check(st["mem_available_bytes"] > 0, "mem_available_bytes %d" % st["mem_available_bytes"])
    adj = oom_score_adj(daemon_pid(m))
    if adj != -500:
        t_check("oom_score_adj=-500" in log and "CAP_SYS_RESOURCE" in log,
                "oom_score_adj %d and no message:\n%s" % (adj, log))
        t_log("oom_score_adj stays %d here: %s" % (adj, [ln for ln in log.splitlines()
                                                        if "oom_score_adj" in ln]))
    env.umount(m)


def watch_off(env, dev):
    t_step("mem_watch=0: no watcher; oom_score_adj=300 as given")
    m = env.mount(dev, ["cache_size=64M", "mem_watch=0", "oom_score_adj=300"])
    t_check("wbcfs: memory: " not in m.daemon_log(), "a watcher line with mem_watch=0")
    time.sleep(1.5)
    st = vmstat(m)
    t_eq(st["mem_watch_steps"], 0, "mem_watch_steps with mem_watch=0")
    t_eq(st["mem_available_bytes"], 0, "mem_available_bytes with mem_watch=0")
    t_eq(oom_score_adj(daemon_pid(m)), 300, "the daemon's oom_score_adj")
    env.umount(m)


def in_cgroup(env, dev):
    t_step("in a 1 GiB memory cgroup: default cache_size, the usage threshold")
    hog = memhog_bin()
    cg = env.memory_cgroup(1 * GIB)
    with open("/proc/self/cgroup") as f:
        home = [ln.split(":", 2)[2].strip() for ln in f if ":memory:" in ln]
    # the daemon starts inside: this process joins, the daemon inherits it
    cg.add(os.getpid())
    try:
        m = env.mount(dev, [])
        log = m.daemon_log()
        t_check("limit 1.0G" in log and "usage threshold" in log,
                "the cgroup's limit or threshold not in:\n" + log)
        st = vmstat(m)
        # a quarter of the group's limit (RAM and MemAvailable are larger)
        t_eq(st["nr_cache_pages"], GIB // 4 // PAGE, "default cache pages in 1 GiB")
        st = wait_for("the limit in vmstat", lambda: vmstat(m)["mem_cgroup_limit_bytes"] and vmstat(m))
        t_eq(st["mem_cgroup_limit_bytes"], GIB, "mem_cgroup_limit_bytes")
        before = st
        # 32 MiB past the threshold at 1 GiB - 64 MiB, 32 MiB short of the limit
        with open(os.path.join(cg.path, "memory.usage_in_bytes")) as f:
            usage = int(f.read())
        hog_mib = (GIB - 64 * MIB - usage) // MIB + 32
        t_log("cgroup usage %d MiB; memhog %d MiB" % (usage // MIB, hog_mib))
        p = subprocess.run([hog, "-c", "8", "-h", "2", str(hog_mib)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        t_log(p.stdout.strip())
        t_eq(p.returncode, 0, "memhog's exit")
        st = wait_for("a pressure event", lambda: vmstat(m)["mem_pressure_events"] >
                      before["mem_pressure_events"] and vmstat(m))
        t_check(st["mem_target_changes"] > before["mem_target_changes"],
                "no change of target: %s" % {k: v for k, v in st.items()
                                             if k.startswith("mem_")})
        t_log("after memhog: %s" % {k: v for k, v in st.items() if k.startswith("mem_")})
        t_check(m.proc.poll() is None, "the daemon died")
        env.umount(m)
    finally:
        if home:
            with open(os.path.join("/sys/fs/cgroup/memory", home[0].lstrip("/"),
                                   "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))


def write_random(path, mib, seed):
    """mib MiB of reproducible bytes; returns their sha256."""
    h = hashlib.sha256()
    block = hashlib.sha256(seed.encode()).digest() * (MIB // 32)
    with open(path, "wb") as f:
        for i in range(mib):
            b = i.to_bytes(8, "little") + block[8:]
            h.update(b)
            f.write(b)
    return h.hexdigest()


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(4 * MIB), b""):
            h.update(b)
    return h.hexdigest()


def oom_kills(cg):
    with open(os.path.join(cg.path, "memory.oom_control")) as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


def gives_back(env):
    """The issue's scenario: nothing killed, nothing lost."""
    hog = memhog_bin()
    dev = env.new_fs(2 * GIB, name="big.img")
    cg = env.memory_cgroup(3 * GIB)
    with open("/proc/self/cgroup") as f:
        home = [ln.split(":", 2)[2].strip() for ln in f if ":memory:" in ln]
    cg.add(os.getpid())
    try:
        m = env.mount(dev, ["cache_size=2G"])
        if "cache_resident_pages" not in vmstat(m):
            t_log("the cache does not give memory back yet (no cache_resident_pages): skipped")
            env.umount(m)
            return
        t_step("3 GiB group: 1.5 GiB synced and 300 MiB dirty in a 2 GiB cache, "
               "a program takes 2.25 GiB")
        clean = write_random(os.path.join(m.mnt, "clean"), 1536, "clean")
        os.sync()
        dirty = write_random(os.path.join(m.mnt, "dirty"), 300, "dirty")
        st = vmstat(m)
        t_log("before: resident %d MiB, dirty %d MiB, group usage %d MiB"
              % (st["cache_resident_pages"] * PAGE // MIB, st["nr_dirty"] * PAGE // MIB,
                 int(open(os.path.join(cg.path, "memory.usage_in_bytes")).read()) // MIB))
        kills = oom_kills(cg)
        p = subprocess.run([hog, "-c", "64", "2304"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        t_log("%s (exit %d)" % (p.stdout.strip(), p.returncode))
        st = vmstat(m)
        t_log("after: resident %d MiB, target %d MiB, %s" % (
              st["cache_resident_pages"] * PAGE // MIB, st["cache_target_pages"] * PAGE // MIB,
              {k: v for k, v in st.items() if k.startswith("mem_")}))
        t_eq(p.returncode, 0, "the program's exit (-9: killed)")
        t_eq(oom_kills(cg) - kills, 0, "OOM kills in the group")
        t_check(m.proc.poll() is None, "the daemon died")
        t_check(st["mem_target_changes"] > 0, "the target never changed")
        t_eq(sha(os.path.join(m.mnt, "dirty")), dirty, "the unsynced file through wbcfs")
        t_eq(sha(os.path.join(m.mnt, "clean")), clean, "the synced file through wbcfs")
        env.umount(m)
    finally:
        if home:
            with open(os.path.join("/sys/fs/cgroup/memory", home[0].lstrip("/"),
                                   "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    env.fsck(dev)
    k = env.kernel_ro(dev)
    t_eq(sha(os.path.join(k.mnt, "dirty")), dirty, "the unsynced file through the kernel's ext4")
    t_eq(sha(os.path.join(k.mnt, "clean")), clean, "the synced file through the kernel's ext4")
    env.umount(k)


def body(env):
    dev = env.new_fs(256 * MIB)
    default_mount(env, dev)
    watch_off(env, dev)
    in_cgroup(env, dev)
    env.fsck(dev)
    gives_back(env)


if __name__ == "__main__":
    t_main("memwatch", body, deadline_s=580)
