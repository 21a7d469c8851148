#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""What ext4 has and FUSE can carry, as the kernel's ext4 does it:

- O_TMPFILE: an unnamed regular file (nlink 0) with the call's mode minus
  the umask and the owner/group of a create (setgid directories too);
  linkat() through /proc/self/fd (unprivileged) or AT_EMPTY_PATH gives it
  a name (nlink 0 -> 1), O_TMPFILE|O_EXCL cannot be linked (ENOENT); an
  unnamed one is freed at its last close (free inodes and blocks come
  back), also when the unmount follows the close at once or the process
  is killed in the middle.
- renameat2(RENAME_WHITEOUT): the source name becomes a whiteout (char
  device 0:0, mode 0, owned by the caller) in the same step; allowed to an
  unprivileged user as by the kernel; with RENAME_EXCHANGE EINVAL, with
  RENAME_NOREPLACE EEXIST on an existing target; directories move with
  their link counts; with no inode left for the whiteout the rename fails
  (ENOSPC) and both names stay as they were (O_TMPFILE: ENOSPC too).
- statx birth time: stat -c %w gives ext4's i_crtime, set at creation and
  unchanged by writes, chmod and renames; statx's other fields equal
  stat's, including the size of data not yet written back; no birth time
  where inodes (128 bytes) have no i_crtime.
Ends with e2fsck -fn, the kernel's ext4 seeing the same tree, and the
kernel's ext4 showing the same birth times.

    WBCFS_BIN=build/wbcfs test/integration/test_feat.py
    WBCFS_TEST_TARGET=kernel test/integration/test_feat.py
"""

import ctypes
import errno
import os
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, t_as_user, t_check, t_eq, t_errno, t_fail,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_manifest, t_step,
                    t_write_all)

USER = 1000
GROUP = 1000
OTHER_GROUP = 2000
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_FOLLOW = 0x400
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4
SYS_RENAMEAT2 = 316     # x86_64

_libc = ctypes.CDLL(None, use_errno=True)


def linkat(olddirfd, old, newdirfd, new, flags):
    if _libc.linkat(olddirfd, old.encode(), newdirfd, new.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), new)


def link_fd(fd, new):
    """linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW): works unprivileged."""
    linkat(AT_FDCWD, "/proc/self/fd/%d" % fd, AT_FDCWD, new, AT_SYMLINK_FOLLOW)


def renameat2(old, new, flags):
    if _libc.syscall(SYS_RENAMEAT2, AT_FDCWD, old.encode(), AT_FDCWD,
                     new.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def btime(path):
    """stat -c %w (statx with STATX_BTIME): the birth time or '-'."""
    p = subprocess.run(["stat", "-c", "%w", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        t_fail("stat -c %%w %s: %s" % (path, p.stdout.strip()))
    return p.stdout.strip()


def btime_ns(path):
    """The birth time in ns from `stat -c %W` and %w's fraction; None if none."""
    w = btime(path)
    if w == "-":
        return None
    p = subprocess.run(["stat", "-c", "%W", path], stdout=subprocess.PIPE,
                       text=True, check=True)
    frac = w.split(" ")[1].split(".")[1] if "." in w.split(" ")[1] else "0"
    return int(p.stdout.strip()) * 10**9 + int(frac.ljust(9, "0")[:9])


