#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The cache gives memory back: an idle mount is small, a program beside
wbcfs in a memory cgroup gets its memory, the daemon is not the OOM
killer's victim and nothing is lost; the cache shrinks and regrows at run
time under load without losing a byte.

  idle    default options: the daemon's VmRSS under 256 MiB once mounted.
  dirty   a 3 GiB memory cgroup (v1 memory.limit_in_bytes, or v2
          memory.max), wbcfs started inside with cache_size=2G, 300 MiB
          written and held dirty (no sync, expiry and periodic writeback
          off, background threshold above it), then a hog in the same
          cgroup takes 2.25 GiB: the hog exits 0, no OOM kill in the
          cgroup, the daemon lives and the mount answers; unmount exits 0,
          e2fsck -fn clean, the kernel's ext4 reads the file with the
          checksum it was written with.
  clean   the same with 1.4 GiB written and synced first (clean pages:
          only giving memory back makes room for the hog), and vmstat
          pgreturned > 0, mem_target_changes > 0 where vmstat has it,
          and the trace's cache records show the target falling.
  swap    `clean` with a 2 GiB swap file on (switched on for this case
          only, off and removed afterwards): the daemon's VmSwap stays
          under 64 MiB, its clean pages given back, not swapped out, and
          the cgroup as a whole has under 256 MiB in swap (the kernel
          did not swap the hog out to make room the cache should give).
  resize  /.wbcfs/cache_size written down to 64M and back up to 1G five
          times while dd writes a file, another reader checks one in a
          loop and dbench runs (dbench absent: that part is skipped with a
          message): every checksum holds, the target changes are
          counted (cache_target_changes), pgreturned > 0; with the load
          gone a last cut to 64M leaves at most 64M resident (within
          120 s); then the usual ending (e2fsck, the kernel's ext4 sees
          the same tree).

Each case asserts states and counts, never speeds.  dirty, clean and
swap need a memory cgroup and swap needs swapon: without them they are
skipped with a message; the file exits 77 only when no case could run.
The cgroup and the swap file are removed whatever happens.
WBCFS_MEMORY_CASES=idle,clean (or the case names as arguments) runs some;
WBCFS_MEMORY_OPTS=mem_watch=0 adds mount options to the cgroup cases (to
see them fail without the watcher).

    WBCFS_BIN=build/wbcfs test/integration/test_memory.py [CASE...]

Before the cache was elastic (prefault=all pinning the whole cache) the
daemon was the OOM killer's victim in `dirty` and `clean`, and `idle`
saw RAM/4 resident.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TFail, TSkip, t_check, t_dump_stacks, t_log,  # noqa: E402
                    t_main, t_manifest, t_run, t_step, t_sha256_file)
import wbmem  # noqa: E402
import wbtrace  # noqa: E402

LIMIT = 3 * GIB
CACHE = "2G"
DIRTY = 300 * MIB
CLEAN = 1400 * MIB
HOG = 2304 * MIB                # 2.25 GiB
IDLE_RSS_MAX = 256 * MIB
SWAP = 2 * GIB
SWAP_MAX = 64 * MIB            # the daemon's VmSwap
CG_SWAP_MAX = 256 * MIB         # everything the cgroup put in swap
PAGE = 4096
# the written data stays dirty until the hog has run: no expiry, no
# periodic writeback, a background threshold above it
HOLD_DIRTY = ["dirty_expire_centisecs=8640000", "dirty_writeback_centisecs=0",
              "dirty_ratio=60", "dirty_background_ratio=50"]
CASES = ("idle", "dirty", "clean", "swap", "resize")


