#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""auto_da_alloc: files replaced without fsync keep their new content
across a crash, as with the kernel's ext4.

Two ways applications replace a file's content without fsync, each on
files of several sizes whose old content was fsync'ed:

- rename-over: the new content written to a temp file (no fsync), the
  temp file renamed over the file;
- truncate and rewrite: open(O_TRUNC), ftruncate(fd, 0) or truncate(path,
  0), the new content written, the file closed.

Then a commit happens (an fsync of an unrelated file, or commit=1 and a
wait until the journal has committed twice since), and the daemon is
killed with SIGKILL. After the kernel's ext4 replays a copy of the log and
after wbcfs replays the device, e2fsck -fn is clean and:

1. with auto_da_alloc (the default) every replaced file holds its new
   content, whole: the rename and the close wrote the data before the
   commit took the new name or the new size (/.wbcfs/vmstat counts them:
   one per rename over a file, none for a rename to a new name, one per
   close after a truncation; and FLUSH requests only for the closes
   after open(O_TRUNC) or truncate(2): the close after ftruncate(fd, 0)
   writes at its RELEASE, which comes after close(2) returns, so the
   test waits for those before the commit);
2. with noauto_da_alloc the files may come back with the new size and no
   data (zeros) or empty, as before auto_da_alloc existed (kernel ext4
   with noauto_da_alloc, or ext3 in data=writeback): each file is
   classified and the classes printed; never anything but the old
   content, the new, zeros or nothing, and nothing is counted.

    WBCFS_BIN=build/wbcfs test/integration/test_autoda.py [--kernel]
(with --kernel the daemon cannot be killed: the mount is unmounted
cleanly, which checks the test's own expectations).
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_eq, t_is_kernel, t_log,  # noqa: E402
                    t_main, t_run, t_step)

# sizes of the new content: below a page, a page, pages and a bit, a
# larger file written in pieces
SIZES = (1, 100, 4096, 4097, 65536 + 13, MIB + 517)
# no periodic writeback, no timed commits: only what the test asks for
# reaches the device (the cache is far below the background threshold)
QUIET = ["cache_size=256M", "dirty_expire_centisecs=360000", "dirty_writeback_centisecs=0"]


def content(tag, name, n):
    return random.Random("%s/%s" % (tag, name)).randbytes(n)


def write_all(fd, data):
    off = 0
    while off < len(data):
        off += os.write(fd, data[off:off + 256 * 1024])


def write_file(path, data, flags=os.O_CREAT | os.O_WRONLY, sync=False):
    fd = os.open(path, flags, 0o644)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def vmstat(mnt):
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def journal_commits(mnt):
    with open(os.path.join(mnt, ".wbcfs", "journal")) as f:
        for line in f:
            k, _, v = line.partition(" ")
            if k == "commits":
                return int(v)
    raise TFail("/.wbcfs/journal has no commits line")


