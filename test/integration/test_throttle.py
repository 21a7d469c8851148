#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""IO-less dirty throttling on a slow device (issue 4, point 9), short CI
version; bench/throttle runs it at full length.

A loop device is limited to 50 MB/s of writes by a blkio cgroup holding
the wbcfs daemon (cache_size=512M); the device's bandwidth through the
cgroup is measured first with dd oflag=direct and is the reference.
/.wbcfs/trace is recorded for the whole run.

(a) seed 003: one unlimited writer and three at 2, 4 and 8 MiB/s (128 KiB
    writes) for A_SECONDS.  Over the steady window [A_WARM, end-1) each
    rate-limited writer reaches >= 95% of its rate and the unlimited one
    gets >= 85% of what is left of the device's bandwidth.  "Never paused
    longer than min_pause": every bdp record of a rate-limited writer in
    the steady window has a pause no longer than the kernel's min_pause
    for the bdi's state at that time (10 ms + 10 ms per doubling of
    avg_write_bw / dirty_ratelimit, at most 1 + max_pause/2; computed from
    the latest bw record).  Records before the window (the controller
    converging from its initial ratelimit) are only reported.
(b) 1, 2, 10 and 100 unlimited writers (1 MiB writes, 64 KiB for 100 so
    each task makes enough of them), 3 seconds discarded (6 for 100), then an
    8 second window (24 for 100): per-task spread max/min <= 1.15, total >= 90%
    of the device's bandwidth, both from the writers' own accounting.
(c) the trace has bdp records of every writer of (a) and bw records, and
    tools/wbcfs-plot renders PNGs from it (skipped, with a log line, when
    the tool or gnuplot is missing).
Between experiments the mount is synced until no dirty or writeback page
is left.  Files are not deleted between experiments (each has its own
names on a sparse 8 GiB image): after an unlink, dirty pages lingered for
~30 s (dirty_expire) despite syncfs, which made the drains slow.  Finally: file sizes match what the writers wrote, unmount,
e2fsck -fn clean.

A wbcfs without the IO-less controller (no throttle= option) runs the
experiments and logs the figures, then skips (77).
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_main, t_log, t_step, t_check, t_run, t_wbcfs_bin,  # noqa: E402
                    TSkip, GIB, MIB)
import wbtrace  # noqa: E402
from wbtrace import mb  # noqa: E402

BPS = 50 * 1000 * 1000
A_SECONDS, A_WARM = 20, 6
# (writers, block size, seconds discarded first, window): 100 tasks take
# longer to settle (they start in one burst from the freerun point), and
# each makes only ~8 writes a second, so max/min over 100 of them needs a
# longer window to measure rates and not the phase of their writes
B_CASES = ((1, MIB, 3, 8), (2, MIB, 3, 8), (10, MIB, 3, 8), (100, 64 * 1024, 6, 24))
LIMITED = (2 * MIB, 4 * MIB, 8 * MIB)


