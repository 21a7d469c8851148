#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""tools/wbcfs-crash's rules on synthetic write logs (no root, no mount).

The states it builds between and at flushes: a write is certain only once
its completion precedes the issue of a flush that completed; a write
issued after a flush's issue, or a failed flush, leaves it possible only;
each 4 KiB block of a write comes and goes on its own; a newer write of a
block wins over an older one still in flight; prefixes and random subsets
are what they say; the sample always holds the final state; a partial
last record is ignored. And the workload record: what is expected at which
crash point; and --verify-final, which lets only free blocks differ.

    test/integration/test_crashtool.py
"""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get("WBCFS_CRASH") or os.path.join(HERE, "..", "..", "tools",
                                                      "wbcfs-crash")
BS = 4096


def load_tool():
    loader = importlib.machinery.SourceFileLoader("wbcfs_crash", TOOL)
    spec = importlib.util.spec_from_loader("wbcfs_crash", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class LogWriter:
    """Writes a version 1 write log (doc/write_log.md)."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<8sII", b"WBCFSWL1", 1, 40))
        self.seq = 0

    def rec(self, typ, seq, off=0, data=b"", length=None, res=0):
        n = len(data) if length is None else length
        self.f.write(struct.pack("<IIQQQq", typ, 0, seq, off, n, res) + data)

    def write(self, off, data):
        self.seq += 1
        self.rec(1, self.seq, off, data)
        return self.seq

    def done(self, seq, res=None, flush=False):
        self.rec(4 if flush else 2, seq, res=0 if res is None else res)

    def flush(self):
        self.seq += 1
        self.rec(3, self.seq)
        return self.seq

    def pos(self):
        self.f.flush()
        return self.f.tell()

    def close(self):
        self.f.close()


def blocks(path, n):
    with open(path, "rb") as f:
        d = f.read()
    out = []
    for i in range(n):
        b = d[i * BS:(i + 1) * BS]
        out.append("0" if b == bytes(BS) else chr(b[0]))
    return "".join(out)


def states_of(tool, tmp, base, log, seed=1, nrandom=8, nstates=0):
    f, mm, events = tool.read_log(log)
    chosen, total, final = tool.plan(events, nstates, seed, nrandom, False)
    rp = tool.Replay(base, mm, events, os.path.join(tmp, "durable.img"))
    got = []

    def visit(c, cut, units):
        out = os.path.join(tmp, "state.img")
        rp.build(out, units)
        got.append((c, cut, blocks(out, 4)))
    tool.walk_states(rp, chosen, seed, visit)
    rp.close()
    mm.close()
    f.close()
    return got, total, final


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def t_certain_and_possible(tool, tmp, base):
    log = os.path.join(tmp, "a.wlog")
    w = LogWriter(log)
    w1 = w.write(0, b"A" * (2 * BS))       # blocks 0, 1
    w.done(w1, 2 * BS)
    w6 = w.write(3 * BS, b"D" * BS)         # issued before the flush, done after
    f2 = w.flush()                          # covers w1 only
    w.done(w6, BS)
    w3 = w.write(BS, b"B" * BS)             # issued after the flush's issue
    w.done(f2, flush=True)
    w.done(w3, BS)
    f4 = w.flush()                          # covers w6 and w3
    w.done(f4, flush=True)
    w5 = w.write(2 * BS, b"C" * BS)         # never completes
    w.close()
    got, total, final = states_of(tool, tmp, base, log)
    flush = {c[0]: img for c, cut, img in got if c[1] == "flush"}
    check(flush == {1: "AA00", 2: "AB0D"}, "flush states %r" % flush)
    pre = {(c[0], c[2]): img for c, cut, img in got if c[1] == "prefix"}
    check(pre == {(0, 1): "AA00", (0, 2): "AA0D", (0, 3): "AB0D",
                  (1, 1): "AA0D", (1, 2): "AB0D", (2, 1): "ABCD"},
          "prefix states %r" % pre)
    check(final == ("flush", 2), "final %r" % (final,))
    # random subsets of epoch 0: every block old or new, nothing else
    seen = set()
    for c, cut, img in got:
        if c[1] == "random" and c[0] == 0:
            check(img[0] in "0A" and img[1] in "0AB" and img[2] == "0" and img[3] in "0D",
                  "random state %r" % img)
            seen.add(img)
    check(len(seen) > 1, "random subsets all alike: %r" % seen)
    # epoch 1: w1 certain, w6 and w3 may be missing
    for c, cut, img in got:
        if c[1] == "random" and c[0] == 1:
            check(img[0] == "A" and img[1] in "AB" and img[3] in "0D",
                  "random epoch 1 %r" % img)
    check(w5 == 6, "seq numbering")