class Files:
    """The replaced files of one run: name -> (old, new content)."""

    def __init__(self, mnt, tag):
        self.mnt, self.tag, self.want = mnt, tag, {}
        self.renames = self.closes = 0

    def path(self, name):
        return os.path.join(self.mnt, name)

    def setup(self, name, size):
        old = content(self.tag + "-old", name, size // 2 + 4096)
        new = content(self.tag + "-new", name, size)
        write_file(self.path(name), old, sync=True)
        self.want[name] = (old, new)
        return new

    def rename_over(self, size):
        name = "r%d" % size
        new = self.setup(name, size)
        write_file(self.path(name + ".tmp"), new)
        os.rename(self.path(name + ".tmp"), self.path(name))
        self.renames += 1

    def truncate(self, how, size):
        name = "%s%d" % (how, size)
        new = self.setup(name, size)
        p = self.path(name)
        if how == "otrunc":
            write_file(p, new, os.O_WRONLY | os.O_TRUNC)
        elif how == "ftrunc":
            fd = os.open(p, os.O_RDWR)
            try:
                os.ftruncate(fd, 0)
                write_all(fd, new)  # from offset 0: nothing read or written before
            finally:
                os.close(fd)
        else:
            os.truncate(p, 0)
            write_file(p, new, os.O_WRONLY)
        self.closes += 1

    def replace_all(self, sizes):
        for size in sizes:
            self.rename_over(size)
        for how in ("otrunc", "ftrunc", "trunc"):
            for size in sizes:
                self.truncate(how, size)
        # a rename to a new name replaces nothing: not counted
        write_file(self.path("fresh.tmp"), b"fresh file\n")
        os.rename(self.path("fresh.tmp"), self.path("fresh"))


def kill_daemon(env, m):
    env.kill(m)


def classify(got, old, new):
    if got == new:
        return "new"
    if got == old:
        return "old"
    if not got:
        return "empty"
    if len(got) == len(new) and not got.strip(b"\0"):
        return "zeros"
    # written back in part: each page the new one's or zeros
    pages = [(got[i:i + 4096], new[i:i + 4096]) for i in range(0, len(got), 4096)]
    if len(got) == len(new) and all(g in (n, bytes(len(g))) for g, n in pages):
        return "part"
    return "other"


def check_root(root, files, auto, what):
    """The replaced files under @root as the run's mode promises; returns
    the classes seen, name -> class."""
    seen = {}
    for name, (old, new) in sorted(files.want.items()):
        with open(os.path.join(root, name), "rb") as f:
            got = f.read()
        c = seen[name] = classify(got, old, new)
        if auto:
            t_check(c == "new", "%s: %s: %d bytes, %s content, not the new %d bytes written "
                    "before the commit" % (what, name, len(got), c, len(new)))
        else:
            t_check(c != "other", "%s: %s: %d bytes that are neither its old content, its "
                    "new, zeros nor nothing" % (what, name, len(got)))
    t_check(os.path.exists(os.path.join(root, "fresh")), "%s: the renamed new file is lost"
            % what)
    t_check(not any(n.endswith(".tmp") for n in os.listdir(root)),
            "%s: a temp file is still there after its committed rename" % what)
    return seen


def replays(env, dev, files, auto, tag):
    """The kernel's replay of a copy, then wbcfs's of the device."""
    t_step("%s: the kernel's ext4 replays a copy" % tag)
    img = os.path.join(env.tmp, tag + "-kernel.img")
    t_run(["cp", "--sparse=always", dev, img])
    kdev = env.loop(img)
    kmnt = env.mkdir("k-" + tag)
    t_run(["mount", "-t", "ext4", kdev, kmnt])
    try:
        k_seen = check_root(kmnt, files, auto, tag + ", kernel replay")
    finally:
        t_run(["umount", kmnt])
    env.fsck(kdev)
    env.detach(kdev)
    os.unlink(img)

    t_step("%s: wbcfs replays the device" % tag)
    m = env.mount(dev, QUIET)
    try:
        w_seen = check_root(m.mnt, files, auto, tag + ", wbcfs replay")
    finally:
        env.umount(m)
    t_check(t_is_kernel() or "journal recovered" in m.daemon_log(),
            "%s: wbcfs did not replay the journal:\n%s" % (tag, m.daemon_log()))
    env.fsck(dev)
    t_eq(w_seen, k_seen, "%s: what the two replays show" % tag)
    classes = {}
    for name, c in w_seen.items():
        classes.setdefault(c, []).append(name)
    t_log("%s: after the crash: %s" % (tag, "; ".join(
        "%s: %s" % (c, " ".join(sorted(v))) for c, v in sorted(classes.items()))))


def counters(m):
    if t_is_kernel():
        return (0, 0, 0)
    vm = vmstat(m.mnt)
    return (vm.get("nr_auto_da_alloc_rename", 0), vm.get("nr_auto_da_alloc_close", 0),
            vm.get("nr_flush_requests", 0))


def wait_releases(m, before, files):
    """The close after ftruncate(fd, 0) writes the data at the RELEASE,
    which FUSE sends after close(2) has returned: wait for those before
    the commit (the closes after open(O_TRUNC) or truncate(2) wrote it at
    their FLUSH, before close(2) returned)."""
    end = time.monotonic() + 60
    while counters(m)[1] - before[1] < files.closes:
        t_check(time.monotonic() < end, "closes after a truncation not all counted in 60 s")
        time.sleep(0.05)
    return counters(m)


def part_fsync_commit(env, auto):
    tag = "auto" if auto else "noauto"
    t_step("%s: files replaced, an unrelated fsync commits, SIGKILL" % tag)
    dev = env.new_fs(256 * MIB, name=tag + ".img")
    m = env.mount(dev, QUIET + ["commit=600"] + ([] if auto else ["noauto_da_alloc"]))
    files = Files(m.mnt, tag)
    before = counters(m)
    files.replace_all(SIZES)
    after = wait_releases(m, before, files) if auto else counters(m)
    # the commit: of the running transaction, with every change above
    write_file(files.path("marker"), b"commit\n", sync=True)
    kill_daemon(env, m)
    replays(env, dev, files, auto, tag)
    if not t_is_kernel():
        t_eq((after[0] - before[0], after[1] - before[1]),
             (files.renames, files.closes) if auto else (0, 0),
             "%s: renames and closes that wrote the file (vmstat)" % tag)
        # a FLUSH round trip only for the closes after open(O_TRUNC) or
        # truncate(2) (not ftruncate): no other close sends one
        t_eq(after[2] - before[2], 2 * len(SIZES) if auto else 0,
             "%s: FLUSH requests (vmstat nr_flush_requests)" % tag)
    env.detach(dev)


def part_timed_commit(env):
    tag = "timed"
    t_step("%s: files replaced, no fsync at all: commit=1, two commits, SIGKILL" % tag)
    dev = env.new_fs(256 * MIB, name=tag + ".img")
    m = env.mount(dev, QUIET + ["commit=1"])
    files = Files(m.mnt, tag)
    files.replace_all((100, 65536 + 13))
    if not t_is_kernel():
        # a commit running now may have begun before the last change: the
        # one after it (commits run one at a time) holds it. An empty
        # transaction is not committed: a directory made now and then
        # keeps one coming
        c0 = journal_commits(m.mnt)
        end, n = time.monotonic() + 120, 0
        while journal_commits(m.mnt) < c0 + 2:
            t_check(time.monotonic() < end, "commit=1: no two commits in 120 s")
            os.mkdir(files.path("tick%d" % n))
            n += 1
            time.sleep(0.2)
    kill_daemon(env, m)
    replays(env, dev, files, True, tag)
    env.detach(dev)


def body(env):
    part_fsync_commit(env, True)
    part_timed_commit(env)
    part_fsync_commit(env, False)


if __name__ == "__main__":
    if "--kernel" in sys.argv:
        os.environ["WBCFS_TEST_TARGET"] = "kernel"
    t_main("autoda", body, deadline_s=280)
