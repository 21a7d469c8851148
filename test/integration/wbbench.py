# SPDX-License-Identifier: GPL-2.0-or-later
"""What the benchmarks under bench/ share (Python 3 stdlib only): building
the daemon, the slow device (a loop device whose writes a blkio cgroup
holding the daemon limits, its bandwidth measured first), fresh mounts,
counter snapshots (vmstat and the daemon's cpu), the report and the
before/after tables in the form `before +x.x% after case` with TOTAL rows.

Everything is created through a wbtest.T_Env, so t_main() undoes it on
exit, failure or Ctrl-C.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import wbtest
from wbtest import t_main, t_run, t_log, GIB, MIB
import wbtrace
from wbtrace import mb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
BPS = 50 * 1000 * 1000


def build():
    """The daemon to run: WBCFS_BIN, or build/wbcfs rebuilt now."""
    if os.environ.get("WBCFS_BIN"):
        return os.environ["WBCFS_BIN"]
    b = os.path.join(ROOT, "build")
    if not os.path.isdir(b):
        t_run(["meson", "setup", b], timeout=600)
    t_run(["meson", "compile", "-C", b], timeout=1800)
    os.environ["WBCFS_BIN"] = os.path.join(b, "wbcfs")
    return os.environ["WBCFS_BIN"]


def default_out(kind):
    return os.path.join(ROOT, "bench", "out-%s-%s"
                        % (kind, time.strftime("%Y%m%d-%H%M%S")))


def parser(doc):
    """A bench's argument parser: its description the first paragraph of
    doc (the bench's docstring), --help printing the whole as written."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)


def add_bps(ap):
    """--bps: the blkio cgroup's write limit (Bench's args.bps)."""
    ap.add_argument("--bps", type=int, default=BPS,
                    help="blkio write limit, bytes/s [%d]" % BPS)


def add_out(ap, kind):
    """--out: the output directory, bench/out-KIND-DATE unless given
    (set by parse)."""
    ap.add_argument("--out", default=None,
                    help="output dir [bench/out-%s-DATE]" % kind)


def parse(ap, kind):
    """ap's arguments, with --out's default (add_out) and, for a bench
    with --only, its experiments as a set."""
    a = ap.parse_args()
    if getattr(a, "only", None) is not None:
        a.only = set(a.only.split(","))
    a.out = a.out or default_out(kind)
    return a


def experiments(b, only, steps):
    """Run b's steps ((key, method), in order) whose key is in only; then,
    even on failure, b.close() when it has one and b.finish() (the report)."""
    try:
        for key, step in steps:
            if key in only:
                step()
    finally:
        if hasattr(b, "close"):
            b.close()
        b.finish()


class Snap:
    """vmstat, the daemon's cpu (user, system seconds) and the time, taken
    together; `b - a` gives the deltas."""

    def __init__(self, m):
        self.v = wbtrace.vmstat(m.mnt)
        self.cpu = wbtrace.daemon_cpu(m.pid)
        self.t = time.monotonic()

    def __sub__(self, a):
        keys = set(self.v) | set(a.v)
        return {"dt": self.t - a.t,
                "cpu_user": self.cpu[0] - a.cpu[0],
                "cpu_system": self.cpu[1] - a.cpu[1],
                "v": {k: self.v.get(k, 0) - a.v.get(k, 0) for k in keys}}


class Report:
    """A benchmark run's output directory (args.out) and its report: the
    lines printed by out(), written to OUT/report.txt at finish()."""

    def __init__(self, env, args):
        self.env, self.a = env, args
        os.makedirs(args.out, exist_ok=True)
        self.report = []        # lines for OUT/report.txt

    def out(self, line=""):
        print(line, flush=True)
        self.report.append(line)

    def save(self, name, obj):
        with open(os.path.join(self.a.out, name), "w") as f:
            json.dump(obj, f, indent=1)

    def finish(self):
        with open(os.path.join(self.a.out, "report.txt"), "w") as f:
            f.write("\n".join(self.report) + "\n")
        print("results in %s" % self.a.out, flush=True)


class Bench(Report):
    """One benchmark run on a slow device: the loop device (img_size,
    sparse) and its blkio cgroup limited to bps bytes/s of writes, the
    device's bandwidth through it, and the report (Report)."""

    def __init__(self, env, args, img_size=8 * GIB):
        super().__init__(env, args)
        img = env.image(img_size)
        self.dev = env.loop(img)
        self.cg = env.blkio_cgroup()
        self.cg.write_bps(self.dev, args.bps)
        self.dev_bw = wbtrace.device_bw(self.dev, self.cg, 200 * MIB)

    def mount(self, opts, mkfs=True, subdir="t"):
        """(mkfs and) mount with opts, the daemon in the cgroup; returns
        (mount, MNT/subdir created, or None)."""
        if mkfs:
            self.env.mkfs(self.dev)
        m = self.env.mount(self.dev, opts)
        self.cg.add(m.pid)
        d = None
        if subdir:
            d = os.path.join(m.mnt, subdir)
            os.mkdir(d)
        return m, d

    def umount(self, m):
        self.env.umount(m, timeout=600)

    def compare(self, get, cases, keys, before, after, unit):
        """The TOTAL rows of every key, then one table per key: `before
        +x.x% after case`.  get(side, case, key) is a number or None (a
        case that did not run); unit(key) names the unit of a table."""
        head = "%24s  %10s  %12s" % (before, "", after)
        dash = "%24s  %10s  %12s" % ("-" * 24, "", "-" * 12)

        def row(b, af, label):
            if b is None or af is None:
                return "%24s  %10s  %12s  %s" % (
                    "%.2f" % b if b is not None else "-", "",
                    "%.2f" % af if af is not None else "-", label)
            pct = "%+.1f%%" % (100 * (af - b) / b) if b else ""
            return "%24.2f  %10s  %12.2f  %s" % (b, pct, af, label)

        def total(side, k):
            vals = [get(side, c, k) for c in cases]
            return sum(vals) if None not in vals else None
        self.out(head)
        self.out(dash)
        for k in keys:
            self.out(row(total(0, k), total(1, k), "TOTAL " + k))
        for k in keys:
            self.out("\n%s (%s)" % (k, unit(k)))
            self.out(head)
            self.out(dash)
            for c in cases:
                self.out(row(get(0, c, k), get(1, c, k), c))


def kernel_fill(env, dev, files, bs=1 << 20):
    """Write files ({relative path: bytes}) through the kernel's ext4
    (mount -t ext4, dd of zeros, fsync, umount): data that is on the disk
    before wbcfs mounts it."""
    mnt = env.mkdir("kfill")
    t_run(["mount", "-t", "ext4", dev, mnt])
    m = wbtest.Mount(mnt, dev, "kernel")
    env.mounts.append(m)
    try:
        for rel, size in sorted(files.items()):
            p = os.path.join(mnt, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            t_run(["dd", "if=/dev/zero", "of=" + p, "bs=%d" % bs,
                   "count=%d" % (size // bs), "conv=fsync", "status=none"],
                  timeout=1800, quiet=True)
    finally:
        env.umount(m)
    t_log("kernel ext4 wrote %d file(s), %.0f MB" % (
        len(files), mb(sum(files.values()))))


def cat(paths):
    """Read files whole (cat > /dev/null); returns seconds."""
    t0 = time.monotonic()
    subprocess.run(["cat"] + list(paths), stdout=subprocess.DEVNULL,
                   check=True)
    return time.monotonic() - t0


def main(prog, body, args, deadline_s=6 * 3600):
    """Root check, cd to the tree, build, then body(env) under t_main."""
    if os.geteuid() != 0:
        sys.exit("%s: needs root" % prog)
    os.chdir(ROOT)
    build()
    t_main(prog.replace("/", "-"), body, deadline_s=deadline_s)
