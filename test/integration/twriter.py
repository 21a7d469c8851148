#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""twriter: N concurrent writers with per-task accounting, for the dirty
throttling tests and bench/throttle (Python 3 stdlib only).

Each writer is a forked, single-threaded process (so its pid is the thread
id the FUSE request carries, the "task" the throttle sees).  It writes its
own file DIR/PREFIX<i> sequentially in blocks of BS bytes, either as fast as
write(2) returns or at a fixed rate (token bucket: a block is written when
the writer's budget allows it; a writer that fell behind may catch up for at
most half a second).  All writers start together at a common CLOCK_MONOTONIC
instant and stop SECONDS later (or on SIGINT/SIGTERM).  Every write's
completion is booked into a one-second bucket, so a test can compute the
rate of each task over any steady window.

Usage:
  twriter.py --dir DIR [--nr N | --rates R1,R2,...] [--bs SIZE]
             [--seconds S] [--prefix NAME] [--json FILE]
Rates and sizes take K/M/G suffixes (powers of 1024); rate 0 = unlimited.
--rates 0,2M,4M,8M: one unlimited writer and three at 2, 4 and 8 MiB/s.

Output (stdout or --json FILE), one JSON object:
  {"t0": monotonic start, "seconds": S, "bs": BS,
   "cpu_user": s, "cpu_sys": s,          (all writers, from wait4)
   "writers": [{"i", "pid", "file", "rate", "bytes", "writes",
                "per_sec": [bytes completed in second k after t0, ...],
                "lat_max_ms", "lat_max_at" (s after t0), "error"}]}
"""

import argparse
import json
import os
import signal
import sys
import time

_stop = False


def parse_size(s):
    s = str(s).strip()
    mult = 1
    if s and s[-1] in "kKmMgG":
        mult = 1 << (10 * "kmg".index(s[-1].lower()) + 10)
        s = s[:-1]
    return int(float(s) * mult)


def _on_signal(signum, frame):
    global _stop
    _stop = True


def _writer(i, path, rate, bs, t0, seconds, out_fd):
    """Child body: write until t0+seconds; send the record on out_fd."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    rec = {"i": i, "pid": os.getpid(), "file": path, "rate": rate, "bs": bs,
           "bytes": 0, "writes": 0, "per_sec": [0] * (int(seconds) + 1),
           "lat_max_ms": 0.0, "lat_max_at": 0.0, "error": None}
    buf = bytes([0xa5 ^ (i & 0xff)]) * bs
    fd = None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        now = time.monotonic()
        if t0 > now:
            time.sleep(t0 - now)
        end = t0 + seconds
        next_ok = t0
        nbuckets = len(rec["per_sec"])
        while not _stop:
            now = time.monotonic()
            if now >= end:
                break
            if rate:
                if next_ok > now:
                    time.sleep(min(next_ok, end) - now)
                    continue
                # at most half a second of catch-up after a stall
                next_ok = max(next_ok, now - 0.5) + bs / rate
            a = time.monotonic()
            n = os.write(fd, buf)
            b = time.monotonic()
            if n <= 0:
                raise OSError("write returned %d" % n)
            lat = (b - a) * 1000.0
            if lat > rec["lat_max_ms"]:
                rec["lat_max_ms"] = lat
                rec["lat_max_at"] = round(a - t0, 3)
            rec["bytes"] += n
            rec["writes"] += 1
            k = int(b - t0)
            if 0 <= k < nbuckets:
                rec["per_sec"][k] += n
    except OSError as e:
        rec["error"] = str(e)
    finally:
        if fd is not None:
            os.close(fd)
    rec["lat_max_ms"] = round(rec["lat_max_ms"], 3)
    os.write(out_fd, json.dumps(rec).encode())
    os.close(out_fd)


def run(directory, rates, bs, seconds, prefix="w"):
    """Fork one writer per entry of rates (bytes/s, 0 = unlimited), wait
    for them and return the result dict (see the module doc)."""
    n = len(rates)
    # common start: late enough for every fork to be done
    t0 = time.monotonic() + 0.2 + 0.01 * n
    kids = []
    for i, rate in enumerate(rates):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                for _, rr in kids:
                    os.close(rr)
                _writer(i, os.path.join(directory, "%s%d" % (prefix, i)),
                        rate, bs, t0, seconds, w)
            finally:
                os._exit(0)
        os.close(w)
        kids.append((pid, r))

    caught = []

    def forward(signum, frame):
        caught.append(signum)
        for pid, _ in kids:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
    old = [signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)]
    writers, cpu_user, cpu_sys = [], 0.0, 0.0
    try:
        for pid, r in kids:
            data = b""
            while True:
                b = os.read(r, 65536)
                if not b:
                    break
                data += b
            os.close(r)
            _, status, ru = os.wait4(pid, 0)
            cpu_user += ru.ru_utime
            cpu_sys += ru.ru_stime
            if data:
                writers.append(json.loads(data))
            else:
                writers.append({"pid": pid, "error": "writer died (status %d)"
                                % status, "bytes": 0, "per_sec": [],
                                "rate": 0, "lat_max_ms": 0})
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])
    if caught:
        # the writers are reaped: now let the caller's handler act
        h = old[0] if caught[0] == signal.SIGINT else old[1]
        if callable(h):
            h(caught[0], None)
        elif h == signal.SIG_DFL:
            signal.raise_signal(caught[0])
    return {"t0": t0, "seconds": seconds, "bs": bs, "cpu_user": cpu_user,
            "cpu_sys": cpu_sys, "writers": writers}


def window_rate(w, a, b):
    """Bytes/s of writer record w over seconds [a, b) after t0."""
    ps = w["per_sec"]
    b = min(b, len(ps))
    if b <= a:
        return 0.0
    return sum(ps[a:b]) / float(b - a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--nr", type=int, help="N unlimited writers")
    g.add_argument("--rates", help="comma-separated rates, 0 = unlimited")
    ap.add_argument("--bs", default="1M")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--prefix", default="w")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rates:
        rates = [parse_size(x) for x in a.rates.split(",")]
    else:
        rates = [0] * (a.nr or 1)
    res = run(a.dir, rates, parse_size(a.bs), a.seconds, a.prefix)
    text = json.dumps(res)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 1 if any(w.get("error") for w in res["writers"]) else 0


if __name__ == "__main__":
    sys.exit(main())
