#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Shared mmap coherent with read(2)/write(2), and parallel writes.

Mappings: a store through a MAP_SHARED mapping is seen by read(2); write(2)
is seen through a mapping (also while other processes keep faulting the
same pages in); truncate down and up shows through a mapping; a file grown
by write(2) and then mapped; a store past EOF in the last page does not
become file data when write(2), ftruncate or fallocate extends the file;
two processes see each other's stores; one process storing through a
mapping while another writes other pages and a third reads; msync + fsync make the stores
durable (read from the device with debugfs while
still mounted); munmap and close without msync lose nothing; O_RDONLY files
map MAP_PRIVATE and MAP_SHARED read-only, and refuse a writable shared map.

Parallel writes: 8 threads pwrite 1 MiB pieces to distinct ranges of one
pre-written file, then again while another thread appends to it; the
content must match, and the daemon must have had more than one write
inside the same file at once (nr_parallel_writes_max in its log at
unmount); the same through the one descriptor O_CREAT returned, in a
mount of its own (CREATE replies carry the open flags there). Then 8
threads write 512-byte slices of every page of a sparse file (page locks,
delalloc reservations).

Every file is kept in a model; after unmount, e2fsck -fn must be clean and
the kernel's ext4 must see the model's bytes.

    WBCFS_BIN=build/wbcfs test/integration/test_mmap.py [--kernel]
"""

import ctypes
import errno
import mmap
import os
import random
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, TFail, t_check, t_eq, t_errno, t_is_kernel,  # noqa: E402
                    t_log, t_main, t_manifest, t_read_all, t_run, t_step,
                    t_write_all)

PAGE = 4096
RW = mmap.PROT_READ | mmap.PROT_WRITE
NTHREADS = 8
PAR_FILE_MIB = 64
FAULT_WRITES = int(os.environ.get("WBCFS_MMAP_FAULT_WRITES", "400"))


def pattern(seed, n):
    return random.Random(seed).randbytes(n)


class Model:
    """The bytes every file should hold, by name."""

    def __init__(self, mnt):
        self.mnt = mnt
        self.files = {}

    def path(self, name):
        return os.path.join(self.mnt, name)

    def create(self, name, data):
        self.files[name] = bytearray(data)
        fd = os.open(self.path(name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        t_write_all(fd, data, 0)
        return fd

    def store(self, name, off, data):
        f = self.files[name]
        if len(f) < off + len(data):
            f.extend(bytes(off + len(data) - len(f)))
        f[off:off + len(data)] = data

    def truncate(self, name, size):
        f = self.files[name]
        if size < len(f):
            del f[size:]
        else:
            f.extend(bytes(size - len(f)))

    def check_fd(self, name, fd, what):
        got = t_read_all(fd, len(self.files[name]) + PAGE, 0)
        if got != bytes(self.files[name]):
            raise TFail("%s: read(2) of %s differs from the model (%s)"
                        % (what, name, first_diff(got, self.files[name])))


def first_diff(got, want):
    n = min(len(got), len(want))
    for i in range(n):
        if got[i] != want[i]:
            return "first difference at byte %d: got %r, want %r" % (
                i, bytes(got[i:i + 8]), bytes(want[i:i + 8]))
    return "lengths %d and %d" % (len(got), len(want))


def check_map(m, lo, want, what):
    got = m[lo:lo + len(want)]
    if got != bytes(want):
        raise TFail("%s: mapping bytes [%d, %d) differ (%s)"
                    % (what, lo, lo + len(want), first_diff(got, want)))


# --------------------------------------------------------------------------
# mappings

def t_store_then_read(model):
    t_step("stores through MAP_SHARED are seen by read(2)")
    name = "store-read"
    size = 3 * PAGE + 100
    fd = model.create(name, pattern(1, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    for i, (off, n) in enumerate(((100, 100), (PAGE - 6, 200), (size - 10, 10),
                                  (2 * PAGE, PAGE))):
        data = pattern(100 + i, n)
        m[off:off + n] = data
        model.store(name, off, data)
        model.check_fd(name, fd, "store %d" % i)
    fd2 = os.open(model.path(name), os.O_RDONLY)
    model.check_fd(name, fd2, "a second descriptor")
    os.close(fd2)
    m.close()
    os.close(fd)


def t_write_then_map(model):
    t_step("write(2) is seen through a mapping")
    name = "write-map"
    size = 8 * PAGE
    fd = model.create(name, pattern(2, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    check_map(m, 0, model.files[name], "before writes")
    wfd = os.open(model.path(name), os.O_WRONLY)
    rng = random.Random(3)
    for i in range(64):
        off = rng.randrange(size - 1)
        n = rng.randint(1, min(3 * PAGE, size - off))
        data = pattern(1000 + i, n)
        t_write_all(wfd, data, off)
        model.store(name, off, data)
        check_map(m, 0, model.files[name], "after write %d at %d+%d" % (i, off, n))
    os.close(wfd)
    m.close()
    os.close(fd)


CHILD_FAULTER = r"""
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
sys.stdout.write("ready\n"); sys.stdout.flush()
n = 0
while not os.path.exists(sys.argv[2]):
    for off in range(0, size, 4096):
        n += m[off]
