#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""crashwork: workloads for the crash-point harness (tools/wbcfs-crash),
run on a wbcfs mount that records its device writes (-o write_log=LOG).

Each workload writes the record the harness checks states against (JSON
lines, format in tools/wbcfs-crash): for every fsync that returned, the
file's sha256 and size and the write log's position at that moment; a
"mod" before a recorded file changes; a "rename" before a rename of an
fsync'ed temp file over an fsync'ed file, with both contents. A position
is the log's size (fstat): the daemon appends records synchronously, so
every record of an fsync that returned is inside it.

  random      random namespace and data operations: create, write,
              truncate, fallocate, punch, rename, link, unlink, mkdir,
              rmdir, xattrs, fsync and fdatasync. Files under s/ are the
              recorded ones (each change of one is a "mod"); d/ gets the
              rest, unrecorded, and is where directories come and go.
  faults      random, with now and then a few operations run while every
              metadata write fails (fault_meta=write on a fault_inject
              mount) or the device's cache flushes fail (fault_meta=flush,
              or flush:N, after N more): their commits fail, and are
              retried once it heals;
              then durability, with the data writes of some files failing
              for a while (fault=write): their new blocks, committed along
              with other files, must never show stale data.
  durability  the durability writer of test_durability.py: files of the
              sizes it uses, a third fsync'ed or fdatasync'ed (recorded),
              some appended to afterwards; every file's content is a
              "stream" record (ordered mode: no stale data in any state).
  ordered     a streamer's unsynced files written back in the background
              while a syncer fsyncs small files (all stream records): the
              commits close over data writes in flight (mount it with a
              small dirty_background_bytes).
  disksize    files written and not synced, then chmod'ed, renamed,
              linked, given an xattr or new times (each logs the inode),
              and an fsync'ed file appended to and chmod'ed, while other
              files are fsync'ed (commits): all of them "prefix" streams,
              as the on-disk size must only cover written data.
  dbench      dbench for a few seconds; nothing recorded (the harness then
              checks consistency only).

The workloads below hold wbcfs to what the kernel's ext4 (data=ordered,
auto_da_alloc, nodioread_nolock) leaves after a crash, with the stricter
records ("prefix", "range", "blocks", "gone"): no NULs where data was
written, beyond the last block. They pass on the kernel (test_crash.py
--kernel), each is its own meson test (crash-NAME).

  syncwrite   writes with O_SYNC, O_DSYNC, RWF_DSYNC, RWF_SYNC: once one
              returns, its bytes are there (appends, overwrites, past EOF);
  inodechange unsynced writes (new files, or appends to fsync'ed ones),
              then chmod, rename, link, setxattr or utime, then an
              unrelated fsync: the file is a prefix of its data;
  replace     rename-over of a freshly written file, O_TRUNC or ftruncate
              to 0 then rewrite and close, no fsync: old or new content
              (a truncate: or a prefix of the new), and the new content
              whole once a later commit returned;
  mmap        stores through a shared mapping mixed with write(2) (also
              racing in one page, also over holes), msync or fsync alone:
              coherent, durable; stores without msync across a commit:
              each block one of its versions;
  fullreuse   fill the filesystem, fsync X, fill the rest, unlink X without
              fsync, write Y into the freed space, commit later: X comes
              back, if at all, only as it was.

    crashwork.py WORKLOAD --mnt MNT --log LOG --record REC [--seed S] [--ops N]
"""

import argparse
import errno
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_durability import SIZES, content  # noqa: E402

FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2


class Record:
    """The workload's side of the oracle."""

    def __init__(self, log, path):
        self.log = log
        self.f = open(path, "a")

    def pos(self):
        return os.stat(self.log).st_size

    def _put(self, r):
        self.f.write(json.dumps(r) + "\n")
        self.f.flush()

    def fsynced(self, rel, data, pos):
        self._put({"t": "fsync", "path": rel, "sha": hashlib.sha256(data).hexdigest(),
                   "size": len(data), "pos": pos})

    def mod(self, rel):
        self._put({"t": "mod", "path": rel, "pos": self.pos()})

    def unlink(self, rel):
        """rel, fsync'ed and unchanged since, is being unlinked: until
        the unlink is durable it may come back, but only as it was."""
        self._put({"t": "unlink", "path": rel, "pos": self.pos()})

    def stream(self, seed, rel, n, prefix=False, paths=None):
        """rel is being created and will only hold bytes of its content
        (test_durability.content: random.Random(key).randbytes), which
        this returns: from now on each of its 4 KiB blocks holds those
        bytes or zeros, never stale data. @prefix: written in order from
        its start, it holds a prefix of them (no zeros either). @paths:
        the names it will have (a rename, a link), rel's by default."""
        for p in paths or (rel,):
            r = {"t": "stream", "path": p, "key": "%d/%s" % (seed, rel), "max": n,
                 "pos": self.pos()}
            if prefix:
                r["prefix"] = True
            self._put(r)
        return content(seed, rel, n)

    def rename(self, rel, old, new):
        self._put({"t": "rename", "path": rel, "old": hashlib.sha256(old).hexdigest(),
                   "new": hashlib.sha256(new).hexdigest(), "pos": self.pos()})

    # The rules below name contents by their sha256 and keep the bytes in
    # blobs beside the record (REC.d/SHA): the harness compares them.
    def blob(self, data):
        data = bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        d = self.f.name + ".d"
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, sha)
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(data)
        return sha

    def exact(self, rel, data, pos=None):
        """From here on rel holds exactly @data (a commit made it so)."""
        self.blob(data)     # lets the harness say how it differs
        self.fsynced(rel, data, self.pos() if pos is None else pos)

    def mod_range(self, rel, off, n):
        """[off, off + n) of rel is being written: the range rules that
        overlap it end here, the others hold on."""
        self._put({"t": "mod", "path": rel, "off": off, "len": n, "pos": self.pos()})

    def range(self, rel, off, data, pos):
        """A synchronous write of @data at @off returned at @pos: from then
        on, until a change overlapping it, rel holds those bytes."""
        self._put({"t": "range", "path": rel, "off": off, "sha": self.blob(data),
                   "len": len(data), "pos": pos})

    def prefix(self, rel, new, olds=(), absent=False, least=0, holes=False):
        """rel is being changed to @new by writes at increasing offsets (or
        ends up so): until the next record for it, rel is absent (if
        @absent), one of @olds, or new[:S] for some S >= @least, where
        only the block holding byte S-1 may show zeros (and only from
        @least on) instead of new's bytes: a size the data never reached
        is what ordered mode (with its on-disk size) forbids. @holes: whole
        blocks of NULs are allowed anywhere in new[:S] (still never other
        bytes)."""
        self._put({"t": "prefix", "path": rel, "new": self.blob(new),
                   "old": [self.blob(o) for o in olds], "absent": absent,
                   "least": least, "holes": holes, "pos": self.pos()})

    def blocks(self, rel, versions):
        """rel (of versions' common size) is being changed in place by
        stores to a shared mapping: until the next record for it, each of
        its 4 KiB blocks holds that block of one of @versions."""
        self._put({"t": "blocks", "path": rel, "versions": [self.blob(v) for v in versions],
                   "pos": self.pos()})

    def gone(self, rel):
        """rel's removal (or rename away) is committed: it must not exist."""
        self._put({"t": "gone", "path": rel, "pos": self.pos()})

    def close(self):
        self.f.close()