def body(env):
    strict = wbtrace.wbcfs_has_ioless(t_wbcfs_bin())
    if not strict:
        t_log("this wbcfs has no throttle= option: figures are logged, "
              "not checked")
    failures = []

    def check(cond, msg):
        if cond:
            t_log("ok: " + msg)
        else:
            t_log(("FAILED: " if strict else "(not checked) ") + msg)
            failures.append(msg)

    img = env.image(8 * GIB)   # sparse; files are not deleted (see below)
    dev = env.loop(img)
    cg = env.blkio_cgroup()
    cg.write_bps(dev, BPS)
    t_step("device bandwidth through the cgroup")
    dev_bw = wbtrace.device_bw(dev, cg)
    t_check(0.5 * BPS < dev_bw < 1.2 * BPS,
            "the blkio limit of %d B/s does not hold: dd ran at %.1f MB/s"
            % (BPS, mb(dev_bw)))
    env.mkfs(dev)
    opts = ["cache_size=512M"] + (["throttle=ioless"] if strict else [])
    m = env.mount(dev, opts)
    cg.add(m.pid)
    t_check(m.pid in cg.pids(), "daemon %d not in cgroup %s" % (m.pid, cg.name))
    tr = wbtrace.TraceReader(m.mnt, os.path.join(env.tmp, "trace.txt"))
    d = os.path.join(m.mnt, "t")
    os.mkdir(d)
    try:
        # (a)
        t_step("(a) 1 unlimited + 2, 4, 8 MiB/s writers for %ds" % A_SECONDS)
        res_a, got = wbtrace.rates_experiment(d, [0] + list(LIMITED),
                                              128 * 1024, A_SECONDS, A_WARM)
        t_check(not any(w.get("error") for w in res_a["writers"]),
                "a writer failed: %r" % [w.get("error") for w in res_a["writers"]])
        for r, g in zip(LIMITED, got[1:]):
            check(g >= 0.95 * r, "(a) %.0f MiB/s writer got %.2f MB/s >= 95%% "
                  "of %.2f" % (r / MIB, mb(g), mb(r)))
        rest = dev_bw - sum(LIMITED)
        check(got[0] >= 0.85 * rest, "(a) unlimited writer got %.2f MB/s >= "
              "85%% of the remaining %.2f MB/s" % (mb(got[0]), mb(rest)))
        sizes = {w["file"]: w["bytes"] for w in res_a["writers"]}
        wbtrace.drain(m.mnt)
        for f, n in sizes.items():
            t_check(os.path.getsize(f) == n, "%s: size %d, writer wrote %d"
                    % (f, os.path.getsize(f), n))

        # (b)
        for n, bs, warm, window in B_CASES:
            t_step("(b) %d writers: spread <= 1.15, total >= 90%% of %.1f MB/s"
                   % (n, mb(dev_bw)))
            res, rates, total, spread = wbtrace.fairness_experiment(
                d, n, bs, warm, window)
            t_check(not any(w.get("error") for w in res["writers"]),
                    "a writer failed")
            check(spread <= 1.15, "(b) %d writers: spread %.3f <= 1.15"
                  % (n, spread))
            check(total >= 0.90 * dev_bw, "(b) %d writers: total %.2f MB/s "
                  ">= 90%% of %.2f" % (n, mb(total), mb(dev_bw)))
            wbtrace.drain(m.mnt)
    finally:
        tr.stop()

    # (c) + the trace side of (a)
    t_step("(c) the trace and the plots")
    if tr.active() or os.path.exists(tr.path):
        recs = wbtrace.parse(tr.path)
        s = wbtrace.summary(recs)
        t_log("trace: %d records %r, %d bdp (%d slept, max pause %s ms), "
              "%d lost" % (len(recs), s["events"], s["bdp"], s["slept"],
                           s["max_pause"], wbtrace.lost(recs)))
        _log_bw(recs)
        pids_a = {w["pid"] for w in res_a["writers"]}
        check(pids_a <= s["pids"], "(c) bdp records for every writer of (a) "
              "(missing %s)" % sorted(pids_a - s["pids"]))
        check(s["events"].get("bw", 0) > 0, "(c) bw records in the trace")
        limited = {w["pid"] for w in res_a["writers"] if w["rate"]}
        t0_ms = _trace_ms_of(recs, res_a)
        for lo, hi, strict_win in ((None, A_WARM, False),
                                   (A_WARM, A_SECONDS - 1, True)):
            bad, seen, maxp = wbtrace.pauses_over_min(
                recs, limited,
                0 if lo is None else t0_ms + lo * 1000, t0_ms + hi * 1000)
            what = "(a) rate-limited writers, %s: %d bdp records, max pause " \
                   "%s ms, %d over min_pause%s" % (
                       "steady window" if strict_win else "warm-up",
                       seen, maxp, len(bad),
                       "".join("\n    t=%dms pid %s pause %s > %d: dirty %s "
                               "limit %s task_ratelimit %s dirty_ratelimit %s"
                               % (ms, kv.get("pid"), kv.get("pause"), b,
                                  kv.get("dirty"), kv.get("limit"),
                                  kv.get("task_ratelimit"),
                                  kv.get("dirty_ratelimit"))
                               for ms, kv, b in bad[:3]))
            if strict_win:
                check(seen > 0 and not bad, what)
            else:
                t_log(what)
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "..", "tools", "wbcfs-plot")
        if not os.path.exists(plot):
            t_log("tools/wbcfs-plot not in this tree: plots not checked")
        elif not shutil.which("gnuplot"):
            t_log("gnuplot not installed: plots not checked")
        else:
            out = os.path.join(env.tmp, "plots")
            t_run([plot, tr.path, out], timeout=120)
            pngs = [f for f in os.listdir(out) if f.endswith(".png")]
            good = [f for f in pngs
                    if open(os.path.join(out, f), "rb").read(8) == b"\x89PNG\r\n\x1a\n"]
            check(len(pngs) >= 5 and len(good) == len(pngs),
                  "(c) wbcfs-plot made %d PNGs (%d valid): %s"
                  % (len(pngs), len(good), sorted(pngs)))
    else:
        t_log("no trace recorded")
        failures.append("no trace")

    env.umount(m)
    env.fsck(dev)
    if failures and strict:
        t_check(False, "%d check(s) failed:\n  %s" % (len(failures),
                                                     "\n  ".join(failures)))
    if not strict:
        raise TSkip("no IO-less throttling in this wbcfs (figures above)")


def _log_bw(recs, every_ms=2000):
    """The bdi's bandwidth and ratelimits about every 2 s, for the log."""
    t_log("bw records: ms write_bw avg_write_bw dirty_ratelimit "
          "balanced_dirty_ratelimit (KB/s) nr_dirty thresh limit (pages)")
    last = None
    for ms, ev, kv in recs:
        if ev == "bw" and (last is None or ms - last >= every_ms):
            last = ms
            t_log("  %6d %6s %6s %6s %6s %6s %6s %6s" % (
                ms, kv.get("write_bw"), kv.get("avg_write_bw"),
                kv.get("dirty_ratelimit"), kv.get("balanced_dirty_ratelimit"),
                kv.get("nr_dirty"), kv.get("thresh"), kv.get("limit")))


def _trace_ms_of(recs, res):
    """The trace time (ms since mount) of the writers' t0: the first bdp
    record of an (a) writer is at most a moment after t0."""
    pids = {w["pid"] for w in res["writers"]}
    for ms, ev, kv in recs:
        if ev == "bdp" and kv.get("pid") in pids:
            return ms
    return 0


if __name__ == "__main__":
    t_main("throttle", body, deadline_s=290)
