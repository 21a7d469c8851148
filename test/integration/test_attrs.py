#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Inode attributes as the kernel's ext4 keeps them: sizes, modes, owners
and times that two paths write (libext2fs and wbcfs's in-memory inode).

(a) Directories of 300, 3000 and 30000 entries, grown while chmod, chown
    and utime change them: stat through the mount shows the size the
    directory has on disk (e2fsck -fn clean, the kernel's ext4 mounting
    the device read-only sees the same size), and the last mode, owner
    and times set.
(b) rename, link, setxattr and unlink of another link of a file whose
    written times are still pending in memory stamp its ctime with the
    time of that change, not the older time of the write.
(c) chown(f, -1, -1) changes ctime (an empty SETATTR), also done by a
    user who does not own f (uid 1000).
(d) atime under relatime (the default): a read or a listing updates it
    when it is not after mtime or ctime, or a day old, and leaves it
    otherwise; a read by another user (uid 1000) too; stat shows it at
    once, the kernel's ext4 finds it on disk after unmount.
(e) strictatime: every read and every listing updates atime; not an
    O_NOATIME read.  (f) noatime: reads never do; nodiratime: listings
    never do.
(g) One clock for every stamp: files (written), fifos, directories,
    symlinks, devices and links made one after the other have ctimes in
    that order.
(h) chattr stamps ctime, also when no flag changes (chattr -d of a file
    without it) and after a write whose times are still pending in
    memory: stat right after chattr shows the new ctime, not the one the
    kernel cached before (xfstests generic/277), and the kernel's ext4
    finds it on disk.

    WBCFS_BIN=build/wbcfs test/integration/test_attrs.py
"""

import os
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, Mount, t_as_user, t_check, t_eq,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_run, t_step, t_write_all)

NAME = "file_with_a_longish_name_%d"
UID, GID = 1000, 1000


def attrs_of(st):
    return {"size": st.st_size, "mode": st.st_mode, "uid": st.st_uid,
            "gid": st.st_gid, "mtime_ns": st.st_mtime_ns,
            "atime_ns": st.st_atime_ns}


def grow_dirs(mnt):
    """(a): big directories grown around chmod/chown/utime; {name: attrs}."""
    seen = {}
    for n in (300, 3000, 30000):
        d = os.path.join(mnt, "d%d" % n)
        t_step("a directory grown to %d entries keeps its size, mode, owner, times"
               % n)
        os.mkdir(d, 0o700)
        step = max(n // 8, 1)
        for i in range(n):
            os.mknod(os.path.join(d, NAME % i), 0o600)
            if i % step == step - 1:
                k = i // step
                os.chmod(d, 0o700 | (k % 8) << 3)
                os.chown(d, UID + k, GID + k)
                os.utime(d, ns=(10**18 + k, 10**18 + 2 * k))
        st = os.stat(d)
        blocks = st.st_size // 4096
        t_check(blocks > 1, "%s: %d entries in a %d-byte directory"
                % (d, n, st.st_size))
        t_eq(len(os.listdir(d)), n, "%s entries" % d)
        # the final state: the last of each change wins
        os.chmod(d, 0o755)
        os.chown(d, UID, GID)
        os.utime(d, ns=(1500000000123456789, 1600000000987654321))
        st = os.stat(d)
        t_eq(st.st_mode & 0o7777, 0o755, "%s mode" % d)
        t_eq((st.st_uid, st.st_gid), (UID, GID), "%s owner" % d)
        t_eq(st.st_mtime_ns, 1600000000987654321, "%s mtime" % d)
        t_eq(st.st_atime_ns, 1500000000123456789, "%s atime" % d)
        t_check(st.st_size >= blocks * 4096,
                "%s: size %d after chmod/chown/utime, %d before"
                % (d, st.st_size, blocks * 4096))
        seen[os.path.basename(d)] = attrs_of(st)
        t_log("%s: %d entries, %d bytes" % (d, n, st.st_size))
    return seen


def write_pending(path):
    """A file with freshly written data (its times pending in memory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t_write_all(fd, b"x" * 100)
    finally:
        os.close(fd)
    return os.stat(path).st_ctime_ns


def ctime_changes(mnt):
    """(b) and (c): each change stamps ctime later than the pending write."""
    d = os.path.join(mnt, "ct")
    os.mkdir(d)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    ops = [
        ("rename", "f1", lambda: os.rename(p("f1"), p("g1")), "g1"),
        ("link", "f2", lambda: os.link(p("f2"), p("h2")), "f2"),
        ("setxattr", "f3", lambda: os.setxattr(p("f3"), "user.k", b"v"), "f3"),
        ("unlink of another link", "f4",
         lambda: os.unlink(p("h4")), "f4"),
        ("chown(-1, -1)", "f5", lambda: os.chown(p("f5"), -1, -1), "f5"),
        ("chown(-1, -1) by another user", "f6",
         lambda: t_eq(t_as_user(UID, GID, lambda: os.chown(p("f6"), -1, -1)),
                      "ok", "chown(-1, -1) as uid %d" % UID), "f6"),
    ]
    written = {}
    for what, name, fn, after in ops:
        if name == "f4":
            write_pending(p(name))
            os.link(p("f4"), p("h4"))
            written[name] = write_pending(p(name))
        else:
            written[name] = write_pending(p(name))
    time.sleep(0.3)
    stamps, bad = {}, []
    for what, name, fn, after in ops:
        t_step("%s stamps ctime after a pending write" % what)
        fn()
        c = os.stat(p(after)).st_ctime_ns
        if c < written[name] + 250 * 10**6:
            bad.append("%s: ctime %d, the write's was %d: not changed"
                       % (what, c, written[name]))
        stamps[after] = c
    t_check(not bad, "; ".join(bad))
    return stamps


def chattr_checks(mnt):
    """(h); returns {name: ctime_ns} to find again on disk."""
    d = os.path.join(mnt, "chattr")
    os.mkdir(d)
    stamps = {}
    for name, flags in (("plus_A", "+A"), ("minus_d", "-d"), ("written", "+d")):
        p = os.path.join(d, name)
        t_step("chattr %s %s: stat shows its ctime at once" % (flags, name))
        if name == "written":
            write_pending(p)
        else:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        before = os.stat(p).st_ctime_ns    # now in the kernel's cache
        later()
        t_run(["chattr", flags, p])
        after = os.stat(p).st_ctime_ns
        t_check(after > before, "%s: ctime %d after chattr %s, %d before"
                % (p, after, flags, before))
        stamps[name] = after
    return stamps


def mount_opt(env, dev, opt):
    """Mount with an atime option (the kernel's ext4 too)."""
    if not t_is_kernel():
        return env.mount(dev, [opt, "cache_size=64M"])
    mnt = env.mkdir("mnt-%s" % opt)
    t_run(["mount", "-t", "ext4", "-o", opt, dev, mnt])
    m = Mount(mnt, dev, "kernel")
    env.mounts.append(m)
    return m


def read_file(path, flags=0):
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.read(fd, 4096)
    finally:
        os.close(fd)


def atime(path):
    return os.stat(path).st_atime_ns


def later():
    """Past the kernel's coarse clock tick: the next stamp differs."""
    time.sleep(0.05)


def relatime_checks(mnt):
    """(d); returns {path: atime_ns} to find again on disk."""
    f = os.path.join(mnt, "ra")
    write_pending(f)
    os.chmod(f, 0o644)
    later()
    st = os.stat(f)
    t_step("relatime: a read after a write updates atime")
    read_file(f)
    a1 = atime(f)
    t_check(a1 > st.st_mtime_ns and a1 > st.st_ctime_ns,
            "atime %d after the read, mtime %d ctime %d: not updated"
            % (a1, st.st_mtime_ns, st.st_ctime_ns))
    t_step("relatime: a second read leaves atime")
    later()
    read_file(f)
    t_eq(atime(f), a1, "atime after a second read")
    t_step("relatime: a read by another user after a change updates atime")
    os.chown(f, 0, 0)   # ctime now after atime
    later()
    t_eq(t_as_user(UID, GID, lambda: read_file(f)), "ok", "read as uid %d" % UID)
    a2 = atime(f)
    t_check(a2 > a1 and a2 > os.stat(f).st_ctime_ns,
            "atime %d after a read following a chown (was %d)" % (a2, a1))
    t_step("relatime: an atime before ctime is updated, one after it is not")
    now = time.time_ns()
    os.utime(f, ns=(now - 3600 * 10**9, now - 7200 * 10**9))
    later()
    read_file(f)
    a3 = atime(f)
    t_check(a3 >= now, "an hour-old atime before ctime after a read: %d (now %d)"
            % (a3, now))
    future = now + 3600 * 10**9
    os.utime(f, ns=(future, now - 7200 * 10**9))
    later()
    read_file(f)
    t_eq(atime(f), future, "an atime after mtime and ctime, after a read")
    t_step("relatime: listing a directory updates its atime once")
    d = os.path.join(mnt, "rad")
    os.mkdir(d)
    os.mknod(os.path.join(d, "x"))
    later()
    os.listdir(d)
    ad = atime(d)
    t_check(ad > os.stat(d).st_mtime_ns, "directory atime %d not after mtime" % ad)
    later()
    os.listdir(d)
    t_eq(atime(d), ad, "directory atime after a second listing")
    t_step("relatime: listing a directory whose ctime passed atime updates it")
    os.chmod(d, 0o750)
    later()
    os.listdir(d)
    ad2 = atime(d)
    t_check(ad2 > os.stat(d).st_ctime_ns,
            "directory atime %d after a chmod and a listing: not updated (was %d)"
            % (ad2, ad))
    return {"ra": future, "rad": ad2}


def strictatime_checks(mnt):
    """(e): every access updates atime, O_NOATIME ones excepted."""
    f = os.path.join(mnt, "ra")
    d = os.path.join(mnt, "rad")
    t_step("strictatime: every read updates atime")
    read_file(f)
    a1 = atime(f)
    later()
    read_file(f)
    a2 = atime(f)
    t_check(a2 > a1, "second read: atime %d, first %d" % (a2, a1))
    t_step("strictatime: an O_NOATIME read does not")
    later()
    read_file(f, os.O_NOATIME)
    t_eq(atime(f), a2, "atime after an O_NOATIME read")
    t_step("strictatime: every listing updates the directory's atime")
    os.listdir(d)
    b1 = atime(d)
    later()
    os.listdir(d)
    b2 = atime(d)
    t_check(b2 > b1, "second listing: atime %d, first %d" % (b2, b1))
    return {"ra": a2, "rad": b2}


def noatime_checks(mnt):
    """(f): no read or listing changes atime."""
    f = os.path.join(mnt, "ra")
    d = os.path.join(mnt, "rad")
    t_step("noatime: reads and listings leave atime")
    os.utime(f, ns=(10**18, 2 * 10**18))   # atime before mtime
    os.utime(d, ns=(10**18, 2 * 10**18))
    later()
    read_file(f)
    os.listdir(d)
    t_eq(atime(f), 10**18, "file atime after a read")
    t_eq(atime(d), 10**18, "directory atime after a listing")
    return {"ra": 10**18, "rad": 10**18}


def clock_checks(mnt):
    """(g): stamps in the order things were made."""
    d = os.path.join(mnt, "clk")
    os.mkdir(d)
    t_step("ctimes of files, fifos, directories, symlinks, devices, links "
           "follow the order they were made in")
    order = []

    def made(path):
        order.append((path, os.lstat(path).st_ctime_ns))

    for i in range(40):
        p = lambda n: os.path.join(d, "%s%d" % (n, i))  # noqa: E731
        write_pending(p("f"))
        made(p("f"))
        os.mkfifo(p("p"))
        made(p("p"))
        os.mkdir(p("d"))
        made(p("d"))
        os.symlink("f%d" % i, p("s"))
        made(p("s"))
        os.mknod(p("c"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        made(p("c"))
        os.link(p("f"), p("l"))   # the link's ctime: the file's, now
        made(p("l"))
    prev, prev_p = 0, None
    for p, c in order:
        t_check(c >= prev, "%s: ctime %d before that of %s made earlier (%d)"
                % (p, c, prev_p, prev))
        prev, prev_p = c, p


def nodiratime_checks(mnt):
    """(f): nodiratime: files still updated, directories not."""
    f = os.path.join(mnt, "ra")
    d = os.path.join(mnt, "rad")
    t_step("nodiratime: a read updates a file's atime, a listing not a directory's")
    os.utime(f, ns=(10**18, 15 * 10**17))
    os.utime(d, ns=(10**18, 15 * 10**17))
    later()
    read_file(f)
    os.listdir(d)
    a = atime(f)
    t_check(a > 15 * 10**17, "file atime %d after a read: not updated" % a)
    t_eq(atime(d), 10**18, "directory atime after a listing")
    return {"ra": a, "rad": 10**18}


def atime_phase(env, dev, opt, checks):
    m = mount_opt(env, dev, opt)
    want = checks(m.mnt)
    env.umount(m)
    t_step("after %s: the kernel's ext4 (ro) finds the atimes" % opt)
    k = env.kernel_ro(dev)
    try:
        for name, a in want.items():
            t_eq(os.stat(os.path.join(k.mnt, name)).st_atime_ns, a,
                 "kernel ext4: %s atime after %s" % (name, opt))
    finally:
        env.umount(k)


def body(env):
    dev = env.new_fs(1 * GIB)
    m = env.mount(dev, ["cache_size=64M"])
    seen = grow_dirs(m.mnt)
    stamps = ctime_changes(m.mnt)
    chattr_stamps = chattr_checks(m.mnt)
    env.umount(m)
    env.fsck(dev)
    t_step("the kernel's ext4 (ro) sees the sizes, modes, owners and times")
    k = env.kernel_ro(dev)
    try:
        for name, want in seen.items():
            got = attrs_of(os.stat(os.path.join(k.mnt, name)))
            t_eq(got, want, "kernel ext4: %s" % name)
        for name, c in stamps.items():
            got = os.stat(os.path.join(k.mnt, "ct", name)).st_ctime_ns
            t_eq(got, c, "kernel ext4: ct/%s ctime" % name)
        for name, c in chattr_stamps.items():
            got = os.stat(os.path.join(k.mnt, "chattr", name)).st_ctime_ns
            t_eq(got, c, "kernel ext4: chattr/%s ctime" % name)
    finally:
        env.umount(k)
    atime_phase(env, dev, "relatime", relatime_checks)
    atime_phase(env, dev, "strictatime", strictatime_checks)
    atime_phase(env, dev, "noatime", noatime_checks)
    atime_phase(env, dev, "nodiratime", nodiratime_checks)
    m = env.mount(dev, ["cache_size=64M"])
    clock_checks(m.mnt)
    env.umount(m)
    env.fsck(dev)


if __name__ == "__main__":
    t_main("attrs", body, deadline_s=300)
