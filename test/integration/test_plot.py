#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""tools/wbcfs-plot on synthetic throttle and cache traces; needs no root,
no mount. A full trace of 3 tasks (with a lost line, a malformed line, a
second bdi and the cache's records) gives the 6 PNGs; a trace of bw or
bdp records only gives the graphs it can and names the others; a trace of
cache records only (a cache shrunk under pressure and grown back, one
record malformed, one without its optional fields) gives cache.png alone,
its title counting the falls and rises by reason, pressure on a second
axis; 20 tasks cap the legend; an empty trace, a
missing file and a missing gnuplot exit 1 with a message. Exits 77 (skip)
without gnuplot.

    WBCFS_PLOT=tools/wbcfs-plot test/integration/test_plot.py
"""

import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.environ.get("WBCFS_PLOT") or \
    os.path.join(HERE, "..", "..", "tools", "wbcfs-plot")
PNGS = ("dirtied.png", "pause.png", "dirtied-written.png", "dirty.png",
        "ratelimit.png", "cache.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 4096    # an empty frame with axes is already more

failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1
    return cond


def synth(nr_pids=3, seconds=20, bdp=True, bw=True, bdi="7:0"):
    """Lines of a trace like a mount where @nr_pids dd's write while
    writeback runs at ~40 MB/s: a bdp record per task every ~200 ms, a
    bw record every 200 ms."""
    rnd = random.Random(42)
    lines = []
    limit, thresh, bg = 25600, 20480, 10240        # pages: 100/80/40 MB
    setpoint = (thresh + limit) // 2
    dirtied = written = 0
    dirty = 0
    pids = [1000 + i for i in range(nr_pids)]
    for step in range(seconds * 5):
        ms = 1000 + step * 200
        rate = 40 * 256                             # pages/s written
        per_task = 2 * rate // nr_pids              # dirtying at 2x
        written += rate // 5
        dirtied += 2 * rate // 5
        dirty = min(limit, max(0, dirtied - written))
        wr_kbps = 40 * 1024 + rnd.randint(-2000, 2000)
        ratelimit = max(1024, 40 * 1024 // nr_pids + rnd.randint(-500, 500))
        if bdp:
            for i, pid in enumerate(pids):
                pause = rnd.choice((-5, 0, 10, 40, 120, 200)) \
                    if dirty > bg else -rnd.randint(0, 20)
                lines.append(
                    "%d balance_dirty_pages bdi=%s limit=%d setpoint=%d dirty=%d "
                    "bdi_setpoint=%d bdi_dirty=%d dirty_ratelimit=%d "
                    "task_ratelimit=%d dirtied=%d dirtied_pause=%d paused=%d "
                    "pause=%d period=%d think=%d pid=%d" % (
                        ms + i * 7, bdi, limit, setpoint, dirty,
                        setpoint - 100, dirty - 50, ratelimit,
                        ratelimit + rnd.randint(-300, 300),
                        per_task // 5 * (i + 1) // 2, 32,
                        rnd.choice((0, 0, 5)), pause, max(pause, 0) + 10,
                        rnd.randint(0, 10), pid))
        if bw:
            lines.append(
                "%d bw bdi=%s write_bw=%d avg_write_bw=%d dirty_rate=%d "
                "dirty_ratelimit=%d task_ratelimit=%d "
                "balanced_dirty_ratelimit=%d dirtied=%d written=%d "
                "nr_dirty=%d nr_writeback=%d bg_thresh=%d thresh=%d limit=%d"
                % (ms + 100, bdi, wr_kbps, 40 * 1024, 80 * 1024, ratelimit,
                   ratelimit, ratelimit + rnd.randint(-800, 800),
                   100000 + dirtied, 90000 + written, dirty * 3 // 4,
                   dirty // 4, bg, thresh, limit))
    return lines


def synth_cache(seconds=40, t0_ms=500):
    """Cache records of a 2 GiB cache (pages) that grows on demand, is cut
    three times by a cgroup deficit and once by a PSI event from second 10,
    then grows back by 1/32 of the ceiling a second after 5 s of quiet."""
    ceiling, floor = 524288, 8192
    lines = []
    target, resident = ceiling, 0

    def rec(ms, reason, pressure):
        lines.append("%d cache target=%d resident=%d ceiling=%d floor=%d "
                     "free=%d dirty=%d reason=%s pressure=%d" % (
                         ms, target, resident, ceiling, floor,
                         max(0, target - resident), min(resident, 76800),
                         reason, pressure))
    rec(t0_ms, "init", 0)
    for step in range(1, seconds * 2):
        ms = t0_ms + step * 500
        resident = min(target, resident + 20000)
        if step in (20, 21, 22):
            cut = 120000
            target = max(floor, min(target, resident) - cut)
            resident = target
            rec(ms, "cgroup", cut)
        elif step == 24:
            cut = target // 4
            target -= cut
            resident = target
            rec(ms, "psi", cut)
        elif step > 34 and target < ceiling:
            target = min(ceiling, target + ceiling // 64)
            rec(ms, "grow", 0)
    return lines


def run(args, env=None):
    p = subprocess.run([sys.executable, PLOT] + args, capture_output=True,
                       text=True, env=env, timeout=60)
    return p.returncode, p.stdout, p.stderr


def png_ok(path):
    """A PNG file of 1000x600 (the IHDR chunk right after the magic)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
        size = os.path.getsize(path)
    except OSError:
        return False
    if head[:8] != PNG_MAGIC or head[12:16] != b"IHDR":
        return False
    w, h = struct.unpack(">II", head[16:24])
    return (w, h) == (1000, 600) and size >= MIN_PNG_BYTES


def write_trace(tmp, name, lines):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    return path


def t_full(tmp):
    lines = synth()
    lines.insert(50, "4321 lost count=17")
    lines.insert(80, "garbage that is no record")
    lines.insert(90, "4400 balance_dirty_pages bdi=7:0 pid=12")          # fields missing
    lines.append(synth(nr_pids=1, seconds=1, bdi="8:16")[0])
    lines += synth_cache(seconds=20)
    lines.sort(key=lambda ln: int(ln.split()[0]) if ln.split()[0].isdigit()
               else 0)
    trace = write_trace(tmp, "full.txt", lines)
    out = os.path.join(tmp, "full")
    rc, so, se = run([trace, out])
    check(rc == 0, "full trace: exit 0 (rc=%d, stderr=%r)" % (rc, se))
    for name in PNGS:
        path = os.path.join(out, name)
        check(png_ok(path), "full trace: %s is a 1000x600 PNG of >= %d bytes"
              % (name, MIN_PNG_BYTES))
        check(path in so.split("\n"), "full trace: %s listed" % name)
    check("17 records lost" in se, "full trace: lost records noted")
    check("2 malformed lines" in se, "full trace: malformed lines counted")
    check("bdi 8:16 skipped" in se, "full trace: second bdi noted")
    check("wbcfs-plot: skipped " not in se,
          "full trace: no graph skipped")


def t_one_kind(tmp):
    for kind, want in (("bw", {"dirtied-written.png", "dirty.png",
                               "ratelimit.png"}),
                       ("bdp", {"dirtied.png", "pause.png", "dirty.png",
                                "ratelimit.png"})):
        trace = write_trace(tmp, kind + ".txt",
                            synth(bdp=kind == "bdp", bw=kind == "bw"))
        out = os.path.join(tmp, kind)
        rc, so, se = run([trace, out])
        check(rc == 0, "%s only: exit 0 (rc=%d, stderr=%r)" % (kind, rc, se))
        made = set(os.listdir(out)) if os.path.isdir(out) else set()
        check(made == want, "%s only: made %s" % (kind, sorted(made)))
        for name in set(PNGS) - want:
            check("skipped " + name in se, "%s only: %s skip named"
                  % (kind, name))
        check(all(png_ok(os.path.join(out, n)) for n in want),
              "%s only: valid PNGs" % kind)


def t_cache_only(tmp):
    lines = synth_cache()
    lines.insert(5, "3100 cache target=12 resident=zz ceiling=1 floor=1")
    # cache_size written down at run time; no free, dirty or pressure
    lines.append("%d cache target=100000 resident=390000 ceiling=100000 "
                 "floor=8192 reason=set" % (int(lines[-1].split()[0]) + 500))
    trace = write_trace(tmp, "cache.txt", lines)
    out = os.path.join(tmp, "cache")
    rc, so, se = run(["--keep-data", trace, out])
    check(rc == 0, "cache only: exit 0 (rc=%d, stderr=%r)" % (rc, se))
    check(png_ok(os.path.join(out, "cache.png")),
          "cache only: cache.png is a 1000x600 PNG")
    made = set(n for n in os.listdir(out) if n.endswith(".png")) \
        if os.path.isdir(out) else set()
    check(made == {"cache.png"}, "cache only: made %s" % sorted(made))
    for name in set(PNGS) - {"cache.png"}:
        check("skipped " + name in se, "cache only: %s skip named" % name)
    check("1 malformed lines" in se, "cache only: the bad record counted")
    check(("%d cache records" % (len(lines) - 1)) in so,
          "cache only: records counted (%r)" % so.splitlines()[:1])
    try:
        with open(os.path.join(out, "cache.gp")) as f:
            gp = f.read()
    except OSError:
        gp = ""
    check("axes x1y2" in gp and "set y2label" in gp,
          "cache only: pressure drawn on the second axis")
    for t in ("target", "resident", "ceiling", "floor", "dirty"):
        check("title '%s'" % t in gp, "cache only: %s drawn" % t)
    check("falls: cgroup 3, psi 1, set 1; rises: grow " in gp,
          "cache only: the title counts falls and rises by reason")


def t_many_tasks(tmp):
    trace = write_trace(tmp, "many.txt", synth(nr_pids=20, seconds=5))
    out = os.path.join(tmp, "many")
    rc, so, se = run(["--keep-data", trace, out])
    check(rc == 0, "20 tasks: exit 0 (rc=%d, stderr=%r)" % (rc, se))
    check(png_ok(os.path.join(out, "dirtied.png")), "20 tasks: dirtied.png")
    try:
        with open(os.path.join(out, "dirtied.gp")) as f:
            gp = f.read()
    except OSError:
        gp = ""
    check(gp.count("title 'pid ") == 12 and "20 tasks" in gp,
          "20 tasks: 12 named in the legend, title says 20 tasks")
    # the kept script draws again from OUTDIR
    os.unlink(os.path.join(out, "dirtied.png"))
    p = subprocess.run(["gnuplot", "dirtied.gp"], cwd=out,
                       capture_output=True, text=True)
    check(p.returncode == 0 and png_ok(os.path.join(out, "dirtied.png")),
          "20 tasks: kept dirtied.gp redraws (%r)" % p.stderr)


def t_errors(tmp):
    empty = write_trace(tmp, "empty.txt", [])
    rc, so, se = run([empty, os.path.join(tmp, "e")])
    check(rc == 1 and
          se.startswith("wbcfs-plot: no bdp, bw or cache records"),
          "empty trace: exit 1 with a message (rc=%d, %r)" % (rc, se))
    rc, so, se = run([os.path.join(tmp, "nope.txt"), os.path.join(tmp, "n")])
    check(rc == 1 and se.startswith("wbcfs-plot: cannot read"),
          "missing trace: exit 1 with a message (rc=%d, %r)" % (rc, se))
    trace = write_trace(tmp, "ok.txt", synth(seconds=2))
    nobin = os.path.join(tmp, "nobin")
    os.mkdir(nobin)
    rc, so, se = run([trace, os.path.join(tmp, "g")],
                     env=dict(os.environ, PATH=nobin))
    check(rc == 1 and se.startswith("wbcfs-plot: gnuplot not found"),
          "no gnuplot: exit 1 with a message (rc=%d, %r)" % (rc, se))
    rc, so, se = run(["--help"])
    check(rc == 0 and "TRACE OUTDIR" in so, "--help: usage, exit 0")


def main():
    if not shutil.which("gnuplot"):
        print("SKIP: gnuplot not installed (apt-get install gnuplot-nox)")
        return 77
    if not os.path.isfile(PLOT):
        print("FAIL: %s not found" % PLOT)
        return 1
    with tempfile.TemporaryDirectory(prefix="wbcfs-test-plot.") as tmp:
        for t in (t_full, t_one_kind, t_cache_only, t_many_tasks,
                  t_errors):
            t(tmp)
    print("%d failed" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
