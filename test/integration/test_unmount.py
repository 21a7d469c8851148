#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Unmount right after mass deletion, the orphan list, and crashes.

1. Mixed rounds: several processes create files, append to them with
   O_DIRECT writers running concurrently at 512-4096 byte alignments
   (threads, or Linux AIO with the file closed while writes are in flight:
   aio_append.c),
   rename, link, unlink, truncate, and write to files they hold open after
   unlinking them; each round ends with `rm -rf` of everything and an
   immediate umount (the kernel's FORGETs for the deleted inodes race with
   the unmount).  The daemon must exit 0 and `e2fsck -fn` must be clean
   after every round, with every block and inode free again.
2. SIGKILL with open-unlinked files: after a syncfs the superblock's orphan
   list holds exactly those inodes, chained through i_dtime.  The kernel's
   ext4 frees them at its mount (oracle for the on-disk format), wbcfs
   frees them at its mount, and `e2fsck -fn` is clean afterwards.
3. A create, mknod, mkdir or symlink whose inode-table read fails
   (trusted.wbcfs.fault_meta=read) returns EIO and leaves neither a name
   nor an allocated inode; a rename of a directory to another parent
   whose ".." cannot be read returns EIO and moves nothing.

WBCFS_TEST_TARGET=kernel runs part 1 against the kernel's ext4.
"""

import errno
import mmap
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_eq, t_is_kernel, t_log, t_main, t_run,  # noqa: E402
                    t_step)

NPROC = 4
ROUNDS = 4
ROUND_S = 3.0
ORPHANS = 48
ALIGNS = (512, 1024, 2048, 4096)
OPTS = ["cache_size=256M"]


def aligned_buf(n, fill):
    """An mmap (page-aligned) buffer of n bytes, for O_DIRECT."""
    b = mmap.mmap(-1, max(n, mmap.PAGESIZE))
    b.write(bytes([fill]) * n)
    return memoryview(b)[:n]


def direct_append(path, rnd, total):
    """Append ~total bytes to path with O_DIRECT from 3 concurrent threads,
    each claiming the next aligned range (like AIO submitting in flight)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    align = rnd.choice(ALIGNS)
    lock = threading.Lock()
    st = {"off": os.fstat(fd).st_size // align * align, "left": total}
    errs = []

    def writer(seed):
        r = random.Random(seed)
        buf = aligned_buf(align * 64, seed & 0xff)
        while True:
            n = align * r.randint(1, 64)
            with lock:
                if st["left"] <= 0:
                    return
                off = st["off"]
                st["off"] += n
                st["left"] -= n
            try:
                os.pwrite(fd, buf[:n], off)
            except OSError as e:
                errs.append(e)
                return

    ts = [threading.Thread(target=writer, args=(rnd.randrange(1 << 30),))
          for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.close(fd)
    if errs:
        raise errs[0]


def aio_bin():
    p = os.environ.get("WBCFS_AIO_APPEND") or os.path.join(
        os.path.dirname(os.path.abspath(os.environ.get("WBCFS_BIN", "build/wbcfs"))),
        "test", "integration", "aio_append")
    if not os.access(p, os.X_OK):
        raise TFail("%s not built (meson compile builds it)" % p)
    return p


def aio_append(path, rnd, total):
    """Append with Linux AIO, O_DIRECT, up to 16 writes in flight, the file
    closed before the last ones complete (test/integration/aio_append.c)."""
    p = subprocess.run([aio_bin(), path, str(total), str(rnd.choice(ALIGNS)),
                        str(rnd.choice((4, 8, 16)))], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode:
        if "No space left" in p.stdout:
            raise OSError(errno.ENOSPC, p.stdout.strip())
        raise TFail("aio_append %s: %s" % (path, p.stdout.strip()))


def worker(root, seed, duration, held):
    """Random namespace and data operations under root for duration s.
    Open-unlinked files stay in held (fds) and keep being written."""
    rnd = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    names = []
    end = time.monotonic() + duration
    n = 0
    while time.monotonic() < end:
        n += 1
        op = rnd.random()
        try:
            if op < 0.25 or len(names) < 3:
                p = os.path.join(root, "f%d" % n)
                append = aio_append if rnd.random() < 0.5 else direct_append
                append(p, rnd, rnd.randint(64, 1024) * 1024)
                names.append(p)
            elif op < 0.40:
                append = aio_append if rnd.random() < 0.5 else direct_append
                append(rnd.choice(names), rnd, rnd.randint(16, 512) * 1024)
            elif op < 0.50:
                old = names.pop(rnd.randrange(len(names)))
                new = os.path.join(root, "r%d" % n)
                if names and rnd.random() < 0.3:
                    new = rnd.choice(names)    # replace an existing file
                    names.remove(new)
                os.rename(old, new)
                names.append(new)
            elif op < 0.58:
                p = os.path.join(root, "l%d" % n)
                os.link(rnd.choice(names), p)
                names.append(p)
            elif op < 0.68:
                os.unlink(names.pop(rnd.randrange(len(names))))
            elif op < 0.78:
                p = names.pop(rnd.randrange(len(names)))
                fd = os.open(p, os.O_RDWR)
                os.unlink(p)
                held.append(fd)
            elif op < 0.88 and held:
                fd = rnd.choice(held)
                buf = aligned_buf(4096 * rnd.randint(1, 32), n & 0xff)
                os.pwrite(fd, buf, rnd.randrange(0, 8 * MIB, 4096))
                if rnd.random() < 0.3:
                    os.ftruncate(fd, rnd.randrange(0, 4 * MIB))
            else:
                os.truncate(rnd.choice(names), rnd.randrange(0, 2 * MIB))
        except FileNotFoundError:
            pass        # a name another step of this worker replaced
        except OSError as e:
            if e.errno == 28:   # ENOSPC: the small image is full; delete
                if names:
                    os.unlink(names.pop(0))
                continue
            raise
    # the last files, large and still dirty when the round deletes them
    direct_append(os.path.join(root, "big0"), rnd, 12 * MIB)
    aio_append(os.path.join(root, "big1"), rnd, 12 * MIB)


def run_workers(mnt, seed, duration, hold=False):
    """NPROC forked workers; with hold, each stops (SIGSTOP) holding its
    open-unlinked files instead of exiting. Returns the pids."""
    pids = []
    for i in range(NPROC):
        pid = os.fork()
        if pid == 0:
            rc = 0
            held = []
            try:
                worker(os.path.join(mnt, "p%d" % i), seed * 100 + i, duration, held)
                if hold:
                    for j in range(2):      # at least two per worker
                        p = os.path.join(mnt, "p%d" % i, "held%d" % j)
                        with open(p, "wb") as f:
                            f.write(b"x" * (256 * 1024))
                        held.append(os.open(p, os.O_RDWR))
                        os.unlink(p)
                    # and an O_TMPFILE: an orphan from its creation
                    fd = os.open(os.path.join(mnt, "p%d" % i),
                                 os.O_TMPFILE | os.O_RDWR, 0o600)
                    os.write(fd, b"t" * (128 * 1024))
                    held.append(fd)
                    os.kill(os.getpid(), signal.SIGSTOP)
            except BaseException as e:  # noqa: B902
                print("worker %d: %r" % (i, e), flush=True)
                rc = 1
            os._exit(rc)
        pids.append(pid)
    return pids


def reap(pids, what):
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        t_check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0,
                "%s: worker %d ended with status %#x" % (what, pid, st))


def free_counts(dev):
    """(free blocks, free inodes) from dumpe2fs -h."""
    out = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
    fb = int(re.search(r"^Free blocks:\s+(\d+)", out, re.M).group(1))
    fi = int(re.search(r"^Free inodes:\s+(\d+)", out, re.M).group(1))
    return fb, fi


def first_orphan(dev):
    out = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
    m = re.search(r"^First orphan inode:\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def debugfs(dev, req):
    return t_run(["debugfs", "-R", req, dev], quiet=True).stdout


def orphan_chain(dev):
    """The orphan list: inode numbers from s_last_orphan through i_dtime."""
    chain = []
    ino = first_orphan(dev)
    while ino and len(chain) < 10000:
        chain.append(ino)
        out = debugfs(dev, "stat <%d>" % ino)
        m = re.search(r"dtime:\s*0x([0-9a-f]+)", out)
        links = re.search(r"Links:\s*(\d+)", out)
        t_check(links and int(links.group(1)) == 0,
                "orphan %d has links %s" % (ino, links and links.group(1)))
        ino = int(m.group(1), 16) if m else 0
    return chain


def copy_image(env, dev, name):
    """A copy of dev's contents on a new loop device."""
    img = os.path.join(env.tmp, name)
    t_run(["cp", "--sparse=always", dev, img])
    return env.loop(img)


def mixed_rounds(env, dev):
    base = free_counts(dev)
    for r in range(ROUNDS):
        t_step("round %d: %d writers for %.0fs, rm -rf, immediate umount"
               % (r, NPROC, ROUND_S))
        m = env.mount(dev, OPTS)
        reap(run_workers(m.mnt, r + 1, ROUND_S), "round %d" % r)
        t_run(["sh", "-c", "rm -rf %s/p*" % m.mnt])
        env.umount(m)       # daemon exit status 0 checked here
        env.fsck(dev)
        t_eq(env.sb_state(dev), "clean", "state after round %d" % r)
        t_eq(free_counts(dev), base, "free (blocks, inodes) after round %d" % r)


def sigkill_round(env, dev):
    t_step("SIGKILL with open-unlinked and O_TMPFILE files")
    m = env.mount(dev, OPTS)
    pids = run_workers(m.mnt, 99, ROUND_S, hold=True)
    for pid in pids:
        _, st = os.waitpid(pid, os.WUNTRACED)
        t_check(os.WIFSTOPPED(st), "worker %d did not stop holding its files (%#x)"
                % (pid, st))
    held = set()
    for pid in pids:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                tgt = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if tgt.startswith(m.mnt) and tgt.endswith(" (deleted)"):
                st = os.stat("/proc/%d/fd/%s" % (pid, fd))
                if st.st_nlink == 0:    # not a name of a file with other links
                    held.add(st.st_ino)
    t_check(len(held) >= 3 * NPROC, "only %d open-unlinked and O_TMPFILE files held"
            % len(held))

    # Orphans leave the list in any order: the kernel forgets them oldest
    # first, the far end of the list. This process holds more of them and
    # closes two thirds in random order; each close frees one in the middle
    # of the list, whose predecessor must then point past it.
    mine = []
    os.mkdir(os.path.join(m.mnt, "mid"))
    for j in range(ORPHANS):
        p = os.path.join(m.mnt, "mid", "o%d" % j)
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, b"m" * (4096 * (j % 5)))
        mine.append((fd, os.fstat(fd).st_ino))
        os.unlink(p)
    rnd = random.Random(4242)
    rnd.shuffle(mine)
    closed = mine[:2 * ORPHANS // 3]
    ffree = os.statvfs(m.mnt).f_ffree
    for fd, _ in closed:
        os.close(fd)
    deadline = time.monotonic() + 10
    while os.statvfs(m.mnt).f_ffree < ffree + len(closed) and time.monotonic() < deadline:
        time.sleep(0.05)     # each close's FORGET frees one inode
    t_check(os.statvfs(m.mnt).f_ffree >= ffree + len(closed),
            "closed orphans not freed within 10 s: %d of %d"
            % (os.statvfs(m.mnt).f_ffree - ffree, len(closed)))
    held |= {ino for _, ino in mine[len(closed):]}
    t_run(["sync", "-f", m.mnt])
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    for fd, _ in mine[len(closed):]:
        try:
            os.close(fd)
        except OSError:
            pass        # the connection is gone with the daemon
    t_run(["umount", "-l", m.mnt], check=False)
    m.mounted = False
    env.mounts.remove(m)
    chain = orphan_chain(dev)
    t_log("orphan list: %d inodes, %d held open" % (len(chain), len(held)))
    t_check(held <= set(chain), "open-unlinked inodes missing from the orphan "
            "list: %s" % sorted(held - set(chain)))
    t_check(len(chain) == len(set(chain)), "orphan list has a loop: %s" % chain)
    gone = {ino for _, ino in closed} & set(chain)
    t_check(not gone, "freed orphans still on the orphan list: %s" % sorted(gone))

    t_step("the kernel's ext4 frees the orphans of a copy; e2fsck -fn clean")
    kdev = copy_image(env, dev, "kcopy.img")
    kmnt = env.mkdir("kmnt")
    t_run(["mount", "-t", "ext4", kdev, kmnt])
    t_run(["umount", kmnt])
    env.fsck(kdev)
    t_eq(first_orphan(kdev), 0, "s_last_orphan after the kernel's mount")
    kfree = free_counts(kdev)
    env.detach(kdev)

    t_step("wbcfs frees the orphans at mount (the state set clean first: "
           "unclean filesystems need -o fsck, and e2fsck -p would free them)")
    t_run(["debugfs", "-w", "-R", "ssv state 1", dev], quiet=True)
    m = env.mount(dev, OPTS + ["ro"])
    env.umount(m)
    t_check("orphan list are not freed" in m.daemon_log(),
            "a read-only mount does not say it leaves the orphans:\n%s" % m.daemon_log())
    t_eq(first_orphan(dev), chain[0], "s_last_orphan after a read-only mount")
    m = env.mount(dev, OPTS)
    env.umount(m)
    log = m.daemon_log()
    t_check("%d orphan inodes deleted" % len(chain) in log,
            "daemon log does not report %d orphans deleted:\n%s" % (len(chain), log))
    env.fsck(dev)
    t_eq(first_orphan(dev), 0, "s_last_orphan after wbcfs's mount")
    t_eq(free_counts(dev), kfree, "free (blocks, inodes) after wbcfs's mount, as after"
         " the kernel's")


def create_errors(env, dev):
    """Inode-table reads fail (fault_meta=read) while creating: the
    creation fails and leaves no name and no allocated inode behind."""
    t_step("create, mkdir, symlink, mknod when the new inode's table block "
           "cannot be read: EIO, no name left, e2fsck clean")
    opts = OPTS + ["fault_inject"]
    m = env.mount(dev, opts)
    d = os.path.join(m.mnt, "d")
    os.mkdir(d)
    os.mkdir(os.path.join(d, "sub"))
    open(os.path.join(d, "sub", "f"), "wb").close()
    os.mkdir(os.path.join(m.mnt, "e"))
    # fill the inode table blocks the next mount reads (root, d) and more,
    # so that the next free inode sits in a block nothing has read yet
    for i in range(40):
        open(os.path.join(d, "x%d" % i), "wb").close()
    env.umount(m)
    base = free_counts(dev)
    m = env.mount(dev, opts)
    d = os.path.join(m.mnt, "d")
    names = sorted(os.listdir(d))       # directory blocks cached
    os.stat(d)
    meta = "trusted.wbcfs.fault_meta"
    attempts = (
        ("create", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))),
        ("mknod", lambda p: os.mkfifo(p)),
        ("mkdir", lambda p: os.mkdir(p)),
        ("symlink", lambda p: os.symlink("x0", p)),
    )
    for what, fn in attempts:
        p = os.path.join(d, "new-" + what)
        os.setxattr(m.mnt, meta, b"read")
        try:
            fn(p)
            err = 0
        except OSError as e:
            err = e.errno
        os.setxattr(m.mnt, meta, b"none")
        t_eq(err, errno.EIO, "%s under an inode-table read fault" % what)
        t_eq(sorted(os.listdir(d)), names, "names in d after the failed %s" % what)
        t_check(not os.path.lexists(p), "%s: the name is gone" % what)
    t_step("rename of a directory whose \"..\" cannot be read to another "
           "parent: EIO, nothing moved")
    e = os.path.join(m.mnt, "e")
    os.listdir(e)                       # the new parent's block and inode
    os.stat(os.path.join(d, "sub"))     # sub's inode; its block stays cold
    os.setxattr(m.mnt, meta, b"read")
    try:
        os.rename(os.path.join(d, "sub"), os.path.join(e, "sub"))
        err = 0
    except OSError as ex:
        err = ex.errno
    os.setxattr(m.mnt, meta, b"none")
    t_eq(err, errno.EIO, "rename under a read fault on the moved directory")
    t_eq(sorted(os.listdir(d)), names, "names in d after the failed rename")
    t_eq(os.listdir(e), [], "names in e after the failed rename")
    env.umount(m)       # exit 0: nothing was left half done
    k = env.kernel_ro(dev)
    try:
        t_eq(sorted(os.listdir(os.path.join(k.mnt, "d"))), names,
             "names in d seen by the kernel's ext4 after the failed creations")
        t_eq(os.listdir(os.path.join(k.mnt, "e")), [], "e seen by the kernel's ext4")
        t_eq(os.listdir(os.path.join(k.mnt, "d", "sub")), ["f"],
             "d/sub seen by the kernel's ext4")
    finally:
        env.umount(k)
    env.fsck(dev)
    t_eq(free_counts(dev), base, "free (blocks, inodes) after the failed creations")
    m = env.mount(dev, OPTS)
    d = os.path.join(m.mnt, "d")
    open(os.path.join(d, "new-create"), "wb").close()
    os.mkdir(os.path.join(d, "new-mkdir"))
    t_run(["sh", "-c", "rm -rf %s %s" % (d, os.path.join(m.mnt, "e"))])
    env.umount(m)
    env.fsck(dev)


def body(env):
    dev = env.new_fs(512 * MIB)
    mixed_rounds(env, dev)
    if t_is_kernel():
        t_log("kernel target: the daemon's crash, orphan and fault parts skipped")
        return
    sigkill_round(env, dev)
    create_errors(env, dev)


if __name__ == "__main__":
    t_main("unmount", body, deadline_s=240)
