#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""POSIX ACLs, set-user-ID and set-group-ID as the kernel's ext4 has them,
on a fresh 256 MiB loop device.  The users are numeric: 65534 (nobody)
and group 4321, which nobody joins as a supplementary group only where a
check says "member".

ACLs:
(a) chmod 644 a; setfacl -m u:65534:--- a: user 65534 cannot read a, the
    mode stays 644 (group bits = mask r--).
(b) setfacl -m u::r-- b on a 644 file: the mode becomes 444 and no ACL is
    stored (it says nothing the mode does not).
(c) chmod rewrites user::, mask:: and other:: of an access ACL: chmod 600
    denies a named user (mask ---), chmod 640 lets it read again.
(c2) the mask sets the group bits (setfacl -m m::r-- on 660: 640);
    setfacl -b leaves the mode and no ACL; removing an absent ACL
    succeeds; a default ACL on a file is EACCES, a malformed ACL EINVAL.
(d) a directory's default ACL is inherited: a file (and a fifo) created
    with mode 666 under umask 077 gets 664 and the ACL, a subdirectory gets 775 and the
    default ACL as both its default and access ACL; a symlink stays 777
    with no ACL.  Without a default ACL the umask applies (027: 640, 750).
(e) setfacl by the owner outside the file's group clears set-group-ID;
    by a member it stays.
setuid/setgid (the writer is 65534, never root):
(f) open(O_TRUNC) clears set-user-ID and group-executable set-group-ID;
    root's O_TRUNC keeps them.
(g) after a write clears set-user-ID, stat(1) (statx asking for the mode
    only) shows it cleared at once, not after the attribute timeout.
(h) set-group-ID without group-exec: cleared by a write or an fallocate
    by a non-member, kept by a member's write.
(i) a set-group-ID directory gives new subdirectories its group and
    set-group-ID, for a member and a non-member, with and without a
    default ACL; new files get the group, not the bit, unless created
    group-executable and set-group-ID by a member.
(j) an ACL the kernel's ext4 wrote before the mount is enforced: a 644
    file with u:65534:--- cannot be read by user 65534.
capabilities (security.capability, setcap cap_chown+ep; xfstests
generic/093):
(l) a write removes them, by root (an append) or by user 65534; so do a
    truncate and a chown; a read does not, nor a write of another file;
    other attributes stay. Set again after a write, the next write removes
    them again. The kernel's ext4 (ro) finds them where the mount did.
Then: unmount, e2fsck -fn clean, and the kernel's ext4 (ro) shows the same
getfacl -R listing as the mount did.  Every check runs; failures are
reported together.  Runs once.  WBCFS_TEST_TARGET=kernel runs it on ext4.

    WBCFS_BIN=build/wbcfs test/integration/test_acl.py