m.close()
"""


def t_write_while_faulting(env, model):
    t_step("write(2) is seen through a mapping while other processes fault the pages")
    name = "write-fault"
    size = 256 * PAGE
    fd = model.create(name, pattern(4, size))
    stop = os.path.join(env.tmp, "stop-faulter")
    children = [subprocess.Popen([sys.executable, "-c", CHILD_FAULTER, model.path(name), stop],
                                 stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for child in children:
            t_eq(child.stdout.readline().strip(), "ready", "faulting child")
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        rng = random.Random(5)
        for i in range(FAULT_WRITES):
            off = rng.randrange(0, size, 512)
            n = min(rng.choice((512, PAGE, 16 * PAGE, 128 * PAGE)), size - off)
            data = pattern(2000 + i, n)
            t_write_all(fd, data, off)
            model.store(name, off, data)
            check_map(m, off, data, "write %d at %d+%d" % (i, off, n))
        check_map(m, 0, model.files[name], "after all writes")
        m.close()
    finally:
        open(stop, "w").close()
        for child in children:
            child.wait(60)
        os.unlink(stop)
    os.close(fd)


CHILD_STORER = r"""
import mmap, os, random, sys
path, npages, nstores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, npages * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
rng = random.Random(77)
sys.stdout.write("ready\n"); sys.stdout.flush()
for i in range(nstores):
    pg = rng.randrange(npages // 2)
    m[pg * 4096:(pg + 1) * 4096] = bytes([i % 251 + 1]) * 4096
    if i % 500 == 499:
        m.flush()
m.close()
"""

CHILD_READER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
while not os.path.exists(sys.argv[2]):
    os.pread(fd, 1 << 20, 0)
"""


def t_mixed_stress(env, model):
    t_step("stores through a mapping, write(2) and read(2) of one file at once")
    name = "mixed"
    npages, nstores, nwrites = 256, 4000, 400
    size = npages * PAGE
    fd = model.create(name, bytes(size))
    path = model.path(name)
    stop = os.path.join(env.tmp, "stop-reader")
    reader = subprocess.Popen([sys.executable, "-c", CHILD_READER, path, stop])
    storer = subprocess.Popen([sys.executable, "-c", CHILD_STORER, path, str(npages),
                               str(nstores)], stdout=subprocess.PIPE, text=True)
    try:
        t_eq(storer.stdout.readline().strip(), "ready", "storing child")
        rng = random.Random(78)
        for i in range(nwrites):
            pg = rng.randrange(npages // 2, npages)     # the other half
            data = bytes([i % 251 + 1]) * (rng.choice((1, 2)) * PAGE)
            data = data[:size - pg * PAGE]
            t_write_all(fd, data, pg * PAGE)
            model.store(name, pg * PAGE, data)
        t_eq(storer.wait(120), 0, "storing child's exit status")
    finally:
        open(stop, "w").close()
        reader.wait(60)
        if storer.poll() is None:
            storer.kill()
        os.unlink(stop)
    rng = random.Random(77)
    for i in range(nstores):
        pg = rng.randrange(npages // 2)
        model.store(name, pg * PAGE, bytes([i % 251 + 1]) * PAGE)
    model.check_fd(name, fd, "after the mixed stores, writes and reads")
    os.close(fd)


def t_truncate(model):
    t_step("truncate down and up shows through a mapping")
    name = "truncate"
    size = 3 * PAGE
    fd = model.create(name, pattern(6, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    check_map(m, 0, model.files[name], "before truncate")
    os.truncate(model.path(name), 6000)
    model.truncate(name, 6000)
    check_map(m, 0, model.files[name], "after truncate to 6000")
    check_map(m, 6000, bytes(2 * PAGE - 6000), "the page tail past the new EOF")
    # (a load past the last page now raises SIGBUS: not tried)
    os.ftruncate(fd, size)
    model.truncate(name, size)
    check_map(m, 0, model.files[name], "after truncate back up to 3 pages")
    m[size - 5:size] = b"tail!"
    model.store(name, size - 5, b"tail!")
    model.check_fd(name, fd, "store after truncate up")
    m.close()
    os.close(fd)


def t_extend_then_map(model):
    t_step("a file grown by write(2), then mapped")
    name = "extend"
    fd = model.create(name, pattern(7, 10000))
    m = mmap.mmap(fd, 10000, mmap.MAP_SHARED, RW)
    check_map(m, 0, model.files[name], "first mapping")
    data = pattern(8, 1000)
    t_write_all(fd, data, 20000)
    model.store(name, 20000, data)
    t_eq(os.fstat(fd).st_size, 21000, "size after the extending write")
    m2 = mmap.mmap(fd, 21000, mmap.MAP_SHARED, RW)
    check_map(m2, 0, model.files[name], "mapping of the grown file")
    check_map(m, 0, model.files[name][:10000], "the old mapping")
    m2[20990:21000] = b"0123456789"
    model.store(name, 20990, b"0123456789")
    model.check_fd(name, fd, "store into the grown part")
    m2.close()
    m.close()
    os.close(fd)


def t_eof_tail(model):
    for how in ("write", "ftruncate", "fallocate"):
        t_step("a store past EOF in the last page is not file data once %s extends the file"
               % how)
        name = "eof-tail-" + how
        fd = model.create(name, pattern(15, 6000))
        m = mmap.mmap(fd, 6000, mmap.MAP_SHARED, RW)
        view = (ctypes.c_char * 6000).from_buffer(m)
        addr = ctypes.addressof(view)
        ctypes.memmove(addr + 7000, b"beyond EOF", 10)     # same page, past EOF
        if how == "write":
            data = pattern(16, 100)
            t_write_all(fd, data, 10000)
            model.store(name, 10000, data)
        elif how == "ftruncate":
            os.ftruncate(fd, 10100)
            model.truncate(name, 10100)
        else:
            os.posix_fallocate(fd, 9000, 1100)
            model.truncate(name, 10100)
        got = ctypes.string_at(addr + 6000, PAGE * 2 - 6000)
        t_eq(got, bytes(PAGE * 2 - 6000), "the mapping between the old EOF and its page end")
        model.check_fd(name, fd, "after %s extended the file" % how)
        del view
        m.close()
        os.close(fd)


CHILD_PEER = r"""
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4 * 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    cmd, off, data = line.split()
    off = int(off)
    if cmd == "store":
        m[off:off + len(data)] = data.encode()
        sys.stdout.write("ok\n")
    else:
        got = m[off:off + len(data)].decode(errors="replace")
        sys.stdout.write(("ok" if got == data else "got " + got) + "\n")
    sys.stdout.flush()
m.close()
"""


def t_two_processes(model):
    t_step("two processes mapping one file see each other's stores")
    name = "two-procs"
    size = 4 * PAGE
    fd = model.create(name, pattern(9, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    child = subprocess.Popen([sys.executable, "-c", CHILD_PEER, model.path(name)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(line):
        child.stdin.write(line + "\n")
        child.stdin.flush()
        return child.stdout.readline().strip()

    try:
        t_eq(child.stdout.readline().strip(), "ready", "peer process")
        for i in range(20):
            off = (i * 1237) % (size - 16)
            word = "child%03d" % i
            t_eq(ask("store %d %s" % (off, word)), "ok", "peer store")
            model.store(name, off, word.encode())
            check_map(m, off, word.encode(), "the child's store %d" % i)
            off2 = (i * 3301 + 77) % (size - 16)
            word2 = "parent%02d" % i
            m[off2:off2 + len(word2)] = word2.encode()
            model.store(name, off2, word2.encode())
            t_eq(ask("check %d %s" % (off2, word2)), "ok", "the parent's store %d in the child" % i)
    finally:
        child.stdin.close()
        child.wait(60)
    model.check_fd(name, fd, "after both processes stored")
    m.close()
    os.close(fd)


def t_unmap_without_msync(model):
    t_step("munmap and close without msync lose nothing")
    name = "no-msync"
    size = 64 * PAGE
    fd = model.create(name, pattern(10, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    for i in range(0, size, 3 * PAGE + 123):
        m[i:i + 100] = pattern(3000 + i, 100)
        model.store(name, i, pattern(3000 + i, 100))
    m.close()
    os.close(fd)
    name = "close-first"
    fd = model.create(name, pattern(11, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    os.close(fd)
    for i in range(0, size, 5 * PAGE + 7):
        m[i:i + 200] = pattern(4000 + i, 200)
        model.store(name, i, pattern(4000 + i, 200))
    m.close()
    fd = os.open(model.path(name), os.O_RDONLY)
    model.check_fd(name, fd, "stores after close, then munmap")
    os.close(fd)


def t_msync_durable(env, model, dev):
    t_step("msync(MS_SYNC) + fsync: the stores are on the device")
    name = "durable"
    size = 16 * PAGE
    fd = model.create(name, pattern(12, size))
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, RW)
    for i in range(0, size, PAGE + 99):
        m[i:i + 300] = pattern(5000 + i, 300)
        model.store(name, i, pattern(5000 + i, 300))
    m.flush()
    os.fsync(fd)
    if t_is_kernel():
        t_log("kernel ext4: metadata may sit in the journal; device check skipped")
    else:
        out = os.path.join(env.tmp, "durable.dump")
        src = dev
        if "has_journal" in t_run(["dumpe2fs", "-h", dev], quiet=True).stdout:
            # the inode may be in the journal only: replay a copy first
            src = os.path.join(env.tmp, "durable-copy.img")
            t_run(["cp", "--sparse=always", dev, src])
            p = t_run(["e2fsck", "-E", "journal_only", "-y", src], check=False)
            t_check(p.returncode in (0, 1), "e2fsck's replay of a copy: exit %d\n%s"
                    % (p.returncode, p.stdout))
        t_run(["debugfs", "-c", "-R", "dump /%s %s" % (name, out), src])
        with open(out, "rb") as f:
            got = f.read()
        if got != bytes(model.files[name]):
            raise TFail("debugfs dump of %s after msync+fsync differs (%s)"
                        % (name, first_diff(got, model.files[name])))
    m.close()
    os.close(fd)


def t_readonly_maps(model):
    t_step("O_RDONLY files: MAP_PRIVATE, read-only MAP_SHARED, no writable MAP_SHARED")
    name = "rdonly"
    size = 5 * PAGE + 17
    wfd = model.create(name, pattern(13, size))
    fd = os.open(model.path(name), os.O_RDONLY)
    priv = mmap.mmap(fd, size, mmap.MAP_PRIVATE, RW)
    check_map(priv, 0, model.files[name], "MAP_PRIVATE")
    priv[0:10] = b"private!!!"
    check_map(priv, 0, b"private!!!", "a private store")
    model.check_fd(name, fd, "after a private store")
    shared = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    data = pattern(14, 2 * PAGE)
    t_write_all(wfd, data, PAGE)
    model.store(name, PAGE, data)
    check_map(shared, 0, model.files[name], "read-only MAP_SHARED after write(2)")
    t_errno(errno.EACCES, mmap.mmap, fd, size, mmap.MAP_SHARED, RW,
            what="writable MAP_SHARED of an O_RDONLY descriptor")
    shared.close()
    priv.close()
    os.close(fd)
    os.close(wfd)


# --------------------------------------------------------------------------
# parallel writes

def piece(i, rnd):
    """1 MiB of bytes for piece i of round rnd (cheap to make and to check)."""
    head = ("piece %d round %d " % (i, rnd)).encode()
    return (head * (MIB // len(head) + 1))[:MIB]


def run_threads(fns):
    errs = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:
            errs.append(e)
    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]


def t_parallel_writes(model):
    name = "parallel"
    path = model.path(name)
    nr = PAR_FILE_MIB
    t_step("%d threads pwrite 1 MiB pieces to distinct ranges of one %d MiB file"
           % (NTHREADS, nr))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    for i in range(nr):
        t_write_all(fd, piece(i, 0), i * MIB)
    os.fsync(fd)
    os.close(fd)
    want = [piece(i, 0) for i in range(nr)]

    def writer(tid, rounds, extra=()):
        def fn():
            wfd = os.open(path, os.O_WRONLY)
            try:
                for rnd in rounds:
                    for i in range(tid, nr, NTHREADS):
                        t_write_all(wfd, piece(i, rnd), i * MIB)
            finally:
                os.close(wfd)
        return fn

    run_threads([writer(t, (1, 2, 3)) for t in range(NTHREADS)])
    want = [piece(i, 3) for i in range(nr)]
    check_pieces(path, want, "after the parallel writes")

    t_step("the same with another thread appending 1 MiB pieces meanwhile")
    nappend = 16

    def appender():
        afd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            for k in range(nappend):
                t_write_all(afd, piece(nr + k, 9))
        finally:
            os.close(afd)
    run_threads([writer(t, (4, 5)) for t in range(NTHREADS)] + [appender])
    want = [piece(i, 5) for i in range(nr)] + [piece(nr + k, 9) for k in range(nappend)]
    t_eq(os.stat(path).st_size, (nr + nappend) * MIB, "size after the appends")
    check_pieces(path, want, "after parallel writes and appends")
    model.files[name] = bytearray(b"".join(want))


def t_parallel_subpage(model):
    t_step("%d threads write 512-byte slices of the same pages of a sparse file"
           % NTHREADS)
    name = "parallel-slices"
    path = model.path(name)
    npages = 1024
    slice_len = PAGE // NTHREADS
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, npages * PAGE + 100)
    os.close(fd)

    def slicer(tid):
        def fn():
            wfd = os.open(path, os.O_WRONLY)
            try:
                for pg in range(npages):
                    data = bytes([(tid * 31 + pg) % 251 + 1]) * slice_len
                    t_write_all(wfd, data, pg * PAGE + tid * slice_len)
            finally:
                os.close(wfd)
        return fn
    run_threads([slicer(t) for t in range(NTHREADS)])
    want = bytearray(npages * PAGE + 100)
    for pg in range(npages):
        for tid in range(NTHREADS):
            off = pg * PAGE + tid * slice_len
            want[off:off + slice_len] = bytes([(tid * 31 + pg) % 251 + 1]) * slice_len
    model.files[name] = want
    fd = os.open(path, os.O_RDONLY)
    model.check_fd(name, fd, "after the slice writers")
    os.close(fd)


def t_parallel_create_fd(env, dev, opts):
    """Own mount, so that its nr_parallel_writes_max counts these writes
    alone: they all go through the descriptor O_CREAT returned, whose open
    flags came in the CREATE reply (the others test OPEN replies)."""
    t_step("%d threads pwrite through one descriptor that O_CREAT returned" % NTHREADS)
    m = env.mount(dev, opts=opts)
    path = os.path.join(m.mnt, "created")
    nr = 32
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    for i in range(nr):
        t_write_all(fd, piece(i, 0), i * MIB)

    def writer(tid, rnd):
        def fn():
            for i in range(tid, nr, NTHREADS):
                t_write_all(fd, piece(i, rnd), i * MIB)
        return fn

    # Whether two of these writes meet inside the daemon is up to the
    # scheduler (2 cores, shared): go on for up to 30 rounds until the
    # daemon has seen it; the content check holds for every round.
    rnd = 0
    for rnd in range(1, 31):
        run_threads([writer(t, rnd) for t in range(NTHREADS)])
        if rnd >= 3 and (t_is_kernel() or parallel_writes_max(m.mnt) > 1):
            break
    t_log("%d rounds of parallel writes" % rnd)
    want = [piece(i, rnd) for i in range(nr)]
    check_pieces(path, want, "after parallel writes through the O_CREAT descriptor")
    # a page-aligned read(2) must not make wbcfs take the file for one the
    # kernel caches: then this write (same bytes) stores nothing into the
    # kernel's page cache, as nothing in this mount is mapped
    rfd = os.open(path, os.O_RDONLY)
    t_eq(t_read_all(rfd, PAGE, PAGE), want[0][PAGE:2 * PAGE], "an aligned read(2)")
    os.close(rfd)
    t_write_all(fd, want[0], 0)
    os.close(fd)
    log = m.log
    env.umount(m)
    if not t_is_kernel():
        check_parallel_counter(log)
        check_no_invalidations(log)
    return bytearray(b"".join(want))


def check_pieces(path, want, what):
    fd = os.open(path, os.O_RDONLY)
    try:
        for i, w in enumerate(want):
            got = t_read_all(fd, MIB, i * MIB)
            if got != w:
                raise TFail("%s: MiB %d differs (%s)" % (what, i, first_diff(got, w)))
        t_eq(t_read_all(fd, 1, len(want) * MIB), b"", what + ": nothing past EOF")
    finally:
        os.close(fd)


def parallel_writes_max(mnt):
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        for line in f:
            k, v = line.split()[:2]
            if k == "nr_parallel_writes_max":
                return int(v)
    raise TFail("no nr_parallel_writes_max in .wbcfs/vmstat")


def check_parallel_counter(log):
    t_step("the daemon had several writes inside one file at once")
    with open(log, errors="replace") as f:
        text = f.read()
    mo = re.search(r"nr_parallel_writes_max (\d+)", text)
    t_check(mo is not None, "no nr_parallel_writes_max line in the daemon log:\n"
            + text[-2000:])
    n = int(mo.group(1))
    t_log("nr_parallel_writes_max %d" % n)
    t_check(n > 1, "nr_parallel_writes_max is %d: writes to one file were serialised" % n)


def check_no_invalidations(log):
    t_step("aligned read(2)s of a file nobody maps cost its writes no store "
           "into the kernel's page cache")
    with open(log, errors="replace") as f:
        text = f.read()
    for key in ("nr_inval_sent", "nr_store_sent"):
        mo = re.search(key + r" (\d+)", text)
        t_check(mo is not None, "no %s in the daemon log:\n" % key + text[-2000:])
        t_eq(int(mo.group(1)), 0, key + " in a mount without mappings")


# --------------------------------------------------------------------------

def body(env):
    dev = env.new_fs(1 * GIB)
    opts = ("cache_size=512M",)
    created = t_parallel_create_fd(env, dev, opts)
    m = env.mount(dev, opts=opts)
    model = Model(m.mnt)
    model.files["created"] = created
    t_store_then_read(model)
    t_write_then_map(model)
    t_write_while_faulting(env, model)
    t_mixed_stress(env, model)
    t_truncate(model)
    t_extend_then_map(model)
    t_eof_tail(model)
    t_two_processes(model)
    t_unmap_without_msync(model)
    t_msync_durable(env, model, dev)
    t_readonly_maps(model)
    t_parallel_writes(model)
    t_parallel_subpage(model)
    t_step("every file through the mount matches the model")
    for name in sorted(model.files):
        fd = os.open(model.path(name), os.O_RDONLY)
        try:
            model.check_fd(name, fd, "final")
        finally:
            os.close(fd)
    man = t_manifest(m.mnt)
    log = m.log
    env.umount(m)
    if not t_is_kernel():
        check_parallel_counter(log)
    env.verify_after_umount(dev, man)
    t_step("the kernel's ext4 sees the model's bytes")
    k = env.kernel_ro(dev)
    try:
        for name in sorted(model.files):
            with open(os.path.join(k.mnt, name), "rb") as f:
                got = f.read()
            if got != bytes(model.files[name]):
                raise TFail("kernel ext4: %s differs from the model (%s)"
                            % (name, first_diff(got, model.files[name])))
    finally:
        env.umount(k)


if __name__ == "__main__":
    t_main("mmap", body, deadline_s=400)