def write_file(path, size, seed, sync=False):
    """size bytes of seeded pseudo-random data (16 MiB of urandom-like
    bytes from sha256 counters, each 4 MiB chunk stamped with its index so
    no two chunks are alike); returns the sha256 of what was written."""
    block = bytearray()
    ctr = 0
    while len(block) < 4 * MIB:
        block += hashlib.sha256(b"%d-%d" % (seed, ctr)).digest() * 128
        ctr += 1
    block = bytes(block[:4 * MIB])
    h = hashlib.sha256()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        off = 0
        while off < size:
            n = min(4 * MIB, size - off)
            chunk = (b"%016d" % (off // (4 * MIB))) + block[16:n]
            chunk = chunk[:n]
            mv = memoryview(chunk)
            done = 0
            while done < n:
                done += os.write(fd, mv[done:])
            h.update(chunk)
            off += n
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return h.hexdigest()


def syncfs(path):
    t_run(["sync", "-f", path], timeout=600)


class Sampler:
    """Samples the daemon's VmRSS/VmSwap and vmstat's cache fields every
    0.1 s in a thread, for the log and the swap check."""

    def __init__(self, m, cg=None):
        self.m, self.cg = m, cg
        self.samples = []
        self.cg_swap_max = 0
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        t0 = time.monotonic()
        while not self.stop_ev.is_set():
            st = wbmem.proc_status(self.m.pid)
            v = wbmem.vmstat_or_empty(self.m.mnt)
            if self.cg:
                self.cg_swap_max = max(self.cg_swap_max, self.cg.swap_bytes())
            self.samples.append((time.monotonic() - t0, st.get("VmRSS", 0),
                                 st.get("VmSwap", 0),
                                 v.get("cache_resident_pages"),
                                 v.get("cache_target_pages")))
            self.stop_ev.wait(0.1)

    def stop(self):
        self.stop_ev.set()
        self.th.join(30)

    def max_swap(self):
        return max((s[2] for s in self.samples), default=0)

    def max_rss(self):
        return max((s[1] for s in self.samples), default=0)


def vm_field(v, key):
    """A vmstat field, or None when this wbcfs does not have it."""
    return v.get(key)


def check_falling_targets(trace_path):
    """The trace has cache records and at least one lowers the target."""
    recs = [kv for _, ev, kv in wbtrace.parse(trace_path) if ev == "cache"]
    t_check(recs, "no cache record in the trace (%s)" % trace_path)
    falls = sum(1 for a, b in zip(recs, recs[1:])
                if isinstance(a.get("target"), int) and
                isinstance(b.get("target"), int) and b["target"] < a["target"])
    reasons = sorted(set(str(kv.get("reason")) for kv in recs))
    t_log("trace: %d cache records, %d lower the target, reasons %s, "
          "targets %s..%s pages" % (len(recs), falls, reasons,
                                    min(kv.get("target", 0) for kv in recs),
                                    max(kv.get("target", 0) for kv in recs)))
    t_check(falls > 0, "no cache record in the trace lowers the target")


# --------------------------------------------------------------------------
# cases

def case_idle(env, ctx):
    dev = ctx.fs(4 * GIB)
    m = env.mount(dev)
    t_step("an idle mount with default options stays under %d MiB resident"
           % (IDLE_RSS_MAX // MIB))
    os.listdir(m.mnt)
    time.sleep(2)           # anything started at mount has started
    st = wbmem.proc_status(m.pid)
    v = wbmem.vmstat_or_empty(m.mnt)
    t_log("daemon VmRSS %d MiB, VmSize %d MiB; cache target %s ceiling %s "
          "resident %s pages" % (st.get("VmRSS", 0) // MIB,
                                 st.get("VmSize", 0) // MIB,
                                 v.get("cache_target_pages"),
                                 v.get("cache_ceiling_pages"),
                                 v.get("cache_resident_pages")))
    t_check(st.get("VmRSS", 1 << 62) < IDLE_RSS_MAX,
            "idle daemon resident %d MiB, want < %d MiB"
            % (st.get("VmRSS", 0) // MIB, IDLE_RSS_MAX // MIB))
    env.umount(m)
    env.fsck(dev)


def pressure(env, ctx, kind, swap=False):
    """The issue's scenario (kind 'dirty') or its clean-cache variant."""
    if swap:
        t_step("a %d MiB swap file for this case" % (SWAP // MIB))
        wbmem.swap_file(env, SWAP)
    cg = wbmem.mem_cgroup(env, LIMIT)
    dev = ctx.fs(4 * GIB)
    extra = [o for o in os.environ.get("WBCFS_MEMORY_OPTS", "").split(",")
             if o]
    m = env.mount(dev, ["cache_size=" + CACHE] + HOLD_DIRTY + extra,
                  preexec=cg.preexec())
    t_check(m.pid in cg.pids(), "the daemon (pid %d) is not in %s"
            % (m.pid, cg.path))
    tr = wbtrace.TraceReader(m.mnt, os.path.join(env.tmp, "trace-%s.txt"
                                                 % ctx.name))
    ctx.on_fail(tr.stop)
    path = os.path.join(m.mnt, kind + ".bin")
    size = DIRTY if kind == "dirty" else CLEAN
    t_step("write %d MiB%s" % (size // MIB, ", held dirty" if kind == "dirty"
                               else ", then syncfs (clean in the cache)"))
    digest = write_file(path, size, seed=37 if kind == "dirty" else 38)
    if kind == "clean":
        syncfs(m.mnt)
    v0 = wbmem.vmstat_or_empty(m.mnt)
    st0 = wbmem.proc_status(m.pid)
    t_log("before the hog: daemon VmRSS %d MiB, nr_dirty %d MiB, cgroup "
          "usage %d MiB, resident %s target %s pages"
          % (st0.get("VmRSS", 0) // MIB, v0.get("nr_dirty", 0) * PAGE // MIB,
             cg.usage() // MIB, v0.get("cache_resident_pages"),
             v0.get("cache_target_pages")))
    if kind == "dirty":
        t_check(v0.get("nr_dirty", 0) * PAGE >= DIRTY * 2 // 3,
                "only %d MiB dirty before the hog: the scenario needs the "
                "data held dirty" % (v0.get("nr_dirty", 0) * PAGE // MIB))
    t_step("a hog in the cgroup takes %d MiB: it completes, no OOM kill, "
           "the daemon lives" % (HOG // MIB))
    sampler = Sampler(m, cg)
    ctx.on_fail(sampler.stop)
    hog = wbmem.Hog(cg, HOG, hold=3.0,
                    log=os.path.join(env.tmp, "hog-%s.log" % ctx.name))
    ctx.on_fail(hog.kill)
    rc, got = hog.wait(timeout=600)
    time.sleep(1)
    sampler.stop()
    kills = cg.oom_kills()
    daemon_alive = m.proc.poll() is None and wbmem.alive(m.pid)
    t_log("after the hog: daemon %s, VmRSS max %d MiB, VmSwap max %d MiB, "
          "the cgroup's swap max %d MiB, OOM kills in the cgroup %d"
          % ("alive" if daemon_alive else "DEAD (%s)" % m.proc.poll(),
             sampler.max_rss() // MIB, sampler.max_swap() // MIB,
             sampler.cg_swap_max // MIB, kills))
    problems = []
    if rc != 0:
        problems.append("the hog exited %d%s" % (
            rc, " (killed)" if rc < 0 else ""))
    if kills:
        problems.append("%d OOM kill(s) in the cgroup" % kills)
    if not daemon_alive:
        problems.append("the daemon died (%s)" % m.proc.poll())
    if problems:
        raise TFail("; ".join(problems))
    t_step("the mount answers: stat and a read of %s" % path)
    st = os.stat(path)
    t_check(st.st_size == size, "%s has size %d, want %d"
            % (path, st.st_size, size))
    with open(path, "rb") as f:
        t_check(len(f.read(MIB)) == MIB, "short read of %s" % path)
    v1 = wbmem.vmstat_or_empty(m.mnt)
    keys = ("cache_target_pages", "cache_ceiling_pages", "cache_min_pages",
            "cache_resident_pages", "pgreturned", "pgregrown",
            "cache_target_changes", "mem_target_changes", "mem_pressure_events",
            "mem_pressure_stall_us", "mem_cgroup_limit_bytes",
            "mem_cgroup_usage_bytes", "mem_available_bytes",
            "mem_watch_steps")
    t_log("vmstat: " + ", ".join("%s %s" % (k, v1.get(k)) for k in keys))
    if swap:
        t_step("the daemon's VmSwap stayed under %d MiB" % (SWAP_MAX // MIB))
        t_check(sampler.max_swap() < SWAP_MAX,
                "the daemon had %d MiB swapped out: its clean pages went to "
                "swap instead of back to the kernel"
                % (sampler.max_swap() // MIB))
        t_step("the cgroup swapped under %d MiB in all: the cache's clean "
               "pages went back before the kernel had to swap anything"
               % (CG_SWAP_MAX // MIB))
        t_check(sampler.cg_swap_max < CG_SWAP_MAX,
                "the cgroup had %d MiB in swap while the cache held clean "
                "pages" % (sampler.cg_swap_max // MIB))
    if kind == "clean":
        t_step("clean pages were returned (pgreturned), pressure was seen, "
               "the trace shows the target falling")
        t_check(vm_field(v1, "pgreturned") is not None,
                "vmstat has no pgreturned")
        t_check(v1["pgreturned"] > 0, "pgreturned is 0")
        # the watcher's own cuts: a deficit projected from the cgroup's
        # usage cuts before any event fires (mem_pressure_events counts
        # only PSI triggers and cgroup events, and may stay 0: measured so
        # in the swap case), so the watcher's target changes are checked
        if vm_field(v1, "mem_target_changes") is not None:
            t_check(v1["mem_target_changes"] > 0,
                    "mem_target_changes is 0: the watcher never cut")
        else:
            t_log("vmstat has no mem_target_changes: not checked")
    tr.stop()
    if kind == "clean":
        check_falling_targets(tr.path)
    t_step("unmount exits 0; e2fsck clean; the kernel's ext4 reads the "
           "file with its checksum")
    env.umount(m, timeout=600)
    env.fsck(dev)
    k = env.kernel_ro(dev)
    try:
        got_digest = t_sha256_file(os.path.join(k.mnt, kind + ".bin"))
    finally:
        env.umount(k)
    t_check(got_digest == digest, "%s.bin through the kernel's ext4: sha256 "
            "%s, written %s" % (kind, got_digest, digest))
    t_log("%s.bin intact through the kernel's ext4" % kind)


def case_dirty(env, ctx):
    pressure(env, ctx, "dirty")


def case_clean(env, ctx):
    pressure(env, ctx, "clean")


def case_swap(env, ctx):
    pressure(env, ctx, "clean", swap=True)


def ctl_write(m, name, value):
    with open(os.path.join(m.mnt, ".wbcfs", name), "w") as f:
        f.write(str(value))


def case_resize(env, ctx):
    dev = ctx.fs(4 * GIB)
    m = env.mount(dev, ["cache_size=1G", "cache_min=32M"])
    ctl = os.path.join(m.mnt, ".wbcfs", "cache_size")
    t_check(os.path.exists(ctl), "no %s" % ctl)
    tr = wbtrace.TraceReader(m.mnt, os.path.join(env.tmp, "trace-resize.txt"))
    ctx.on_fail(tr.stop)
    t_step("a 256 MiB file written and synced, read back in a loop meanwhile")
    pre = os.path.join(m.mnt, "pre.bin")
    pre_digest = write_file(pre, 256 * MIB, seed=1)
    syncfs(m.mnt)
    src = os.path.join(env.shm_dir("src"), "src.bin")
    src_digest = write_file(src, 384 * MIB, seed=2)
    stop = threading.Event()
    reads = {"ok": 0, "bad": 0, "err": None}

    def reader():
        while not stop.is_set():
            try:
                d = t_sha256_file(pre)
            except OSError as e:
                reads["err"] = str(e)
                return
            reads["ok" if d == pre_digest else "bad"] += 1

    rth = threading.Thread(target=reader, daemon=True)
    rth.start()
    ctx.on_fail(stop.set)
    t_step("dd of 384 MiB into the mount while the cache is resized")
    dd = subprocess.Popen(["dd", "if=" + src, "of=" + os.path.join(m.mnt,
                                                                "dd.bin"),
                           "bs=1M", "conv=fsync", "status=none"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    ctx.on_fail(lambda: dd.poll() is None and dd.kill())
    dbench = shutil.which("dbench")
    db = None
    if dbench is None:
        t_log("dbench not installed: the resize runs beside dd and the "
              "reader only")
    else:
        os.mkdir(os.path.join(m.mnt, "db"))
        cmd = [dbench, "-D", os.path.join(m.mnt, "db"), "-t", "30"]
        for lf in ("/usr/share/dbench/client.txt",
                   "/usr/share/dbench4/client.txt"):
            if os.path.exists(lf):
                cmd += ["-c", lf]
                break
        cmd.append("4")
        t_log("$ " + " ".join(cmd) + " &")
        db = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        ctx.on_fail(lambda: db.poll() is None and db.kill())
    v0 = wbmem.vmstat_or_empty(m.mnt)
    cycles = 0
    lowest = None
    while cycles < 5 or (db and db.poll() is None) or dd.poll() is None:
        ctl_write(m, "cache_size", 64 * MIB)
        time.sleep(1.5)
        v = wbmem.vmstat_or_empty(m.mnt)
        r = v.get("cache_resident_pages")
        if r is not None:
            lowest = r if lowest is None else min(lowest, r)
        ctl_write(m, "cache_size", GIB)
        time.sleep(1.5)
        cycles += 1
        if cycles > 60:
            raise TFail("dd or dbench still running after 60 resize cycles")
    t_log("%d resize cycles; lowest resident %s pages" % (cycles, lowest))
    out, _ = dd.communicate(timeout=600)
    t_check(dd.returncode == 0, "dd exited %d: %s" % (dd.returncode, out))
    if db:
        out, _ = db.communicate(timeout=300)
        lines = out.splitlines()
        bad = [ln for ln in lines if "ERROR" in ln or "failed" in ln.lower()]
        t_check(db.returncode == 0 and not bad,
                "dbench exited %d:\n%s" % (db.returncode,
                                           "\n".join((bad or lines)[-20:])))
        t_log("dbench: " + next((ln.strip() for ln in lines
                                  if ln.startswith("Throughput")), "?"))
    stop.set()
    rth.join(600)
    t_step("every checksum holds: the reader's, dd's file, the synced file")
    t_check(reads["err"] is None, "reader: %s" % reads["err"])
    t_check(reads["bad"] == 0, "%d of %d reads of pre.bin had another "
            "checksum" % (reads["bad"], reads["ok"] + reads["bad"]))
    t_check(reads["ok"] > 0, "the reader never finished a pass")
    t_check(t_sha256_file(os.path.join(m.mnt, "dd.bin")) == src_digest,
            "dd.bin differs from its source")
    v1 = wbmem.vmstat_or_empty(m.mnt)
    t_step("the target changes and the returned pages were counted")
    for k in ("cache_target_changes", "pgreturned", "pgregrown"):
        t_check(k in v1, "vmstat has no %s" % k)
    changes = v1["cache_target_changes"] - v0.get("cache_target_changes", 0)
    t_log("cache_target_changes +%d, pgreturned +%d, pgregrown +%d" % (
        changes, v1["pgreturned"] - v0.get("pgreturned", 0),
        v1["pgregrown"] - v0.get("pgregrown", 0)))
    # every cut to 64M moves the target; a raise moves it only when no
    # pressure holds it lower meanwhile
    t_check(changes >= cycles, "%d target changes for %d cycles"
            % (changes, cycles))
    t_check(v1["pgreturned"] > v0.get("pgreturned", 0),
            "no page returned while shrunk to 64M")
    t_step("once the load is gone, a cut to 64M leaves at most 64M resident")
    ctl_write(m, "cache_size", 64 * MIB)
    end = time.monotonic() + 120
    while True:
        v = wbmem.vmstat_or_empty(m.mnt)
        if v["cache_resident_pages"] <= v["cache_target_pages"] and \
                v["cache_target_pages"] * PAGE <= 64 * MIB:
            break
        if time.monotonic() > end:
            t_log("vmstat: " + ", ".join("%s %s" % kv for kv in v.items()))
            t_dump_stacks(m.pid)
            raise TFail("120 s after the cut to 64M: resident %d, target %d "
                        "pages" % (v["cache_resident_pages"],
                                   v["cache_target_pages"]))
        time.sleep(0.2)
    t_log("resident %d pages, target %d" % (v["cache_resident_pages"],
                                            v["cache_target_pages"]))
    ctl_write(m, "cache_size", GIB)
    t_check(t_sha256_file(pre) == pre_digest, "pre.bin differs after regrowth")
    tr.stop()
    recs = [kv for _, ev, kv in wbtrace.parse(tr.path) if ev == "cache"]
    t_check(len(recs) >= cycles, "%d cache records in the trace for %d "
            "cycles" % (len(recs), cycles))
    man = t_manifest(m.mnt)
    env.umount(m, timeout=600)
    env.verify_after_umount(dev, man)


# --------------------------------------------------------------------------

class Ctx:
    """What one case made beyond env's own lists: its devices (detached and
    their images removed at the end, so cases do not add up on disk) and
    callables to run when it fails (stop its threads and children)."""

    def __init__(self, env, name):
        self.env, self.name = env, name
        self.devs = []
        self.fail_fns = []

    def fs(self, size):
        dev = self.env.new_fs(size, name="%s.img" % self.name)
        self.devs.append(dev)
        return dev

    def on_fail(self, fn):
        self.fail_fns.append(fn)

    def undo(self, failed, mounts_before, cgroups_before, undo_before):
        env = self.env
        if failed:
            for fn in reversed(self.fail_fns):
                try:
                    fn()
                except Exception as e:
                    print("cleanup: %s" % e, flush=True)
        for m in [m for m in env.mounts if m not in mounts_before][::-1]:
            env._undo_mount(m)
            env.mounts.remove(m)
        for cg in [c for c in env.cgroups if c not in cgroups_before][::-1]:
            cg.remove()
            env.cgroups.remove(cg)
        for fn in [f for f in env.undo if f not in undo_before][::-1]:
            fn()
            env.undo.remove(fn)
        for dev in self.devs:
            env.detach(dev)
        img = os.path.join(env.tmp, "%s.img" % self.name)
        if os.path.exists(img):
            os.unlink(img)


def body(env):
    want = [a for a in sys.argv[1:] if not a.startswith("-")] or \
        [c for c in os.environ.get("WBCFS_MEMORY_CASES", "").split(",") if c] \
        or list(CASES)
    for c in want:
        if c not in CASES:
            raise TFail("unknown case %r (cases: %s)" % (c, ", ".join(CASES)))
    results = {}
    for name in want:
        t_log("=== case %s ===" % name)
        ctx = Ctx(env, name)
        before = (list(env.mounts), list(env.cgroups), list(env.undo))
        failed = True
        try:
            if name in ("dirty", "clean", "swap"):
                if wbmem.cgroup_flavour() is None:
                    raise TSkip("no memory cgroup (cgroup v1 %s or v2 with "
                                "the memory controller)" % wbmem.V1_ROOT)
                avail = wbmem.mem_available()
                if avail < LIMIT + GIB:
                    raise TSkip("MemAvailable %d MiB: the %d MiB cgroup "
                                "needs %d MiB free on the machine" % (
                                    avail // MIB, LIMIT // MIB,
                                    (LIMIT + GIB) // MIB))
            if name == "swap":
                st = os.statvfs("/")
                if st.f_bavail * st.f_frsize < SWAP + GIB:
                    raise TSkip("under %d MiB free on / for the swap file"
                                % ((SWAP + GIB) // MIB))
            globals()["case_" + name](env, ctx)
            results[name] = "pass"
            failed = False
        except TSkip as e:
            results[name] = "skip (%s)" % e
            failed = False
        except TFail as e:
            results[name] = "FAIL: %s" % e
            print("FAIL case %s: %s" % (name, e), flush=True)
            for m in env.mounts:
                if m.proc and m not in before[0]:
                    print("--- wbcfs log (pid %s, %s) ---\n%s" % (
                        m.pid, "exited %s" % m.proc.poll()
                        if m.proc.poll() is not None else "running",
                        m.daemon_log()), flush=True)
        finally:
            ctx.undo(failed, *before)
        t_log("=== case %s: %s ===" % (name, results[name].split("\n")[0]))
    t_log("summary: " + "; ".join("%s %s" % (k, v.split("\n")[0])
                                  for k, v in results.items()))
    bad = [k for k, v in results.items() if v.startswith("FAIL")]
    if bad:
        raise TFail("case(s) failed: %s" % ", ".join(bad))
    if all(v.startswith("skip") for v in results.values()):
        raise TSkip("no case could run: " + "; ".join(results.values()))


if __name__ == "__main__":
    t_main("memory", body, deadline_s=1500)