def t_failed_flush_and_newer_wins(tool, tmp, base):
    log = os.path.join(tmp, "b.wlog")
    w = LogWriter(log)
    old = w.write(0, b"O" * BS)             # in flight for ever
    new = w.write(0, b"N" * BS)
    w.done(new, BS)
    f = w.flush()
    w.done(f, res=-5, flush=True)           # failed: nothing certain
    f2 = w.flush()
    w.done(f2, flush=True)                  # now block 0 is certainly N
    t = w.write(3 * BS, b"T" * BS)
    w.done(t, BS)
    w.close()
    got, total, final = states_of(tool, tmp, base, log)
    flush = {c[0]: img for c, cut, img in got if c[1] == "flush"}
    check(flush == {1: "0000", 2: "N000"}, "flush states %r" % flush)
    for c, cut, img in got:
        if c[0] == 2:
            # the older write still in flight never undoes the newer one
            check(img[0] == "N", "state %r: %r" % (c, img))


def t_sample_and_partial(tool, tmp, base):
    log = os.path.join(tmp, "c.wlog")
    w = LogWriter(log)
    for i in range(30):
        s = w.write((i % 4) * BS, bytes([65 + i % 26]) * BS)
        w.done(s, BS)
        if i % 3 == 2:
            f = w.flush()
            w.done(f, flush=True)
    w.close()
    with open(log, "ab") as f:
        f.write(b"\x01\x00\x00")            # a daemon killed mid-append
    f, mm, events = tool.read_log(log)
    chosen, total, final = tool.plan(events, 7, 3, 2, False)
    check(len(chosen) == 7, "sampled %d of %d" % (len(chosen), total))
    check(("flush" in [c[1] for c in chosen]) and
          (final[1], "flush", 0) in chosen, "final state not in the sample")
    again, _, _ = tool.plan(events, 7, 3, 2, False)
    check(again == chosen, "same seed, other sample")
    mm.close()
    f.close()


def t_oracle(tool, tmp):
    rec = os.path.join(tmp, "r.rec")
    with open(rec, "w") as f:
        for r in ({"t": "fsync", "path": "a", "sha": "1", "size": 1, "pos": 100},
                  {"t": "mod", "path": "a", "pos": 200},
                  {"t": "fsync", "path": "a", "sha": "2", "size": 1, "pos": 300},
                  {"t": "fsync", "path": "b", "sha": "3", "size": 1, "pos": 150},
                  {"t": "rename", "path": "b", "old": "3", "new": "4", "pos": 250}):
            f.write(json.dumps(r) + "\n")
    o = tool.Oracle(rec)

    def at(cut):
        return sorted((p, e[0], e[1]) for p, e in o.expected(cut))
    check(at(50) == [], "before any fsync: %r" % at(50))
    check(at(100) == [("a", "exact", "1")], "at 100: %r" % at(100))
    check(at(200) == [("a", "exact", "1"), ("b", "exact", "3")], "at 200: %r" % at(200))
    check(at(260) == [("b", "oneof", "3")], "at 260: %r" % at(260))
    check(at(10 ** 9) == [("a", "exact", "2"), ("b", "oneof", "3")], "at the end")

    # an unlinked fsync'ed file: gone, or as it was fsync'ed
    with open(rec, "w") as f:
        for r in ({"t": "fsync", "path": "c", "sha": "5", "size": 1, "pos": 100},
                  {"t": "unlink", "path": "c", "pos": 200},
                  {"t": "mod", "path": "d", "pos": 100},
                  {"t": "unlink", "path": "d", "pos": 200}):
            f.write(json.dumps(r) + "\n")
    o = tool.Oracle(rec)
    check(at(250) == [("c", "gone_or_exact", "5")], "after the unlink: %r" % at(250))
    d = os.path.join(tmp, "tree")
    os.mkdir(d)
    exp = o.expected(250)
    check(tool.check_expect(d, exp, "t") == [], "a gone file is fine")
    with open(os.path.join(d, "c"), "wb") as f:
        f.write(b"another file's data")
    check(len(tool.check_expect(d, exp, "t")) == 1, "a file back with other data is caught")
    os.unlink(os.path.join(d, "c"))
    os.rmdir(d)