"""

import ctypes
import errno
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_as_user, t_log, t_main, t_run,  # noqa: E402
                    t_step)

NOBODY = 65534
GROUP = 4321
SETFACL = "/usr/bin/setfacl"
GETFACL = "/usr/bin/getfacl"
SETCAP = "/usr/sbin/setcap"
GETCAP = "/usr/sbin/getcap"
CAPS = "cap_chown=ep"

failures = []


def check(cond, msg):
    if cond:
        t_log("ok: " + msg)
    else:
        t_log("FAILED: " + msg)
        failures.append(msg)


def as_user(fn, groups=(), uid=NOBODY, gid=NOBODY, umask=None):
    """fn() in a child with uid/gid and supplementary groups (t_as_user)."""
    return t_as_user(uid, gid, fn, groups=groups, umask=umask)


def as_root_umask(fn, umask):
    return as_user(fn, uid=0, gid=0, umask=umask)


def read_file(path):
    def fn():
        with open(path, "rb") as f:
            f.read()
    return fn


def write_file(path, data=b"x", flags=os.O_WRONLY):
    def fn():
        fd = os.open(path, flags)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return fn


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def stat_mode(path):
    """The mode as stat(1) shows it: statx asking for what %a needs."""
    return int(t_run(["stat", "-c", "%a", path], quiet=True).stdout.strip(), 8)


def getfacl(path, *flags):
    p = t_run([GETFACL, "-c", "-p"] + list(flags) + [path], quiet=True)
    return [ln for ln in p.stdout.splitlines() if ln and not ln.startswith("#")]


def setfacl(*args):
    t_run([SETFACL] + list(args))


def has_acl_xattr(path, name="system.posix_acl_access"):
    return name in os.listxattr(path, follow_symlinks=False)


def new_file(path, mode, data=b"", uid=0, gid=0):
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def acl_checks(root):
    t_step("(a) a named user denied by an ACL cannot read")
    a = os.path.join(root, "a")
    new_file(a, 0o644, b"secret")
    setfacl("-m", "u:%d:---" % NOBODY, a)
    check(as_user(read_file(a)) == "errno:EACCES",
          "(a) user %d reads a after u:%d:--- (must be EACCES)" % (NOBODY, NOBODY))
    check(mode_of(a) == 0o644, "(a) mode of a stays 644, is %o" % mode_of(a))
    check("user:%d:---" % NOBODY in getfacl(a, "-n"), "(a) getfacl a shows the entry")

    t_step("(b) an ACL equal to a mode sets the mode and is not stored")
    b = os.path.join(root, "b")
    new_file(b, 0o644)
    setfacl("-m", "u::r--", b)
    check(mode_of(b) == 0o444, "(b) setfacl -m u::r-- b: mode 444, is %o" % mode_of(b))
    check(not has_acl_xattr(b), "(b) no access ACL stored on b")

    t_step("(c) chmod rewrites user::, mask:: and other::")
    c = os.path.join(root, "c")
    new_file(c, 0o644, b"data")
    setfacl("-m", "u:%d:r--" % NOBODY, c)
    check(as_user(read_file(c)) == "ok", "(c) named user reads c (u:%d:r--)" % NOBODY)
    os.chmod(c, 0o600)
    acl = getfacl(c, "-n")
    check("mask::---" in acl and "other::---" in acl and "user::rw-" in acl,
          "(c) after chmod 600: user::rw-, mask::---, other::--- in %r" % acl)
    check(as_user(read_file(c)) == "errno:EACCES", "(c) named user denied after chmod 600")
    os.chmod(c, 0o640)
    check(as_user(read_file(c)) == "ok", "(c) named user reads again after chmod 640")
    check(mode_of(c) == 0o640, "(c) mode of c is 640, is %o" % mode_of(c))

    t_step("(c2) mask, setfacl -b, absent and bad ACLs")
    c2 = os.path.join(root, "c2")
    new_file(c2, 0o640)
    setfacl("-m", "u:%d:rw,g:%d:r" % (NOBODY, GROUP), c2)
    check(mode_of(c2) == 0o660, "(c2) u:%d:rw on 640: 660, is %o" % (NOBODY, mode_of(c2)))
    setfacl("-m", "m::r--", c2)
    check(mode_of(c2) == 0o640, "(c2) m::r-- on 660: 640, is %o" % mode_of(c2))
    setfacl("-b", c2)
    check(mode_of(c2) == 0o640 and not has_acl_xattr(c2),
          "(c2) setfacl -b: 640 and no ACL, is %o, %r" % (mode_of(c2), os.listxattr(c2)))
    try:
        os.removexattr(c2, "system.posix_acl_access")
        res = "ok"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
    check(res == "ok", "(c2) removing an absent ACL succeeds: %s" % res)
    # version 2; user:: rw-, group:: r--, other:: r-- (ids unused)
    minimal = (b"\x02\x00\x00\x00" + b"\x01\x00\x06\x00\xff\xff\xff\xff"
               + b"\x04\x00\x04\x00\xff\xff\xff\xff" + b"\x20\x00\x04\x00\xff\xff\xff\xff")
    for name, value, want in (("system.posix_acl_default", minimal, "EACCES"),
                              ("system.posix_acl_access", minimal[:-3], "EINVAL")):
        try:
            os.setxattr(c2, name, value)
            res = "ok"
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
        check(res == want, "(c2) setxattr %s (%d bytes) on a file: %s (want %s)"
              % (name, len(value), res, want))

    t_step("(d) default ACLs are inherited; the umask applies without one")
    d = os.path.join(root, "d")
    os.mkdir(d, 0o755)
    setfacl("-d", "-m", "u:%d:rwx,g::r-x,o::r-x" % NOBODY, d)
    f = os.path.join(d, "f")
    sub = os.path.join(d, "sub")
    ln = os.path.join(d, "ln")
    fifo = os.path.join(d, "fifo")

    def create():
        os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o666))
        os.mkdir(sub, 0o777)
        os.symlink("f", ln)
        os.mkfifo(fifo, 0o666)
    check(as_root_umask(create, 0o077) == "ok", "(d) create f, sub, ln under d")
    check(mode_of(f) == 0o664, "(d) d/f (666, umask 077) is 664, is %o" % mode_of(f))
    check(mode_of(sub) == 0o775, "(d) d/sub (777, umask 077) is 775, is %o" % mode_of(sub))
    check(mode_of(ln) == 0o777, "(d) d/ln is 777, is %o" % mode_of(ln))
    check(mode_of(fifo) == 0o664 and has_acl_xattr(fifo),
          "(d) d/fifo (mknod 666, umask 077) is 664 with an ACL, is %o" % mode_of(fifo))
    check("user:%d:rwx\t#effective:rw-" % NOBODY in getfacl(f, "-n") or
          "user:%d:rwx" % NOBODY in getfacl(f, "-n"),
          "(d) d/f has the named entry: %r" % getfacl(f, "-n"))
    check(has_acl_xattr(f), "(d) d/f has an access ACL")
    check(has_acl_xattr(sub) and has_acl_xattr(sub, "system.posix_acl_default"),
          "(d) d/sub has an access and a default ACL")
    check(getfacl(sub, "-n", "-d") == getfacl(d, "-n", "-d"),
          "(d) d/sub's default ACL is d's: %r vs %r"
          % (getfacl(sub, "-n", "-d"), getfacl(d, "-n", "-d")))
    check(not has_acl_xattr(ln), "(d) d/ln has no ACL")
    tmp = os.path.join(d, "tmp")

    def tmpfile():
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o666)
        try:
            # linkat(AT_SYMLINK_FOLLOW): os.link's link(2) gives EXDEV here
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100,
                           tmp.encode(), 0x400) != 0:
                raise OSError(ctypes.get_errno(), "linkat")
        finally:
            os.close(fd)
    check(as_root_umask(tmpfile, 0o077) == "ok", "(d) O_TMPFILE under d, linked")
    check(mode_of(tmp) == 0o664 and getfacl(tmp, "-n") == getfacl(f, "-n"),
          "(d) an O_TMPFILE (666, umask 077) inherits as create does: %o %r"
          % (mode_of(tmp), getfacl(tmp, "-n")))
    check(as_user(write_file(f)) == "ok", "(d) named user writes d/f")
    e = os.path.join(root, "e")
    edir = os.path.join(root, "edir")

    def create_plain():
        os.close(os.open(e, os.O_CREAT | os.O_WRONLY, 0o666))
        os.mkdir(edir, 0o777)
    check(as_root_umask(create_plain, 0o027) == "ok", "(d) create e, edir at the root")
    check(mode_of(e) == 0o640, "(d) e (666, umask 027) is 640, is %o" % mode_of(e))
    check(mode_of(edir) == 0o750, "(d) edir (777, umask 027) is 750, is %o" % mode_of(edir))

    t_step("(e) setfacl by a non-member clears set-group-ID")
    for name, groups, keep in (("g_out", (), False), ("g_in", (GROUP,), True)):
        g = os.path.join(root, name)
        new_file(g, 0o2770, uid=NOBODY, gid=GROUP)

        def fn(g=g):
            p = subprocess.run([SETFACL, "-m", "u:0:rwx", g], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            return "ok" if p.returncode == 0 else "exc:" + p.stdout
        res = as_user(fn, groups=groups)
        check(res == "ok", "(e) owner sets an ACL on %s: %s" % (name, res))
        sgid = bool(mode_of(g) & stat.S_ISGID)
        check(sgid == keep, "(e) %s: set-group-ID %s after setfacl by a %s (mode %o)"
              % (name, "kept" if keep else "cleared", "member" if keep else "non-member",
                 mode_of(g)))


def priv_checks(root):
    t_step("(f) open(O_TRUNC) by a writer clears set-user-ID/set-group-ID")
    f1 = os.path.join(root, "f1")
    new_file(f1, 0o6777, b"data")
    res = as_user(lambda: os.close(os.open(f1, os.O_WRONLY | os.O_TRUNC)))
    check(res == "ok", "(f) open f1 O_TRUNC: %s" % res)
    check(stat_mode(f1) == 0o777, "(f) f1 6777 after O_TRUNC by %d is %o"
          % (NOBODY, stat_mode(f1)))
    f1r = os.path.join(root, "f1r")
    new_file(f1r, 0o6777, b"data")
    os.close(os.open(f1r, os.O_WRONLY | os.O_TRUNC))
    check(stat_mode(f1r) == 0o6777, "(f) f1r 6777 after O_TRUNC by root is %o"
          % stat_mode(f1r))

    t_step("(g) a cleared set-user-ID shows at once")
    f2 = os.path.join(root, "f2")
    new_file(f2, 0o4777)
    check(stat_mode(f2) == 0o4777, "(g) f2 is 4777 before")
    res = as_user(write_file(f2))
    check(res == "ok", "(g) write f2: %s" % res)
    check(stat_mode(f2) == 0o777, "(g) stat -c %%a f2 right after the write: %o"
          % stat_mode(f2))

    t_step("(h) set-group-ID without group-exec: the writer's group decides")
    f3 = os.path.join(root, "f3")
    new_file(f3, 0o2666)
    res = as_user(write_file(f3))
    check(res == "ok" and mode_of(f3) == 0o666,
          "(h) f3 2666 written by a non-member: %s, %o" % (res, mode_of(f3)))
    f4 = os.path.join(root, "f4")
    new_file(f4, 0o2666)

    def falloc():
        fd = os.open(f4, os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 0, 8192)
        finally:
            os.close(fd)
    res = as_user(falloc)
    check(res == "ok" and mode_of(f4) == 0o666,
          "(h) f4 2666 fallocated by a non-member: %s, %o" % (res, mode_of(f4)))
    f5 = os.path.join(root, "f5")
    new_file(f5, 0o2666, gid=GROUP)
    res = as_user(write_file(f5), groups=(GROUP,))
    check(res == "ok" and mode_of(f5) == 0o2666,
          "(h) f5 2666 written by a member: %s, %o" % (res, mode_of(f5)))

    t_step("(i) a set-group-ID directory passes its group and the bit")
    sg = os.path.join(root, "sg")
    os.mkdir(sg)
    os.chown(sg, 0, GROUP)
    os.chmod(sg, 0o2777)
    sga = os.path.join(root, "sga")
    os.mkdir(sga)
    os.chown(sga, 0, GROUP)
    os.chmod(sga, 0o2777)
    setfacl("-d", "-m", "u:%d:rwx" % NOBODY, sga)
    for parent in (sg, sga):
        for name, groups in (("member", (GROUP,)), ("other", ())):
            sub = os.path.join(parent, "sub_" + name)
            fil = os.path.join(parent, "file_" + name)
            sgf = os.path.join(parent, "sgid_" + name)

            def mk(sub=sub, fil=fil, sgf=sgf):
                os.mkdir(sub, 0o777)
                os.close(os.open(fil, os.O_CREAT | os.O_WRONLY, 0o666))
                os.close(os.open(sgf, os.O_CREAT | os.O_WRONLY, 0o2777))
            res = as_user(mk, groups=groups, umask=0o022)
            st = os.stat(sub)
            fst = os.stat(fil)
            want = 0o2777 if parent == sga else 0o2755
            check(res == "ok" and st.st_gid == GROUP and stat.S_IMODE(st.st_mode) == want,
                  "(i) %s: mkdir by a %s: %s, gid %d, mode %o (want %d, %o)"
                  % (os.path.relpath(sub, root), name, res, st.st_gid,
                     stat.S_IMODE(st.st_mode), GROUP, want))
            check(fst.st_gid == GROUP and not fst.st_mode & stat.S_ISGID,
                  "(i) %s: gid %d, mode %o" % (os.path.relpath(fil, root), fst.st_gid,
                                               stat.S_IMODE(fst.st_mode)))
            sgst = os.stat(sgf)
            check(sgst.st_gid == GROUP and bool(sgst.st_mode & stat.S_ISGID) == bool(groups),
                  "(i) %s (created 2777): gid %d, mode %o" % (
                      os.path.relpath(sgf, root), sgst.st_gid, stat.S_IMODE(sgst.st_mode)))
            if parent == sga:
                check(has_acl_xattr(sub, "system.posix_acl_default"),
                      "(i) %s inherited the default ACL" % os.path.relpath(sub, root))


def getcap(path):
    """The file's capabilities as getcap prints them ("" for none)."""
    out = t_run([GETCAP, path], quiet=True).stdout.split()
    return out[1] if len(out) == 2 else ""