def _fallocate(fd, mode, off, n):
    """fallocate(2) through libc (os.posix_fallocate has no mode)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if libc.fallocate(fd, mode, off, n) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Model:
    """Contents of the recorded files as the workload left them."""

    def __init__(self):
        self.data = {}          # rel -> bytearray (s/ files)
        self.synced = set()     # rel whose content was fsync'ed, unchanged since


FAULT_META = "trusted.wbcfs.fault_meta"
FAULT_DATA = "trusted.wbcfs.fault"


def random_ops(mnt, rec, seed, nops, faults=False):
    """Random namespace and data operations.  @faults (a fault_inject
    mount): now and then a few of them run with the device failing every
    metadata write (fault_meta=write) or its cache flushes (fault_meta=
    flush, flush:N), so that commits fail and are retried once it heals;
    an fsync that fails there promises nothing."""
    r = random.Random(seed)
    m = Model()
    faulty = [0]    # operations left in the fault window
    for d in ("s", "d"):
        os.makedirs(os.path.join(mnt, d), exist_ok=True)
    dirs = ["d"]
    others = []     # unrecorded files under d/
    nxt = [0]

    def name(prefix):
        nxt[0] += 1
        return "%s%d" % (prefix, nxt[0])

    def full(rel):
        return os.path.join(mnt, rel)

    def sync_s(rel, data=False):
        fd = os.open(full(rel), os.O_RDONLY)
        try:
            os.fdatasync(fd) if data else os.fsync(fd)
        except OSError as e:
            if e.errno != errno.EIO or not faulty[0]:
                raise
            return
        finally:
            os.close(fd)
        rec.fsynced(rel, bytes(m.data[rel]), rec.pos())
        m.synced.add(rel)

    def write_s(rel, off, buf):
        rec.mod(rel)
        m.synced.discard(rel)
        fd = os.open(full(rel), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, buf, off)
        finally:
            os.close(fd)
        d = m.data.setdefault(rel, bytearray())
        if len(d) < off:
            d.extend(bytes(off - len(d)))
        d[off:off + len(buf)] = buf

    def op_create_s():
        rel = "s/" + name("f")
        size = r.choice((0, 1, 4095, 4096, 5000, 65536, 200000))
        m.data[rel] = bytearray()
        write_s(rel, 0, r.randbytes(size))
        if r.random() < 0.8:
            sync_s(rel, r.random() < 0.3)

    def op_write_s():
        if not m.data:
            return op_create_s()
        rel = r.choice(sorted(m.data))
        size = len(m.data[rel])
        off = r.randrange(0, size + 8192)
        write_s(rel, off, r.randbytes(r.choice((1, 100, 4096, 10000, 70000))))
        if r.random() < 0.6:
            sync_s(rel)

    def op_truncate_s():
        if not m.data:
            return
        rel = r.choice(sorted(m.data))
        n = r.randrange(0, len(m.data[rel]) + 10000)
        rec.mod(rel)
        m.synced.discard(rel)
        os.truncate(full(rel), n)
        d = m.data[rel]
        if n < len(d):
            del d[n:]
        else:
            d.extend(bytes(n - len(d)))
        if r.random() < 0.6:
            sync_s(rel)

    def op_falloc_s():
        if not m.data:
            return
        rel = r.choice(sorted(m.data))
        d = m.data[rel]
        off = r.randrange(0, len(d) + 1) & ~4095
        n = r.choice((4096, 8192, 65536))
        punch = r.random() < 0.5 and len(d) > 0
        rec.mod(rel)
        m.synced.discard(rel)
        fd = os.open(full(rel), os.O_WRONLY)
        try:
            if punch:
                _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)
                end = min(off + n, len(d))
                if end > off:
                    d[off:end] = bytes(end - off)
            else:
                _fallocate(fd, FALLOC_FL_KEEP_SIZE if r.random() < 0.5 else 0, off, n)
                if os.fstat(fd).st_size > len(d):
                    d.extend(bytes(os.fstat(fd).st_size - len(d)))
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSPC):
                raise
        finally:
            os.close(fd)
        if r.random() < 0.6:
            sync_s(rel)

    def op_rename_over():
        cands = sorted(m.synced & set(m.data))
        if not cands:
            return op_create_s()
        dst = r.choice(cands)
        tmp = "s/" + name(".tmp")
        new = r.randbytes(r.choice((1, 4096, 9000, 100000)))
        m.data[tmp] = bytearray()
        write_s(tmp, 0, new)
        sync_s(tmp)
        old = bytes(m.data[dst])
        rec.mod(tmp)
        rec.rename(dst, old, new)
        os.rename(full(tmp), full(dst))
        del m.data[tmp]
        m.synced.discard(tmp)
        m.data[dst] = bytearray(new)
        m.synced.discard(dst)
        if r.random() < 0.3:
            fd = os.open(full("s"), os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)

    def op_unlink_s():
        if not m.data:
            return
        rel = r.choice(sorted(m.data))
        if rel in m.synced:
            rec.unlink(rel)
        else:
            rec.mod(rel)
        os.unlink(full(rel))
        del m.data[rel]
        m.synced.discard(rel)

    def op_xattr_s():
        if not m.data:
            return
        rel = r.choice(sorted(m.data))
        os.setxattr(full(rel), "user.k%d" % r.randrange(4), r.randbytes(r.randrange(1, 200)))

    # unrecorded namespace churn under d/
    def op_mkdir():
        d = r.choice(dirs) + "/" + name("dir")
        os.mkdir(full(d))
        dirs.append(d)

    def op_rmdir():
        cand = [d for d in dirs if d != "d"]
        if not cand:
            return
        d = r.choice(cand)
        try:
            os.rmdir(full(d))
            dirs.remove(d)
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise

    def op_create_d():
        rel = r.choice(dirs) + "/" + name("o")
        with open(full(rel), "wb") as f:
            f.write(r.randbytes(r.choice((0, 10, 4096, 30000))))
        others.append(rel)

    def op_churn_d():
        if not others:
            return op_create_d()
        rel = r.choice(others)
        k = r.randrange(6)
        try:
            if k == 0:
                dst = r.choice(dirs) + "/" + name("m")
                os.rename(full(rel), full(dst))
                others[others.index(rel)] = dst
            elif k == 1:
                dst = r.choice(dirs) + "/" + name("l")
                os.link(full(rel), full(dst))
                others.append(dst)
            elif k == 2:
                os.unlink(full(rel))
                others.remove(rel)
            elif k == 3:
                os.truncate(full(rel), r.randrange(0, 50000))
            elif k == 4:
                os.setxattr(full(rel), "user.x", r.randbytes(r.randrange(1, 300)))
            else:
                fd = os.open(full(rel), os.O_WRONLY)
                os.pwrite(fd, r.randbytes(5000), r.randrange(0, 40000))
                if r.random() < 0.3:
                    os.fsync(fd)
                os.close(fd)
        except FileNotFoundError:
            # a directory of it went away: forget it
            others.remove(rel)

    ops = [(op_create_s, 3), (op_write_s, 4), (op_truncate_s, 1), (op_falloc_s, 2),
           (op_rename_over, 3), (op_unlink_s, 1), (op_xattr_s, 1), (op_mkdir, 1),
           (op_rmdir, 1), (op_create_d, 2), (op_churn_d, 3)]
    fns = [f for f, w in ops for _ in range(w)]
    # in a fault window: operations whose fsync may fail without a promise
    # made on it (a rename-over needs its temp file fsync'ed)
    window = [f for f, w in ops if f in (op_create_s, op_write_s, op_truncate_s,
                                         op_xattr_s, op_mkdir, op_create_d)
              for _ in range(w)]
    for _ in range(nops):
        if faults and not faulty[0] and r.random() < 0.08:
            faulty[0] = r.randrange(2, 7)
            # a log write fails, or the device's flushes do: all of them,
            # or from the second or third on (a commit block written but
            # not flushed; a checkpoint's home writes flushed, its journal
            # superblock not)
            os.setxattr(mnt, FAULT_META, r.choice((b"write", b"flush", b"flush:1", b"flush:2")))
        if faulty[0]:
            r.choice(window)()
            faulty[0] -= 1
            if not faulty[0]:
                os.setxattr(mnt, FAULT_META, b"none")
        else:
            r.choice(fns)()
    if faulty[0]:
        faulty[0] = 0
        os.setxattr(mnt, FAULT_META, b"none")
    return len(m.data)


def durability(mnt, rec, seed, nfiles, faults=False):
    """test_durability.py's writer, keeping the log position of each promise.
    @faults (a fault_inject mount): the data writes of some files fail for
    a while (trusted.wbcfs.fault=write): their fsync promises nothing, but
    their stream records hold, so their blocks never show stale data, also
    while other files' commits take their allocations along."""
    r = random.Random(seed)
    top = "r%d" % seed
    d = top
    os.mkdir(os.path.join(mnt, d))
    failing = []

    def heal(rel):
        os.setxattr(os.path.join(mnt, rel), FAULT_DATA, b"none")
        failing.remove(rel)

    for i in range(nfiles):
        if i % 7 == 0:
            d = "%s/d%d" % (top, i)
            os.mkdir(os.path.join(mnt, d))
        rel = "%s/f%d" % (d, i)
        size = r.choice(SIZES[:-2])     # up to 1 MiB: small images
        mode = r.choice(("fsync", "fdatasync", "none", "none", "append"))
        data = rec.stream(seed, rel, size + (65536 + 33 if mode == "append" else 0))
        fd = os.open(os.path.join(mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
        bad = faults and r.random() < 0.3
        if bad:
            os.setxattr(os.path.join(mnt, rel), FAULT_DATA, b"write")
            failing.append(rel)
        off = 0
        while off < size:
            n = min(size - off, r.choice((1, 512, 4096, 65536, 262144 + 7)))
            os.write(fd, data[off:off + n])
            off += n
        try:
            if mode in ("fsync", "append"):
                os.fsync(fd)
                rec.fsynced(rel, data[:size], rec.pos())
            elif mode == "fdatasync":
                os.fdatasync(fd)
                rec.fsynced(rel, data[:size], rec.pos())
        except OSError as e:
            if not bad or e.errno != errno.EIO:
                raise
        if mode == "append":
            rec.mod(rel)
            os.write(fd, data[size:])
        try:
            os.close(fd)
        except OSError as e:
            # close reports the failed writes too
            if not bad or e.errno != errno.EIO:
                raise
        if failing and r.random() < 0.3:
            heal(r.choice(failing))
    while failing:
        heal(failing[0])
    return nfiles


def _write_all(fd, data, r, off=0):
    """Write @data at @off in chunks of varied sizes, in increasing offsets."""
    pos = 0
    while pos < len(data):
        n = min(len(data) - pos, r.choice((4096, 65536, 100000)))
        os.pwrite(fd, data[pos:pos + n], off + pos)
        pos += n


class Committer:
    """Commits the running transaction without touching the files under
    test: a small new file written and fsync'ed (recorded). A kernel's
    fsync commits the transaction of the file's last change, which is the
    running one for a new file: every change before it commits with it."""

    def __init__(self, mnt, rec, top, r):
        self.mnt, self.rec, self.top, self.r = mnt, rec, top, r
        self.n = 0
        os.makedirs(os.path.join(mnt, top, "c"), exist_ok=True)

    def __call__(self):
        self.n += 1
        rel = "%s/c/c%d" % (self.top, self.n)
        data = self.r.randbytes(self.r.choice((10, 5000)))
        fd = os.open(os.path.join(self.mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
            self.rec.exact(rel, data)
        finally:
            os.close(fd)


SYNC_MODES = ("O_SYNC", "O_DSYNC", "RWF_DSYNC", "RWF_SYNC")


def syncwrite(mnt, rec, seed, nfiles):
    """Synchronous writes, every flag: files opened O_SYNC or O_DSYNC and
    written with pwrite, or opened plain and written with pwritev2
    RWF_DSYNC or RWF_SYNC. Each write appends, overwrites or leaves a hole;
    once it returns, its bytes are there (a "range" record) until a later
    write overlaps them. Unsynced appends to another file run alongside,
    so that commits carry other work too."""
    r = random.Random(seed)
    top = "y%d" % seed
    os.mkdir(os.path.join(mnt, top))
    noise = "%s/noise" % top
    ndata = rec.stream(seed, noise, 4 << 20)
    nfd = os.open(os.path.join(mnt, noise), os.O_CREAT | os.O_WRONLY, 0o644)
    npos = 0
    try:
        for i in range(nfiles):
            mode = SYNC_MODES[i % len(SYNC_MODES)]
            rel = "%s/%s-%d" % (top, mode, i)
            flags = os.O_CREAT | os.O_WRONLY
            flags |= {"O_SYNC": os.O_SYNC, "O_DSYNC": os.O_DSYNC}.get(mode, 0)
            rwf = {"RWF_DSYNC": os.RWF_DSYNC, "RWF_SYNC": os.RWF_SYNC}.get(mode)
            fd = os.open(os.path.join(mnt, rel), flags, 0o644)
            size = 0
            try:
                for k in range(r.randrange(3, 9)):
                    kind = r.choice(("append", "append", "over", "hole")) if size else "append"
                    n = r.choice((1, 100, 4096, 5000, 70000, 200000))
                    off = {"append": size, "over": r.randrange(0, max(size, 1)),
                           "hole": size + r.randrange(1, 20000)}[kind]
                    data = r.randbytes(n)
                    rec.mod_range(rel, off, n)
                    if rwf is None:
                        os.pwrite(fd, data, off)
                    else:
                        os.pwritev(fd, [data], off, rwf)
                    rec.range(rel, off, data, rec.pos())
                    size = max(size, off + n)
                    if npos < len(ndata) and r.random() < 0.5:
                        n = min(len(ndata) - npos, r.choice((4096, 30000, 100000)))
                        os.pwrite(nfd, ndata[npos:npos + n], npos)
                        npos += n
            finally:
                os.close(fd)
    finally:
        os.close(nfd)
    return nfiles


INODE_OPS = ("chmod", "rename", "link", "setxattr", "utime")


def inodechange(mnt, rec, seed, nfiles):
    """Unsynced writes, then a change of the file's inode (chmod, rename,
    link, setxattr, utime), then an unrelated fsync that commits it: the
    committed inode must not claim data that was never written. Each
    file is new, or an fsync'ed file appended to; its content is always
    a prefix of its final bytes, which is what a crash may leave (ordered
    mode, the on-disk size following the data written), never a size
    whose data is NULs."""
    r = random.Random(seed)
    top = "i%d" % seed
    os.mkdir(os.path.join(mnt, top))
    commit = Committer(mnt, rec, top, r)
    for i in range(nfiles):
        op = INODE_OPS[i % len(INODE_OPS)]
        rel = "%s/%s%d" % (top, op, i)
        full = os.path.join(mnt, rel)
        new = r.randbytes(r.choice((5000, 70000, 300000, 1 << 20)))
        least = 0
        if r.random() < 0.5:
            least = r.choice([n for n in (100, 4096, 10000) if n < len(new)])
            fd = os.open(full, os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, new[:least])
            os.fsync(fd)
            os.close(fd)
            rec.exact(rel, new[:least])
        # a new file may be absent until a commit
        rec.prefix(rel, new, absent=not least, least=least)
        fd = os.open(full, os.O_CREAT | os.O_WRONLY, 0o644)
        _write_all(fd, new[least:], r, least)
        os.close(fd)
        dst = rel + "-" + op
        if op == "chmod":
            os.chmod(full, 0o600)
        elif op == "rename":
            rec.prefix(dst, new, absent=True, least=least)
            rec.prefix(rel, new, absent=True, least=least)
            os.rename(full, os.path.join(mnt, dst))
        elif op == "link":
            rec.prefix(dst, new, absent=True, least=least)
            os.link(full, os.path.join(mnt, dst))
        elif op == "setxattr":
            os.setxattr(full, "user.k", r.randbytes(50))
        else:
            t = time.time() - 1000
            os.utime(full, (t, t))
        commit()
        # the change is committed: the names are as the change left them
        if op == "rename":
            rec.gone(rel)
            rec.prefix(dst, new, least=least)
        else:
            rec.prefix(rel, new, least=least)
            if op == "link":
                rec.prefix(dst, new, least=least)
    return nfiles


def replace(mnt, rec, seed, nfiles):
    """Replacing an fsync'ed file's content without an fsync: a new file
    renamed over it, or the file truncated to 0 (O_TRUNC or ftruncate)
    and written again and closed. With auto_da_alloc the new data is
    written before the commit of the rename or truncate: until that
    commit the file holds its old content or (a rename) the new one or
    (a truncate) a prefix of the new one; once a later commit returned,
    the new content, whole."""
    r = random.Random(seed)
    top = "p%d" % seed
    os.mkdir(os.path.join(mnt, top))
    commit = Committer(mnt, rec, top, r)
    kinds = ("rename", "otrunc", "ftrunc")
    for i in range(nfiles):
        kind = kinds[i % len(kinds)]
        rel = "%s/%s%d" % (top, kind, i)
        full = os.path.join(mnt, rel)
        old = r.randbytes(r.choice((100, 5000, 70000)))
        fd = os.open(full, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, old)
        os.fsync(fd)
        os.close(fd)
        rec.exact(rel, old)
        new = r.randbytes(r.choice((1, 4096, 9000, 100000, 700000)))
        if kind == "rename":
            tmp = full + ".tmp"
            fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            _write_all(fd, new, r)
            os.close(fd)
            rec.rename(rel, old, new)
            os.rename(tmp, full)
        else:
            rec.prefix(rel, new, olds=[old])
            if kind == "otrunc":
                fd = os.open(full, os.O_WRONLY | os.O_TRUNC)
            else:
                fd = os.open(full, os.O_WRONLY)
                os.ftruncate(fd, 0)
            _write_all(fd, new, r)
            os.close(fd)
        if r.random() < 0.5:
            time.sleep(0.2)     # writeback may start on its own
        commit()
        rec.exact(rel, new)
    return nfiles


def mmapstores(mnt, rec, seed, nfiles):
    """Stores through a shared mapping mixed with write(2) and read(2) on
    the same pages: each sees the other's bytes at once (any difference is
    returned as a problem), and msync+fsync makes the model's content
    durable. Then stores without msync and an unrelated commit: each block
    holds one of its versions, never zeros or other bytes; a last msync
    and fsync make the final content exact."""
    import mmap
    r = random.Random(seed)
    top = "m%d" % seed
    os.mkdir(os.path.join(mnt, top))
    commit = Committer(mnt, rec, top, r)
    problems = []
    for i in range(nfiles):
        rel = "%s/m%d" % (top, i)
        full = os.path.join(mnt, rel)
        size = r.choice((8192, 65536 + 100, 300000))
        # a tail left a hole by ftruncate: stores and writes there
        # allocate
        hole = r.choice((0, 8192, 4096 + 100, size // 2))
        model = bytearray(r.randbytes(size - hole) + bytes(hole))
        fd = os.open(full, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            os.write(fd, model[:size - hole])
            os.ftruncate(fd, size)
            os.fsync(fd)
            rec.exact(rel, model)
            mm = mmap.mmap(fd, size)
            try:
                rec.mod(rel)
                for k in range(8):
                    off = r.randrange(size)
                    n = min(r.choice((1, 100, 4096, 10000)), size - off)
                    data = r.randbytes(n)
                    how = r.choice(("store", "write"))
                    if how == "store":
                        mm[off:off + n] = data
                    else:
                        os.pwrite(fd, data, off)
                    model[off:off + n] = data
                    if mm[:] != model:
                        problems.append("%s: the mapping misses a %s at %d" % (rel, how, off))
                    if os.pread(fd, size, 0) != model:
                        problems.append("%s: read(2) misses a %s at %d" % (rel, how, off))
                # msync(MS_SYNC) alone is an fdatasync of the range; fsync
                # alone writes the mapping's dirty pages too
                if i % 2:
                    mm.flush()
                else:
                    os.fsync(fd)
                rec.exact(rel, model)
                versions = [bytes(model)]
                stores = []
                for k in range(6):
                    off = r.randrange(size)
                    n = min(r.choice((1, 100, 4096, 10000)), size - off)
                    stores.append((off, r.randbytes(n)))
                    model[off:off + n] = stores[-1][1]
                    versions.append(bytes(model))
                rec.blocks(rel, versions)
                for off, data in stores:
                    mm[off:off + len(data)] = data
                commit()
                mm.flush()
                os.fsync(fd)
                rec.exact(rel, model)
                # stores and write(2) at once into different bytes of the
                # same pages: one page cache on ext4, so neither undoes
                # the other
                rec.mod(rel)
                racing_halves(fd, mm, model, r)
                if mm[:] != model:
                    problems.append("%s: the mapping lost bytes of a write(2) racing "
                                    "with stores into the same page" % rel)
                mm.flush()
                os.fsync(fd)
                if os.pread(fd, size, 0) != model:
                    problems.append("%s: read(2) after msync+fsync misses bytes of a "
                                    "write(2) or store racing in the same page" % rel)
                rec.exact(rel, model)
            finally:
                mm.close()
        finally:
            os.close(fd)
    return problems


def racing_halves(fd, mm, model, r, rounds=150):
    """A thread stores into the first half of each of the file's first
    pages while this one writes the second halves with pwrite, @rounds
    times: @model gets what each wrote last."""
    npages = min(len(model) // 4096, 4)
    half = 2048
    stores = [[r.randbytes(half) for _ in range(npages)] for _ in range(rounds)]
    writes = [[r.randbytes(half) for _ in range(npages)] for _ in range(rounds)]

    def storer():
        for k in range(rounds):
            for p in range(npages):
                mm[p * 4096:p * 4096 + half] = stores[k][p]
    t = threading.Thread(target=storer)
    t.start()
    for k in range(rounds):
        for p in range(npages):
            os.pwrite(fd, writes[k][p], p * 4096 + half)
    t.join()
    for p in range(npages):
        model[p * 4096:p * 4096 + half] = stores[-1][p]
        model[p * 4096 + half:(p + 1) * 4096] = writes[-1][p]


def fullreuse(mnt, rec, seed, rounds):
    """A nearly full filesystem, blocks freed and reused: fill it, fsync a
    file X, fill the rest, unlink X without an fsync, write Y (as big as
    X) into the space X freed, then commit later. Until the unlink
    commits, X may come back after a crash, and then only as it was: its
    blocks must not be handed to Y before the freeing commit. Y itself is
    a prefix of its data until its fsync, then exact."""
    r = random.Random(seed)
    top = "u%d" % seed
    os.mkdir(os.path.join(mnt, top))
    commit = Committer(mnt, rec, top, r)

    def fill(name, keep):
        """Take all the space there is (as the filesystem lets this user
        have it: ext4 keeps some for itself), then give back @keep blocks,
        committed."""
        fd = os.open(os.path.join(mnt, top, name), os.O_CREAT | os.O_WRONLY, 0o644)
        off, chunk = 0, 4 << 20
        try:
            while chunk >= 4096:
                try:
                    _fallocate(fd, 0, off, chunk)
                    off += chunk
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
            os.ftruncate(fd, max(0, off - keep * 4096))
        finally:
            os.close(fd)
        commit()

    fill("fill", 2048)
    for k in range(rounds):
        x = "%s/x%d" % (top, k)
        y = "%s/y%d" % (top, k)
        xdata = r.randbytes(r.choice((1 << 20, 1536 << 10)))
        fd = os.open(os.path.join(mnt, x), os.O_CREAT | os.O_WRONLY, 0o644)
        _write_all(fd, xdata, r)
        os.fsync(fd)
        os.close(fd)
        rec.exact(x, xdata)
        fill("rest", 32)
        rec.unlink(x)
        os.unlink(os.path.join(mnt, x))
        ydata = r.randbytes(len(xdata))
        # out of space, ext4 writes back the pages it can allocate and
        # retries the others after a commit: the size may pass blocks
        # still holes (seen on Linux 6.18): only Y's data or NULs
        rec.prefix(y, ydata, absent=True, holes=True)
        fd = os.open(os.path.join(mnt, y), os.O_CREAT | os.O_WRONLY, 0o644)
        _write_all(fd, ydata, r)
        time.sleep(0.3)
        os.fsync(fd)
        os.close(fd)
        rec.exact(y, ydata)
        # room for the next round: Y and the rest go, committed
        rec.mod(y)
        os.unlink(os.path.join(mnt, y))
        os.unlink(os.path.join(mnt, top, "rest"))
        commit()
        rec.gone(x)
        rec.gone(y)
    return rounds


LOADFILES = ("/usr/share/dbench/client.txt", "/usr/share/dbench4/client.txt",
             "/usr/local/share/client.txt")


def checkpoint(mnt, rec, nfiles=400, rounds=3):
    """Checkpoints while the running transaction has freed a block the log
    holds. On a 4 MiB journal, each round logs a new directory's block
    (mkdir, fsync of its parent), then removes it in a big transaction
    (nfiles new directories: as many new directory blocks, nfiles/16 inode
    table blocks) that the log, wrapped, has no room for from the second
    round on, so that its commit must checkpoint first: the blocks logged
    before are all distinct, no later copy releases them, and writeback
    (periodic writeback off) does not take them home. Until that commit,
    the committed metadata still points at the directory's block: the
    checkpoint must write its logged copy home. Only commits here (fsync),
    no syncfs."""
    def fsync_dir(path):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    many = os.path.join(mnt, "many")
    os.mkdir(many)
    keep = os.path.join(mnt, "keep")
    data = b"kept across the checkpoints\n" * 100
    fd = os.open(keep, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    rec.fsynced("keep", data, rec.pos())
    for r in range(rounds):
        gone = os.path.join(mnt, "gone%d" % r)
        os.mkdir(gone)
        fsync_dir(mnt)
        os.rmdir(gone)
        for i in range(nfiles):
            os.mkdir(os.path.join(many, "r%d-%d" % (r, i)))
        fsync_dir(many)


def ordered(mnt, rec, seed, nfiles):
    """Ordered mode under load: a streamer writes files of 256 KiB to 2 MiB
    in 64 KiB writes 2 ms apart, never synced, that background writeback (mounted
    with a small background threshold) allocates and writes while a
    syncer creates small files and fsyncs each (recorded): every commit
    then closes over allocations whose data writes are in flight. Every
    file is a stream record: a block its metadata reaches before its data
    shows the image's stale pattern. Returns the files written."""
    top = "o%d" % seed
    os.mkdir(os.path.join(mnt, top))
    done = threading.Event()
    err = []

    def streamer():
        r = random.Random(seed)
        try:
            for i in range(nfiles):
                rel = "%s/big%d" % (top, i)
                data = rec.stream(seed, rel, r.choice((256, 640, 1024, 2048)) * 1024)
                with open(os.path.join(mnt, rel), "wb") as f:
                    for off in range(0, len(data), 65536):
                        f.write(data[off:off + 65536])
                        time.sleep(0.002)   # paced: written back as it goes
        except BaseException as e:  # noqa: B902
            err.append(e)
        done.set()

    t = threading.Thread(target=streamer)
    t.start()
    i = 0
    while not done.is_set():
        rel = "%s/small%d" % (top, i)
        data = rec.stream(seed, rel, 4096 * (1 + i % 3) + 100)
        fd = os.open(os.path.join(mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        rec.fsynced(rel, data, rec.pos())
        os.close(fd)
        i += 1
    t.join()
    if err:
        raise err[0]
    return nfiles + i


def disksize(mnt, rec, seed, rounds):
    """Unsynced files, each then changed in a way that logs its inode, and
    an fsync'ed file appended to and chmod'ed, then an fsync of another
    file commits them all, in each of @rounds. Every file is a "prefix"
    stream: no state may show a size its data has not reached."""
    r = random.Random(seed)
    for i in range(rounds):
        d = "z%d" % i
        os.mkdir(os.path.join(mnt, d))

        def put(name, then, paths=None):
            rel = "%s/%s" % (d, name)
            data = rec.stream(seed, rel, r.choice((1, 4096, 50000, 108894, 300000)),
                              prefix=True, paths=paths)
            with open(os.path.join(mnt, rel), "wb") as f:
                f.write(data)
            then(os.path.join(mnt, rel))

        put("chmod", lambda p: os.chmod(p, 0o600))
        put("rename", lambda p: os.rename(p, p + "2"), paths=("%s/rename2" % d,))
        put("link", lambda p: os.link(p, p + "2"), paths=("%s/link" % d, "%s/link2" % d))
        put("xattr", lambda p: os.setxattr(p, "user.k", b"v"))
        put("utime", lambda p: os.utime(p, (1000000, 1000000)))
        rel = "%s/append" % d
        data = rec.stream(seed, rel, 108894, prefix=True)
        fd = os.open(os.path.join(mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data[:50000])
        os.fsync(fd)
        rec.fsynced(rel, data[:50000], rec.pos())
        rec.mod(rel)
        os.write(fd, data[50000:])
        os.close(fd)
        os.chmod(os.path.join(mnt, rel), 0o640)
        rel = "%s/other" % d
        data = rec.stream(seed, rel, 100 + i)
        fd = os.open(os.path.join(mnt, rel), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        rec.fsynced(rel, data, rec.pos())
        os.close(fd)


def dbench(mnt, seconds, clients=2):
    """dbench on the mount; returns its exit code (None: not installed)."""
    prog = shutil.which("dbench")
    if prog is None:
        return None
    cmd = [prog, "-D", mnt, "-t", str(seconds)]
    lf = next((p for p in LOADFILES if os.path.exists(p)), None)
    if lf:
        cmd += ["-c", lf]
    cmd.append(str(clients))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       stdin=subprocess.DEVNULL, timeout=seconds + 300)
    return p.returncode


# workloads of synchronous writes, inode changes after unsynced writes,
# replacements without fsync, mmap stores and block reuse on a full
# filesystem: their records say what ext4 (data=ordered, auto_da_alloc)
# gives after a crash, stricter than a stream record (no NULs where data
# was written)
NEW_WORKLOADS = ("syncwrite", "inodechange", "replace", "mmap", "fullreuse")


def run_new(name, mnt, rec, seed, size):
    """Run one of NEW_WORKLOADS; returns the problems the workload itself
    saw (mmap: incoherence)."""
    if name == "syncwrite":
        syncwrite(mnt, rec, seed, 12 * size)
    elif name == "inodechange":
        inodechange(mnt, rec, seed, 10 * size)
    elif name == "replace":
        replace(mnt, rec, seed, 12 * size)
    elif name == "mmap":
        return mmapstores(mnt, rec, seed, 6 * size)
    elif name == "fullreuse":
        fullreuse(mnt, rec, seed, 2 * size)
    return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=("random", "faults", "durability", "ordered",
                                         "dbench", "checkpoint", "disksize") + NEW_WORKLOADS)
    ap.add_argument("--mnt", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=200)
    a = ap.parse_args()
    rec = Record(a.log, a.record)
    try:
        if a.workload in ("random", "faults"):
            random_ops(a.mnt, rec, a.seed, a.ops, faults=a.workload == "faults")
            if a.workload == "faults":
                durability(a.mnt, rec, a.seed, max(a.ops // 8, 1), faults=True)
        elif a.workload == "durability":
            durability(a.mnt, rec, a.seed, a.ops)
        elif a.workload == "ordered":
            ordered(a.mnt, rec, a.seed, a.ops)
        elif a.workload == "checkpoint":
            checkpoint(a.mnt, rec)
        elif a.workload in NEW_WORKLOADS:
            out = run_new(a.workload, a.mnt, rec, a.seed, 1)
            if out:
                print("\n".join(out))
                return 1
        elif a.workload == "disksize":
            disksize(a.mnt, rec, a.seed, a.ops)
        else:
            rc = dbench(a.mnt, a.ops)
            if rc:
                print("dbench: exit %s" % rc)
                return 1
    finally:
        rec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