def t_strict_rules(tool, tmp):
    """The rules of the workloads that know what ext4 gives after a crash:
    prefix (old content, or the new one's prefix with NULs only in its last
    block, never where earlier data was durable), range (a synchronous
    write's bytes, until a change overlaps them), blocks (each block one
    of its versions), gone."""
    import hashlib
    import random
    rec = os.path.join(tmp, "s.rec")
    blobs = rec + ".d"
    os.mkdir(blobs)
    tool.BLOB_DIR[0] = blobs
    tool.blob.cache_clear()

    def blob(data):
        sha = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, sha), "wb") as f:
            f.write(data)
        return sha
    r = random.Random(7)
    new = bytes(b | 1 for b in r.randbytes(3 * BS + 500))     # no NUL in it
    old = b"old content"
    rng = bytes(b | 1 for b in r.randbytes(6000))
    v0 = bytes(b | 1 for b in r.randbytes(2 * BS))
    v1 = v0[:100] + b"\x01" * 5000 + v0[5100:]
    recs = [{"t": "prefix", "path": "p", "new": blob(new), "old": [blob(old)],
             "absent": False, "least": 0, "pos": 100},
            {"t": "prefix", "path": "q", "new": blob(new), "old": [], "absent": True,
             "least": 5000, "pos": 100},
            {"t": "range", "path": "r", "off": 1000, "len": len(rng), "sha": blob(rng),
             "pos": 100},
            {"t": "mod", "path": "r", "off": 9000, "len": 10, "pos": 200},   # apart
            {"t": "mod", "path": "r", "off": 6999, "len": 10, "pos": 300},   # overlaps
            {"t": "blocks", "path": "b", "versions": [blob(v0), blob(v1)], "pos": 100},
            {"t": "prefix", "path": "h", "new": blob(new), "old": [], "absent": True,
             "least": 0, "holes": True, "pos": 100},
            {"t": "gone", "path": "g", "pos": 100}]
    with open(rec, "w") as f:
        for x in recs:
            f.write(json.dumps(x) + "\n")
    o = tool.Oracle(rec)
    kinds = sorted((p, e[0]) for p, e in o.expected(250))
    check(kinds == [("b", "blocks"), ("g", "gone"), ("h", "prefix"), ("p", "prefix"),
                    ("q", "prefix"), ("r", "range")], "at 250: %r" % kinds)
    check(("r", "range") not in [(p, e[0]) for p, e in o.expected(301)],
          "an overlapping write ends a range rule")
    d = os.path.join(tmp, "tree")
    os.mkdir(d)

    def verdict(path, data, cut=250):
        full = os.path.join(d, path)
        if data is None:
            if os.path.exists(full):
                os.unlink(full)
        else:
            with open(full, "wb") as f:
                f.write(data)
        exp = [(p, e) for p, e in o.expected(cut) if p == path]
        return tool.check_expect(d, exp, "t")

    def ok(path, data, what):
        bad = verdict(path, data)
        check(not bad, "%s: refused: %r" % (what, bad))

    def caught(path, data, needle, what):
        bad = verdict(path, data)
        check(len(bad) == 1 and needle in bad[0], "%s: not caught: %r" % (what, bad))
    ok("p", old, "the old content")
    ok("p", b"", "an empty prefix")
    ok("p", new[:5000], "a prefix")
    ok("p", new, "all of it")
    ok("p", new[:2 * BS] + bytes(300), "NULs in the last block")
    caught("p", new[:BS] + bytes(BS) + new[2 * BS:2 * BS + 300], "NUL bytes where data",
           "NULs in a block before the last")
    caught("p", bytes(len(new)), "NUL bytes where data", "a file of NULs")
    caught("p", new + b"x", "larger than", "more than was written")
    caught("p", new[:100] + b"y" + new[101:200], "neither", "other bytes")
    caught("p", None, "missing", "a committed file gone")
    ok("q", None, "absent, as allowed")
    ok("q", new[:5000] + bytes(100), "NULs after what was durable")
    caught("q", new[:4096] + bytes(800), "below the 5000", "smaller than what was durable")
    caught("q", new[:4500] + bytes(1000), "NUL bytes where data",
           "NULs over what was durable, in the last block")
    ok("r", bytes(1000) + rng, "the range written")
    ok("r", b"z" * 1000 + rng + b"tail", "the range and other bytes")
    caught("r", bytes(1000) + rng[:3000] + bytes(3000), "not there", "a range lost in part")
    caught("r", bytes(1000) + rng[:3000], "not there", "a range cut short")
    caught("r", None, "missing", "a file with a range gone")
    ok("b", v0, "the first version")
    ok("b", v1, "the second version")
    ok("b", v1[:BS] + v0[BS:], "blocks of both")
    ok("b", v0[:200] + v1[200:BS] + v0[BS:], "a block torn between versions")
    caught("b", v0[:BS] + bytes(BS), "NUL", "a block of NULs")
    caught("b", v0[:BS], "size", "a block missing")
    ok("h", new[:BS] + bytes(BS) + new[2 * BS:3 * BS + 100], "a hole inside, if allowed")
    caught("h", new[:BS] + bytes(100) + new[BS + 100:3 * BS], "neither the new data nor a hole",
           "part of a block NUL, holes allowed")
    ok("g", None, "gone")
    caught("g", b"", "exists", "back after its removal committed")
    shutil.rmtree(d)
    tool.BLOB_DIR[0] = None