def cap_checks(root):
    """(l); returns {name: capabilities} to find again on disk."""
    t_step("(l) a write, truncate or chown removes the file's capabilities")
    d = os.path.join(root, "caps")
    os.mkdir(d)
    os.chmod(d, 0o777)

    def capped(name, mode=0o755):
        p = os.path.join(d, name)
        new_file(p, mode, b"#!/bin/true\n")
        os.setxattr(p, "user.keep", b"1")
        t_run([SETCAP, "cap_chown+ep", p], quiet=True)
        check(getcap(p) == CAPS, "(l) setcap %s: getcap shows %s" % (name, CAPS))
        return p

    p = capped("append")
    with open(p, "ab") as f:
        f.write(b"data\n")
    check(getcap(p) == "", "(l) an append by root removed the capabilities")
    check(os.getxattr(p, "user.keep") == b"1", "(l) the append kept user.keep")
    p = capped("user_write", 0o777)
    check(as_user(write_file(p, b"y")) == "ok", "(l) user %d writes user_write" % NOBODY)
    check(getcap(p) == "", "(l) a write by user %d removed the capabilities" % NOBODY)
    p = capped("truncate")
    os.truncate(p, 1)
    check(getcap(p) == "", "(l) truncate removed the capabilities")
    p = capped("chown")
    os.chown(p, NOBODY, NOBODY)
    check(getcap(p) == "", "(l) chown removed the capabilities")
    p = capped("read")
    check(as_user(read_file(p)) == "ok", "(l) user %d reads read" % NOBODY)
    write_file(os.path.join(d, "append"), b"other")()
    check(getcap(p) == CAPS, "(l) a read, and a write of another file, kept them")
    p = capped("again")
    write_file(p, b"1")()
    t_run([SETCAP, "cap_chown+ep", p], quiet=True)
    check(getcap(p) == CAPS, "(l) set again after a write: getcap shows them")
    write_file(p, b"2")()
    check(getcap(p) == "", "(l) the next write removed them again")
    return dict((n, getcap(os.path.join(d, n))) for n in sorted(os.listdir(d)))


