# SPDX-License-Identifier: GPL-2.0-or-later
"""Reading /.wbcfs/trace and running the dirty-throttling experiments
(issue 4, points 9 and 10), shared by test_throttle.py and bench/throttle;
reading /.wbcfs/zoneinfo and sampling it (test_zones.py, bench/zones).
Python 3 stdlib only.

Trace lines: `<ms> <event> key=value ...` (see the throttle spec):
  balance_dirty_pages  one decision of task pid (pause <= 0: no sleep),
       named as the kernel's tracepoint; `bdp` in what parse() returns
       (and the name older traces used)
  bw   one bandwidth / ratelimit update of the bdi
  lost count=N records dropped by a slow reader
"""

import os
import subprocess
import threading
import time

from wbtest import t_log, t_run, t_check, TFail, MIB
import twriter

HZ_MS = 1000        # the trace's pauses are in ms: jiffies with HZ=1000


def parse(path):
    """[(ms, event, {key: int or str})] of a trace file; malformed lines
    (a record cut by the kill of the reader) are skipped."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or not parts[0].isdigit():
                continue
            kv = {}
            for p in parts[2:]:
                k, sep, v = p.partition("=")
                if not sep:
                    continue
                try:
                    kv[k] = int(v)
                except ValueError:
                    kv[k] = v
            ev = "bdp" if parts[1] == "balance_dirty_pages" else parts[1]
            out.append((int(parts[0]), ev, kv))
    return out


def ilog2(x):
    return int(x).bit_length() - 1 if x >= 1 else 0


def min_pause_ms(avg_write_bw, dirty_ratelimit, max_pause_ms=200):
    """Upper bound of the kernel's min_pause (wb_min_pause) for a bdi whose
    avg_write_bw and dirty_ratelimit are as given (any one unit): 10 ms,
    plus 10 ms per doubling of concurrency, capped at 1 + max_pause/2.  The
    kernel halves it when the poll interval is large; the bound keeps the
    larger value."""
    t = max(1, HZ_MS // 100)
    hi, lo = ilog2(avg_write_bw), ilog2(dirty_ratelimit)
    if hi > lo:
        t += (hi - lo) * (10 * HZ_MS) // 1024
    return min(t, 1 + max_pause_ms // 2)


def pauses_over_min(recs, pids, t_from_ms=0, t_to_ms=None, max_pause_ms=200,
                    write_pages=0):
    """bdp records of `pids` in [t_from_ms, t_to_ms) whose pause exceeds
    the min_pause bound computed from the bdi's latest bw record;
    returns (bad records, number of records seen, max pause seen).
    The bound is stretched by dirty_ratelimit / task_ratelimit when the
    task's rate is below the bdi's (dirty above the setpoint), as the
    kernel's pause for nr_dirtied_pause pages is.
    A task is looked at once it has dirtied its dirtied_pause pages, but
    only at the end of a write: with writes of write_pages pages, up to
    write_pages - 1 more pages are paid for at task_ratelimit (KB/s) on
    top of the bound, as the kernel's tasks pay for the pages of their
    last write_begin beyond nr_dirtied_pause."""
    last_bw = None
    sized = {}      # pid: (min_pause bound, dirty_ratelimit) at its last decision
    bad, seen, maxp = [], 0, None
    for ms, ev, kv in recs:
        if ev == "bw":
            last_bw = kv
            continue
        if ev != "bdp" or kv.get("pid") not in pids:
            continue
        if last_bw:
            bound = min_pause_ms(last_bw.get("avg_write_bw", 1),
                                 last_bw.get("dirty_ratelimit", 1),
                                 max_pause_ms)
        else:
            bound = 1 + max_pause_ms // 2
        trl, drl = kv.get("task_ratelimit", 0), kv.get("dirty_ratelimit", 0)
        # nr_dirtied_pause was sized at the task's previous decision, for
        # that decision's min_pause at that decision's dirty_ratelimit; a
        # bw update since may have lowered both
        prev_bound, prev_drl = sized.get(kv.get("pid"), (bound, drl))
        sized[kv.get("pid")] = (bound, drl)
        if ms < t_from_ms or (t_to_ms is not None and ms >= t_to_ms):
            continue
        seen += 1
        p = kv.get("pause", 0)
        maxp = p if maxp is None else max(maxp, p)
        bound, drl = max(bound, prev_bound), max(drl, prev_drl)
        # and the task pays for those pages at task_ratelimit: above the
        # setpoint (pos_ratio < 1) the same pages take longer
        # (wb_min_pause: pause = HZ * pages / task_ratelimit)
        if 0 < trl < drl:
            bound = min(-(-bound * drl // trl), max_pause_ms)
        bound += 1      # the pause is whole ms, the period is not
        over = min(kv.get("dirtied", 0) - kv.get("dirtied_pause", 0), write_pages - 1)
        if over > 0 and kv.get("task_ratelimit", 0) > 0:
            bound += -(-over * 4 * 1000 // kv["task_ratelimit"])   # ms, rounded up
        if p > bound:
            bad.append((ms, kv, bound))
    return bad, seen, maxp


def lost(recs):
    return sum(kv.get("count", 0) for _, ev, kv in recs if ev == "lost")


def summary(recs):
    """Counts by event, pids seen in bdp records, pause stats."""
    ev = {}
    pids = set()
    pauses = []
    for _, e, kv in recs:
        ev[e] = ev.get(e, 0) + 1
        if e == "bdp":
            pids.add(kv.get("pid"))
            pauses.append(kv.get("pause", 0))
    slept = [p for p in pauses if p > 0]
    return {"events": ev, "pids": pids, "bdp": len(pauses),
            "slept": len(slept), "max_pause": max(pauses) if pauses else None}


class TraceReader:
    """`cat MNT/.wbcfs/trace > file` in the background (a read of the
    trace blocks like trace_pipe).  stop() kills it; it must be stopped
    before the unmount, or the mount is busy."""

    def __init__(self, mnt, path, ctl=".wbcfs"):
        self.path = path
        self.src = os.path.join(mnt, ctl, "trace")
        self.proc = None
        if not os.path.exists(self.src):
            t_log("no %s in this wbcfs: trace not recorded" % self.src)
            return
        self.f = open(path, "w")
        self.proc = subprocess.Popen(["cat", self.src], stdout=self.f,
                                     stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        self.f.close()
        t_log("recording %s into %s (cat pid %d)" % (self.src, path,
                                                    self.proc.pid))

    def active(self):
        return self.proc is not None

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        t_log("trace reader stopped: %d bytes in %s"
              % (os.path.getsize(self.path), self.path))
        self.proc = None


# --------------------------------------------------------------------------
# experiment helpers

def vmstat(mnt, ctl=".wbcfs"):
    out = {}
    with open(os.path.join(mnt, ctl, "vmstat")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            try:
                out[k] = int(v)
            except ValueError:
                pass
    return out


def bdi(mnt, ctl=".wbcfs"):
    """{key: int} of the device's bdi file (`state` read as hex; the kB
    and ms units dropped)."""
    out = {}
    with open(os.path.join(mnt, ctl, "bdi")) as f:
        for line in f:
            k, _, v = line.partition(":")
            k, v = k.strip(), v.split()
            if v:
                out[k] = int(v[0], 16 if k == "state" else 10)
    return out


def parse_zoneinfo(text):
    """[{key: int}] of a zoneinfo text, one dict per `Zone N` block (its
    "zone" key is N); a key is every word of a line but the last, white
    space folded ("pages free", "nr_dirty", ...)."""
    zones = []
    for line in text.splitlines():
        w = line.split()
        if len(w) == 2 and w[0] == "Zone":
            zones.append({"zone": int(w[1])})
        elif len(w) >= 2 and zones:
            try:
                zones[-1][" ".join(w[:-1])] = int(w[-1])
            except ValueError:
                pass
    return zones


def zoneinfo(mnt, ctl=".wbcfs"):
    with open(os.path.join(mnt, ctl, "zoneinfo")) as f:
        return parse_zoneinfo(f.read())


class ZoneSampler:
    """Reads MNT/.wbcfs/zoneinfo (and vmstat) every `interval` seconds in
    a thread until stop(); samples is [(seconds since start, zones,
    vmstat)].  A read that fails (the mount going away) ends it."""

    def __init__(self, mnt, interval, with_vmstat=False):
        self.mnt, self.interval = mnt, interval
        self.with_vmstat = with_vmstat
        self.samples = []
        self.error = None
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._th = threading.Thread(target=self._run, daemon=True)
        self._th.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                z = zoneinfo(self.mnt)
                v = vmstat(self.mnt) if self.with_vmstat else None
            except OSError as e:
                self.error = str(e)
                return
            self.samples.append((time.monotonic() - self._t0, z, v))
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._th.join(30)
        return self.samples


def drain(mnt, timeout=120):
    """syncfs the mount and wait until it has no dirty and no writeback
    pages, so the next experiment starts from an empty dirty pool."""
    t0 = time.monotonic()
    t_run(["sync", "-f", mnt], timeout=timeout, quiet=True)
    while True:
        v = vmstat(mnt)
        if v.get("nr_dirty", 0) == 0 and v.get("nr_writeback", 0) == 0:
            break
        if time.monotonic() - t0 > timeout:
            raise TFail("dirty pages did not drain in %ds: %r" % (timeout, v))
        time.sleep(0.1)
    t_log("drained in %.1fs" % (time.monotonic() - t0))


def clear_dir(d):
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))


def device_bw(dev, cg, nbytes=100 * MIB):
    """Bytes/s of `dd oflag=direct` of nbytes to the raw device from inside
    blkio cgroup cg (destroys the device's contents)."""
    cnt = nbytes // MIB
    t0 = time.monotonic()
    p = subprocess.run(["dd", "if=/dev/zero", "of=" + dev, "bs=1M",
                        "count=%d" % cnt, "oflag=direct"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, preexec_fn=cg.preexec())
    dt = time.monotonic() - t0
    t_check(p.returncode == 0, "dd to %s: %s" % (dev, p.stdout))
    bw = cnt * MIB / dt
    t_log("device %s through the cgroup: %.1f MB/s (dd oflag=direct %d MiB)"
          % (dev, bw / 1e6, cnt))
    return bw


def mb(x):
    return x / 1e6


def rates_experiment(d, rates, bs, seconds, warm, prefix="r"):
    """Seed 003: writers at `rates` (0 = unlimited) for `seconds`; returns
    (twriter result, per-writer rate over [warm, seconds-1))."""
    res = twriter.run(d, rates, bs, seconds, prefix=prefix)
    win = (warm, int(seconds) - 1)
    got = [twriter.window_rate(w, *win) for w in res["writers"]]
    for w, g in zip(res["writers"], got):
        t_log("  pid %-7s rate %-10s got %6.2f MB/s over [%d,%d)s, "
              "max write latency %.1f ms%s"
              % (w["pid"], "unlimited" if not w["rate"] else
                 "%.2f MB/s" % mb(w["rate"]), mb(g), win[0], win[1],
                 w["lat_max_ms"], " ERROR " + w["error"] if w.get("error") else ""))
    return res, got


def fairness_experiment(d, n, bs, warm, window, prefix=None):
    """n unlimited writers for warm+window seconds, files PREFIX<i> (default
    f<n>-); returns (twriter result, per-task rates over the window, total,
    spread)."""
    res = twriter.run(d, [0] * n, bs, warm + window + 1,
                      prefix=prefix or "f%d-" % n)
    got = [twriter.window_rate(w, warm, warm + window)
           for w in res["writers"]]
    total = sum(got)
    spread = max(got) / min(got) if min(got) > 0 else float("inf")
    errs = [w["error"] for w in res["writers"] if w.get("error")]
    t_log("  %d writers, bs %d KiB: total %.2f MB/s, per task min %.3f "
          "max %.3f MB/s, spread %.3f, max write latency %.1f ms%s"
          % (n, bs // 1024, mb(total), mb(min(got)), mb(max(got)), spread,
             max(w["lat_max_ms"] for w in res["writers"]),
             " ERRORS %s" % errs[:3] if errs else ""))
    return res, got, total, spread


def daemon_cpu(pid):
    """(user, system) seconds of a process from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def wbcfs_has_ioless(binp):
    """Does this wbcfs know throttle=ioless|simple (issue 4)?"""
    p = subprocess.run([binp, "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return "throttle=" in p.stdout