def t_verify_final(tool, tmp):
    """The log applied to the base must give the final device, except in
    blocks the final filesystem has free (a page changed while its write
    was in flight, then freed): those are listed, not failed."""
    import argparse
    import subprocess
    base = os.path.join(tmp, "fs-base.img")
    with open(base, "wb") as f:
        f.truncate(4 * 1024 * 1024)
    p = subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal", base],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print("skip t_verify_final: mkfs.ext4: %s" % p.stdout.strip(), flush=True)
        return
    free, used = 900, 1       # the last blocks are free; block 1: the descriptors
    check(tool.blocks_in_use(base, [free, used]) == [used], "debugfs sees block 1 in use "
          "and block 900 free: %r" % tool.blocks_in_use(base, [free, used]))
    log = os.path.join(tmp, "vf.log")
    w = LogWriter(log)
    s = w.write(free * BS, b"A" * BS)
    w.done(s)
    w.close()
    final = os.path.join(tmp, "fs-final.img")

    def verdict(blk, data):
        shutil.copyfile(base, final)
        with open(final, "r+b") as f:
            f.seek(blk * BS)
            f.write(data)
        args = argparse.Namespace(base=base, verify_final=final)
        f, mm, events = tool.read_log(log)
        try:
            return tool.verify_final(args, mm, events, tmp)
        finally:
            mm.close()
            f.close()
    check(verdict(free, b"A" * BS) is None, "the log gives the device")
    check(verdict(free, b"B" * BS) is None, "a free block written in flight may differ")
    with open(base, "rb") as f:
        f.seek(used * BS)
        old = f.read(BS)
    why = verdict(used, old[:-16] + b"C" * 16)     # in its unused tail
    check(why == "block 1 differs, in use", "a block in use that differs: %r" % why)
    os.unlink(final)
    os.unlink(log)
    os.unlink(base)


def t_prefix_stream(tool, tmp):
    """A stream: blocks of its data or zeros; a prefix stream: its data
    only, cut anywhere."""
    rec = os.path.join(tmp, "p.rec")
    with open(rec, "w") as f:
        for r in ({"t": "stream", "path": "s", "key": "k", "max": 3 * BS, "pos": 10},
                  {"t": "stream", "path": "p", "key": "k", "max": 3 * BS, "pos": 10,
                   "prefix": True}):
            f.write(json.dumps(r) + "\n")
    exp = tool.Oracle(rec).expected(20)
    data = tool.stream_bytes("k", 3 * BS)
    d = os.path.join(tmp, "ptree")
    os.mkdir(d)

    def verdict(content):
        for n in ("s", "p"):
            with open(os.path.join(d, n), "wb") as f:
                f.write(content)
        return sorted(b.split(":")[1].strip() for b in tool.check_expect(d, exp, "t"))
    check(verdict(data[:BS + 7]) == [], "a prefix is fine")
    check(verdict(b"") == [], "an empty file is fine")
    holed = data[:BS] + bytes(BS) + data[2 * BS:]
    check(verdict(holed) == ["p"], "a hole only in the prefix stream: %r" % verdict(holed))
    check(verdict(bytes(2 * BS)) == ["p"], "zeros: a size before its data")
    check(verdict(b"x" * BS) == ["p", "s"], "other data is stale in both")
    for n in ("s", "p"):
        os.unlink(os.path.join(d, n))
    os.rmdir(d)


def main():
    tool = load_tool()
    tmp = tempfile.mkdtemp(prefix="wbt-crashtool-")
    try:
        base = os.path.join(tmp, "base.img")
        with open(base, "wb") as f:
            f.write(bytes(4 * BS))
        for t in (t_certain_and_possible, t_failed_flush_and_newer_wins,
                  t_sample_and_partial):
            t(tool, tmp, base)
            print("ok %s" % t.__name__, flush=True)
        t_oracle(tool, tmp)
        print("ok t_oracle", flush=True)
        t_strict_rules(tool, tmp)
        print("ok t_strict_rules", flush=True)
        t_prefix_stream(tool, tmp)
        print("ok t_prefix_stream", flush=True)
        t_verify_final(tool, tmp)
        print("ok t_verify_final", flush=True)
    except AssertionError as e:
        print("FAIL crashtool: %s" % e, flush=True)
        return 1
    finally:
        shutil.rmtree(tmp)
    print("PASS crashtool", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