def listing(root):
    """getfacl -R of everything but lost+found, from inside root."""
    t_log("$ cd %s && getfacl -R -n -p ." % root)
    out = subprocess.run([GETFACL, "-R", "-n", "-p", "."], cwd=root, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if out.returncode:
        raise TFail("getfacl -R %s: %s" % (root, out.stdout))
    blocks = [b for b in out.stdout.split("\n\n")
              if b.strip() and "# file: ./lost+found" not in b]
    return sorted(blocks)


def copy_checks(env, root):
    t_step("(k) cp -a keeps every mode: it sets them with an ACL equal to the mode")
    src = env.mkdir("tree")
    modes = {"": 0o755, "a": 0o750, "a/b": 0o711, "c": 0o2775}
    for rel, mode in modes.items():
        p = os.path.join(src, rel)
        if rel:
            os.mkdir(p)
        os.chmod(p, mode)
        new_file(os.path.join(p, "f"), 0o640 if rel else 0o604)
    dst = os.path.join(root, "copy")
    t_run(["cp", "-a", src, dst])
    for rel, mode in modes.items():
        p = os.path.join(dst, rel)
        check(mode_of(p) == mode, "(k) copy/%s is %o, source %o" % (rel, mode_of(p), mode))
        check(mode_of(os.path.join(p, "f")) == (0o640 if rel else 0o604),
              "(k) copy/%s/f is %o" % (rel, mode_of(os.path.join(p, "f"))))


def body(env):
    for tool in (SETFACL, GETFACL):
        if not os.access(tool, os.X_OK):
            raise TFail("%s is missing (package acl)" % tool)
    for tool in (SETCAP, GETCAP):
        if not os.access(tool, os.X_OK):
            raise TFail("%s is missing (package libcap2-bin)" % tool)
    dev = env.new_fs(256 * MIB)
    t_step("(j) the kernel's ext4 writes an ACL before the mount")
    kmnt = env.mkdir("krw")
    t_run(["mount", "-t", "ext4", dev, kmnt])
    try:
        new_file(os.path.join(kmnt, "j"), 0o644, b"secret")
        setfacl("-m", "u:%d:---" % NOBODY, os.path.join(kmnt, "j"))
    finally:
        t_run(["umount", kmnt])
    m = env.mount(dev, ["cache_size=64M"])
    os.chmod(m.mnt, 0o777)
    j = os.path.join(m.mnt, "j")
    check(as_user(read_file(j)) == "errno:EACCES",
          "(j) user %d reads j, denied by an ACL ext4 wrote (must be EACCES)" % NOBODY)
    check("user:%d:---" % NOBODY in getfacl(j, "-n"), "(j) getfacl j shows the entry")
    acl_checks(m.mnt)
    priv_checks(m.mnt)
    copy_checks(env, m.mnt)
    caps = cap_checks(m.mnt)
    before = listing(m.mnt)
    env.umount(m)
    env.fsck(dev)
    t_step("the kernel's ext4 (ro) shows the same ACLs and capabilities")
    k = env.kernel_ro(dev)
    try:
        after = listing(k.mnt)
        for name, want in caps.items():
            got = getcap(os.path.join(k.mnt, "caps", name))
            check(got == want, "(l) kernel ext4: caps/%s has capabilities %r (mount: %r)"
                  % (name, got, want))
    finally:
        env.umount(k)
    check(before == after, "getfacl -R: the mount and the kernel's ext4 agree")
    if before != after:
        for b in sorted(set(before) ^ set(after)):
            t_log("%s:\n%s" % ("mount" if b in before else "kernel", b))
    if failures:
        raise TFail("%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))


if __name__ == "__main__":
    t_main("acl", body, deadline_s=120)