def statx_fields(path):
    """stat(1) (statx) with btime asked for: the basic fields and btime."""
    p = subprocess.run(["stat", "-c", "%f %h %u %g %s %b %i %.9Y %.9Z %.9X %t:%T %w",
                        path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        t_fail("stat %s: %s" % (path, p.stdout.strip()))
    return p.stdout.split()


def ns_str(ns):
    return "%d.%09d" % divmod(ns, 10**9)


def free_counts(mnt):
    s = os.statvfs(mnt)
    return s.f_bfree, s.f_ffree


def wait_free(mnt, want, what, timeout=30):
    """Free blocks and inodes come back to `want` (the last close and the
    kernel's forget reach the daemon asynchronously)."""
    end = time.monotonic() + timeout
    while True:
        got = free_counts(mnt)
        if got == want:
            return
        if time.monotonic() > end:
            t_fail("%s: free (blocks, inodes) %r, expected %r" % (what, got, want))
        time.sleep(0.1)


def check_tmpfile(mnt):
    t_step("O_TMPFILE as an unprivileged user: mode minus umask, owner, nlink 0")
    d = os.path.join(mnt, "tmpdir")
    os.mkdir(d, 0o777)
    os.chmod(d, 0o777)
    sg = os.path.join(mnt, "sgid")
    os.mkdir(sg)
    os.chown(sg, 0, OTHER_GROUP)
    os.chmod(sg, 0o2777)
    ro = os.path.join(mnt, "rodir")
    os.mkdir(ro, 0o755)

    def user_tmpfiles():
        os.umask(0o027)
        out = []
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o666)
        st = os.fstat(fd)
        out.append("%o %d %d %d %d" % (st.st_mode, st.st_nlink, st.st_uid,
                                       st.st_gid, st.st_size))
        t_write_all(fd, b"tmpfile data\n" * 1000)
        os.fsync(fd)
        link_fd(fd, os.path.join(d, "named"))
        st = os.fstat(fd)
        out.append("%d %d" % (st.st_nlink, st.st_size))
        os.close(fd)
        fd = os.open(sg, os.O_TMPFILE | os.O_WRONLY, 0o640)
        st = os.fstat(fd)
        out.append("%o %d %d" % (st.st_mode, st.st_uid, st.st_gid))
        link_fd(fd, os.path.join(sg, "named"))
        os.close(fd)
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
        try:
            link_fd(fd, os.path.join(d, "excl"))
            out.append("excl linked")
        except OSError as e:
            out.append("excl " + errno.errorcode[e.errno])
        os.close(fd)
        try:
            os.close(os.open(ro, os.O_TMPFILE | os.O_RDWR, 0o600))
            out.append("rodir ok")
        except OSError as e:
            out.append("rodir " + errno.errorcode[e.errno])
        return "|".join(out)

    got = t_as_user(USER, GROUP, user_tmpfiles)
    t_eq(got, "|".join(["100640 0 %d %d 0" % (USER, GROUP), "1 13000",
                        "100640 %d %d" % (USER, OTHER_GROUP),
                        "excl ENOENT", "rodir EACCES"]),
         "O_TMPFILE results as uid %d" % USER)
    with open(os.path.join(d, "named"), "rb") as f:
        t_eq(f.read(), b"tmpfile data\n" * 1000, "content of the linked tmpfile")
    t_check(not os.path.exists(os.path.join(d, "excl")), "O_EXCL tmpfile got no name")

    t_step("linkat(AT_EMPTY_PATH) names an O_TMPFILE file (root)")
    dir_mtime = os.stat(d).st_mtime_ns
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
    ino = os.fstat(fd).st_ino
    t_write_all(fd, b"x" * 5000)
    t_eq(os.stat(d).st_mtime_ns, dir_mtime, "directory mtime after O_TMPFILE")
    time.sleep(0.02)
    linkat(fd, "", AT_FDCWD, os.path.join(d, "empty_path"), AT_EMPTY_PATH)
    t_check(os.stat(d).st_mtime_ns > dir_mtime, "directory mtime after linkat")
    t_eq(os.fstat(fd).st_nlink, 1, "nlink after linkat(AT_EMPTY_PATH)")
    t_eq(os.stat(os.path.join(d, "empty_path")).st_ino, ino, "the name's inode")
    linkat(fd, "", AT_FDCWD, os.path.join(d, "empty_path2"), AT_EMPTY_PATH)
    t_eq(os.fstat(fd).st_nlink, 2, "nlink after a second link")
    os.close(fd)
    t_eq(os.stat(os.path.join(d, "empty_path")).st_size, 5000, "size by name")

    t_step("an unnamed O_TMPFILE is freed at its last close")
    os.sync()
    before = free_counts(mnt)
    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
    fd2 = os.dup(fd)
    t_write_all(fd, os.urandom(4 * MIB))
    os.fsync(fd)
    os.sync()
    mid = free_counts(mnt)
    t_check(mid[0] <= before[0] - 1024 and mid[1] == before[1] - 1,
            "4 MiB tmpfile holds blocks and an inode: %r then %r" % (before, mid))
    os.close(fd)
    t_eq(os.pread(fd2, 4, 4 * MIB - 4) != b"", True, "still readable through a dup")
    os.close(fd2)
    wait_free(mnt, before, "after the last close of an unnamed tmpfile")

    t_step("processes killed while they make O_TMPFILEs leak nothing")
    os.sync()
    before = free_counts(mnt)
    pids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
                    os.write(fd, b"k" * 8192)
                    os.close(fd)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        time.sleep(0.15)
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    wait_free(mnt, before, "after killing O_TMPFILE makers")

    t_step("unnamed O_TMPFILEs with dirty data, closed just before unmount")
    for i in range(3):
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
        t_write_all(fd, os.urandom(256 * 1024 + i))
        os.close(fd)


def check_whiteout(mnt):
    t_step("renameat2(RENAME_WHITEOUT) as an unprivileged user")
    w = os.path.join(mnt, "wo")
    os.mkdir(w, 0o777)
    os.chmod(w, 0o777)

    def user_whiteouts():
        os.umask(0o022)
        out = []
        a, b = os.path.join(w, "a"), os.path.join(w, "b")
        with open(a, "wb") as f:
            f.write(b"source\n")
        ino = os.stat(a).st_ino
        renameat2(a, b, RENAME_WHITEOUT)
        st = os.lstat(a)
        out.append("%o %d:%d %d %d %d" % (st.st_mode, os.major(st.st_rdev),
                                          os.minor(st.st_rdev), st.st_nlink,
                                          st.st_uid, st.st_gid))
        out.append("moved" if os.stat(b).st_ino == ino else "not moved")
        for flags, name in ((RENAME_WHITEOUT | RENAME_EXCHANGE, "exch"),
                            (RENAME_WHITEOUT | RENAME_NOREPLACE, "noreplace")):
            with open(a + name, "wb") as f:
                f.write(b"x")
            try:
                renameat2(a + name, b, flags)
                out.append(name + " ok")
            except OSError as e:
                out.append(name + " " + errno.errorcode[e.errno])
        try:
            renameat2(os.path.join(w, "missing"), os.path.join(w, "m2"), RENAME_WHITEOUT)
            out.append("missing ok")
        except OSError as e:
            out.append("missing " + errno.errorcode[e.errno])
        out.append("m2" if os.path.lexists(os.path.join(w, "m2")) else "no m2")
        return "|".join(out)

    got = t_as_user(USER, GROUP, user_whiteouts)
    t_eq(got, "|".join(["20000 0:0 1 %d %d" % (USER, GROUP), "moved",
                        "exch EINVAL", "noreplace EEXIST", "missing ENOENT",
                        "no m2"]),
         "RENAME_WHITEOUT results as uid %d" % USER)
    t_eq(open(os.path.join(w, "b"), "rb").read(), b"source\n", "content moved")

    t_step("RENAME_WHITEOUT|RENAME_NOREPLACE to a free name, over a file, of a dir")
    c = os.path.join(w, "c")
    with open(c, "wb") as f:
        f.write(b"c\n")
    renameat2(c, os.path.join(w, "c2"), RENAME_WHITEOUT | RENAME_NOREPLACE)
    t_check(stat.S_ISCHR(os.lstat(c).st_mode), "c is a whiteout")
    with open(os.path.join(w, "victim"), "wb") as f:
        f.write(b"victim\n")
    renameat2(os.path.join(w, "c2"), os.path.join(w, "victim"), RENAME_WHITEOUT)
    t_eq(open(os.path.join(w, "victim"), "rb").read(), b"c\n", "replaced target")
    t_check(stat.S_ISCHR(os.lstat(os.path.join(w, "c2")).st_mode), "c2 is a whiteout")
    d1, d2 = os.path.join(w, "d1"), os.path.join(w, "d2")
    os.makedirs(os.path.join(d1, "sub", "deep"))
    os.mkdir(d2)
    with open(os.path.join(d1, "sub", "f"), "wb") as f:
        f.write(b"in sub\n")
    renameat2(os.path.join(d1, "sub"), os.path.join(d2, "sub"), RENAME_WHITEOUT)
    t_eq(os.lstat(d1).st_nlink, 2, "old parent's nlink")
    t_eq(os.lstat(d2).st_nlink, 3, "new parent's nlink")
    t_eq(os.lstat(os.path.join(d2, "sub")).st_nlink, 3, "moved dir's nlink")
    t_check(stat.S_ISCHR(os.lstat(os.path.join(d1, "sub")).st_mode), "d1/sub is a whiteout")
    t_eq(open(os.path.join(d2, "sub", "f"), "rb").read(), b"in sub\n", "moved dir's file")
    types = {de.name: de.is_dir() for de in os.scandir(d1)}
    t_eq(types, {"sub": False}, "readdir of the old parent")
    t_eq(os.lstat(os.path.join(d2, "sub", "..")).st_ino, os.lstat(d2).st_ino,
         "the moved dir's '..'")


def check_btime(mnt, births):
    t_step("statx birth time: set at creation, kept by writes, chmod, rename")
    b = os.path.join(mnt, "birth")
    os.mkdir(b)
    t0 = time.time_ns()
    names = dict.fromkeys(("file", "dir", "symlink", "fifo", "tmpfile"))
    with open(os.path.join(b, "file"), "wb") as f:
        f.write(b"1")
    os.mkdir(os.path.join(b, "dir"))
    os.symlink("file", os.path.join(b, "symlink"))
    os.mkfifo(os.path.join(b, "fifo"))
    fd = os.open(b, os.O_TMPFILE | os.O_RDWR, 0o644)
    link_fd(fd, os.path.join(b, "tmpfile"))
    os.close(fd)
    t1 = time.time_ns()
    for n in names:
        ns = btime_ns(os.path.join(b, n))
        if ns is None:
            t_fail("%s: no birth time (stat -c %%w gave '-')" % n)
        # the kernel stamps with a coarse clock: a generous second of margin
        t_check(t0 - 10**9 <= ns <= t1 + 10**9,
                "%s: birth time %d outside [%d, %d]" % (n, ns, t0, t1))
        names[n] = btime(os.path.join(b, n))
    time.sleep(0.05)
    with open(os.path.join(b, "file"), "ab") as f:
        f.write(b"more")
    os.chmod(os.path.join(b, "file"), 0o600)
    os.rename(os.path.join(b, "file"), os.path.join(b, "file2"))
    os.rename(os.path.join(b, "file2"), os.path.join(b, "file"))
    t_eq(btime(os.path.join(b, "file")), names["file"], "birth time after changes")

    t_step("statx's other fields are stat's, dirty size included")
    fd = os.open(os.path.join(b, "dirty"), os.O_CREAT | os.O_WRONLY, 0o644)
    t_write_all(fd, b"d" * 123457)
    for n in ("dirty", "file", "dir", "symlink", "fifo"):
        p = os.path.join(b, n)
        sx = statx_fields(p)
        st = os.lstat(p)
        want = ["%x" % st.st_mode, str(st.st_nlink), str(st.st_uid), str(st.st_gid),
                str(st.st_size), str(st.st_blocks), str(st.st_ino),
                ns_str(st.st_mtime_ns), ns_str(st.st_ctime_ns), ns_str(st.st_atime_ns),
                "%x:%x" % (os.major(st.st_rdev), os.minor(st.st_rdev))]
        t_eq(sx[:11], want, "statx and stat of %s" % n)
    t_eq(os.stat(os.path.join(b, "dirty")).st_size, 123457, "dirty size")
    os.close(fd)
    if not t_is_kernel():
        t_step("the control directory has no birth time; files still do")
        t_eq(btime(os.path.join(mnt, ".wbcfs")), "-", "birth time of /.wbcfs")
        t_check(btime(os.path.join(b, "file")) != "-", "statx still served")
    for n in ("file", "dir", "symlink", "fifo", "tmpfile", "dirty"):
        births["birth/" + n] = btime(os.path.join(b, n))
    births["."] = btime(mnt)


def body(env):
    dev = env.new_fs(256 * MIB)
    m = env.mount(dev, ["cache_size=64M"])
    births = {}
    check_tmpfile(m.mnt)
    check_whiteout(m.mnt)
    check_btime(m.mnt, births)
    man = t_manifest(m.mnt, exclude=(".wbcfs",))
    env.umount(m)
    env.verify_after_umount(dev, man)

    t_step("the kernel's ext4 shows the same birth times")
    k = env.kernel_ro(dev)
    try:
        for rel, w in sorted(births.items()):
            t_eq(btime(os.path.join(k.mnt, rel)), w, "birth time of %s" % rel)
    finally:
        env.umount(k)
    t_log("%d birth times agree" % len(births))

    t_step("128-byte inodes have no room for i_crtime: no birth time")
    dev = env.new_fs(64 * MIB, mkfs_opts=["-I", "128", "-N", "64"], name="small.img")
    m = env.mount(dev, ["cache_size=64M"])
    f = os.path.join(m.mnt, "f")
    with open(f, "wb") as fh:
        fh.write(b"no birth\n")
    t_eq(btime(f), "-", "birth time with 128-byte inodes")
    st = os.stat(f)
    t_eq(statx_fields(f)[4:7], [str(st.st_size), str(st.st_blocks), str(st.st_ino)],
         "statx with 128-byte inodes")

    t_step("no inode left: RENAME_WHITEOUT and O_TMPFILE fail with ENOSPC, names kept")
    n = 0
    while True:
        try:
            os.close(os.open(os.path.join(m.mnt, "fill%d" % n), os.O_CREAT | os.O_WRONLY))
        except OSError as e:
            t_eq(e.errno, errno.ENOSPC, "creating until no inode is left")
            break
        n += 1
        t_check(n < 1000, "inodes never ran out")
    t_errno(errno.ENOSPC, renameat2, f, os.path.join(m.mnt, "g"), RENAME_WHITEOUT)
    t_eq(sorted(x for x in os.listdir(m.mnt) if not x.startswith("fill")),
         ["f", "lost+found"],
         "names after a whiteout rename that failed")
    t_eq(open(f, "rb").read(), b"no birth\n", "source after the failed rename")
    t_errno(errno.ENOSPC, os.open, m.mnt, os.O_TMPFILE | os.O_RDWR, 0o600)
    renameat2(f, os.path.join(m.mnt, "g"), 0)
    man = t_manifest(m.mnt, exclude=(".wbcfs",))
    env.umount(m)
    env.verify_after_umount(dev, man)


if __name__ == "__main__":
    t_main("feat", body, deadline_s=240)
