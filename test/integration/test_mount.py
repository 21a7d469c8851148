#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Mounting: --help/--version, bad options refused naming the option,
`mount -t fuse.wbcfs`, an fstab line (mount -T), a second mount of the same
device refused, the superblock not clean while mounted and clean after,
-o ro, an image file as a plain fuse mount, a filesystem that was not
cleanly unmounted refused (message names e2fsck) unless -o fsck, one
marked needs_recovery recovered at mount, and -o flusher_model=pdflush
(background writeback by the shared pool) writing, reading back and
leaving a filesystem e2fsck passes, and with pdflush_threads=1 a pool of
one thread that writes and never grows; -o throttle=writeback under both
flusher models: writers over the limit write pages themselves (vmstat's
nr_dirtier_pages), no IO-less pause, data and e2fsck intact.

    WBCFS_BIN=build/wbcfs test/integration/test_mount.py
    test/integration/test_mount.py --kernel   # the parts that apply to ext4
"""

import ctypes
import errno
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, MIB, Mount, TFail, t_check, t_eq, t_errno,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_manifest, t_mount_entry,
                    t_run, t_step, t_wbcfs_bin, t_wbcfs_pids, t_write_all)
import wbtrace  # noqa: E402

OPTIONS = ("cache_size", "dirty_ratio", "dirty_background_ratio", "dirty_bytes",
           "dirty_background_bytes", "dirty_expire_centisecs",
           "dirty_writeback_centisecs", "flushers", "flusher_model", "io_engine",
           "queue_depth",
           "max_io_kb", "readahead_kb", "max_threads", "poll_us", "ro", "fsck", "allow_other",
           "default_permissions", "fsname", "ctl_name", "domain", "auto_da_alloc",
           "noauto_da_alloc")

BAD_OPTIONS = ("no_such_option", "cache_size=12Q", "cache_size=abc", "domain=a/b",
               "dirty_ratio=101", "dirty_ratio=-1", "dirty_background_ratio=x",
               "dirty_expire_centisecs=soon", "io_engine=bogus",
               "queue_depth=0", "queue_depth=abc", "max_io_kb=-4",
               "readahead_kb=lots", "flushers=-1", "dirty_bytes=1Z",
               "ctl_name=a/b", "ctl_name=..", "flusher_model=percpu",
               "pdflush_threads=0", "pdflush_threads=4-2", "pdflush_threads=2",
               "auto_da_alloc=yes", "noauto_da_alloc=0")


CLONE_NEWNS = 0x00020000
_private_ns = False


def enter_private_mount_ns():
    """mount(8) runs its helpers without PATH, so mount.fuse3's /bin/sh finds
    `wbcfs` only in the default PATH (/usr/local/sbin:...:/bin).  Rather than
    install it there, this test runs in its own mount namespace (entered
    before any thread exists) and bind-mounts a directory holding a `wbcfs`
    symlink over /usr/local/sbin.  Every mount it makes dies with it."""
    global _private_ns
    if os.geteuid() != 0 or t_is_kernel():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        print("unshare(CLONE_NEWNS): %s" % os.strerror(ctypes.get_errno()))
        return
    if os.system("mount --make-rprivate /") == 0:
        _private_ns = True


def install_on_default_path(env, bindir):
    if t_is_kernel():
        return
    t_check(_private_ns, "no private mount namespace: cannot put wbcfs on "
            "mount(8)'s default PATH")
    target = "/usr/local/sbin"
    if not os.path.isdir(target):
        target = "/usr/local/bin"
    t_run(["mount", "--bind", bindir, target])
    t_log("wbcfs is %s/wbcfs (bind mount in this test's namespace)" % target)


def wait_gone(pids, what, timeout=60):
    end = time.monotonic() + timeout
    for pid in pids:
        while os.path.exists("/proc/%d" % pid):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().split(") ")[1].startswith("Z"):
                        break
            except OSError:
                break
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                raise TFail("%s: wbcfs pid %d still running %ds after umount"
                            % (what, pid, timeout))
            time.sleep(0.05)


def write_some(mnt, tag):
    d = os.path.join(mnt, tag)
    os.mkdir(d)
    for i in range(5):
        with open(os.path.join(d, "f%d" % i), "wb") as f:
            f.write(os.urandom(100000 + i))
    os.symlink("f0", os.path.join(d, "link"))


def check_help(env):
    t_step("wbcfs --help lists every option; --version prints the version")
    binp = t_wbcfs_bin()
    p = t_run([binp, "--help"], check=False)
    t_eq(p.returncode, 0, "exit code of --help")
    missing = [o for o in OPTIONS if o not in p.stdout]
    t_check(not missing, "--help does not mention %s" % missing)
    # every option --help names (its lines "  NAME=...", "  NAME[=0|1]", ...)
    # is documented in README's "Mount options" and in wbcfs(8) too
    listed = re.findall(r"^  ([a-z][a-z0-9_]*)(?=[=\[|, ]|$)",
                        p.stdout.split("Options (default in brackets):")[1], re.M)
    t_check(len(listed) > 40, "--help lists only %r" % listed)
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(top, "README.md")) as f:
        readme = f.read().split("## Mount options")[1].split("\n## ")[0]
    with open(os.path.join(top, "doc", "wbcfs.8")) as f:
        man = f.read()
    undoc = [o for o in listed if o not in readme or o not in man]
    t_check(not undoc, "options in --help but not in README's Mount options or wbcfs.8: %s"
            % undoc)
    p = t_run([binp, "--version"], check=False)
    t_eq(p.returncode, 0, "exit code of --version")
    t_check("wbcfs" in p.stdout and any(c.isdigit() for c in p.stdout),
            "--version printed %r" % p.stdout)
    p = t_run([binp], check=False)
    t_check(p.returncode != 0, "wbcfs without arguments exited 0")


def check_bad_options(env, dev):
    t_step("bad options are refused with a message naming the option")
    for opt in BAD_OPTIONS:
        mnt = env.mkdir("bad")
        rc, out = env.mount_wbcfs(dev, mnt, [opt], expect_fail=True)
        name = opt.split("=")[0]
        t_check(rc != 0, "-o %s: exit 0" % opt)
        t_check(name in out, "-o %s: exit %d but the message does not name %s:"
                "\n%s" % (opt, rc, name, out))
        t_check(not t_mount_entry(mnt), "-o %s left a mount" % opt)
        t_log("-o %s refused: %s" % (opt, out.strip().splitlines()[-1]
                                       if out.strip() else "(no output)"))


def mount_cmd(env, cmd, mnt, what, path_env):
    """Run a mount(8) command line that starts a daemonizing wbcfs; record
    the daemon for cleanup; returns the Mount."""
    t_run(cmd, env=path_env, timeout=60)
    ent = t_mount_entry(mnt)
    t_check(ent is not None, "%s: nothing mounted on %s" % (what, mnt))
    m = Mount(mnt, cmd[-2], "external")
    env.mounts.append(m)
    pids = t_wbcfs_pids(mnt) if not t_is_kernel() else []
    t_log("%s: mounted as %s (%s), daemon pids %s" % (what, ent[1], ent[2], pids))
    if not t_is_kernel():
        t_check(pids, "%s: no wbcfs daemon found for %s" % (what, mnt))
        t_check(ent[1].startswith("fuseblk"),
                "%s: a block device should mount as fuseblk, got %s"
                % (what, ent[1]))
    m.ext_pids = pids
    return m


def umount_ext(env, m, what):
    t_run(["umount", m.mnt])
    wait_gone(m.ext_pids, what)
    env.mounts.remove(m)


def check_mount_t(env, dev, path_env):
    t_step("mount -t fuse.wbcfs DEV MNT -o ... (mount.fuse3, wbcfs on PATH)")
    mnt = env.mkdir("mt")
    if t_is_kernel():
        cmd = ["mount", "-t", "ext4", "-o", "noatime", dev, mnt]
    else:
        cmd = ["mount", "-t", "fuse.wbcfs", "-o",
               "allow_other,dirty_ratio=20,cache_size=32M", dev, mnt]
    m = mount_cmd(env, cmd, mnt, "mount -t", path_env)
    write_some(mnt, "via-mount-t")
    man = t_manifest(mnt)
    umount_ext(env, m, "mount -t")
    env.verify_after_umount(dev, man)


def check_fstab(env, dev, path_env):
    t_step("an fstab line: mount -T FSTAB MNT")
    mnt = env.mkdir("fstab-mnt")
    fstab = os.path.join(env.tmp, "fstab")
    fstype, opts = ("ext4", "defaults,noatime,nofail") if t_is_kernel() else \
        ("fuse.wbcfs", "defaults,noatime,nofail,dirty_ratio=20")
    with open(fstab, "w") as f:
        f.write("# test fstab\n%s %s %s %s 0 0\n" % (dev, mnt, fstype, opts))
    m = mount_cmd(env, ["mount", "-T", fstab, mnt], mnt, "fstab", path_env)
    write_some(mnt, "via-fstab")
    man = t_manifest(mnt)
    umount_ext(env, m, "fstab")
    env.verify_after_umount(dev, man)


def check_state_and_second(env, dev):
    t_step("superblock not clean while mounted, clean after; second mount refused")
    t_eq(env.sb_state(dev), "clean", "state before mount")
    m = env.mount(dev)
    write_some(m.mnt, "state")
    os.sync()
    state = env.sb_state(dev)
    t_log("Filesystem state while mounted: %s" % state)
    if not t_is_kernel():
        feats = t_run(["dumpe2fs", "-h", dev], quiet=True).stdout
        if "has_journal" in feats:
            # as the kernel's ext4: valid while mounted, a crash is told
            # by needs_recovery (the replay makes it valid again)
            t_check("needs_recovery" in feats,
                    "needs_recovery not set on a journaled filesystem while mounted")
        else:
            t_check(state.startswith("not clean"),
                    "dumpe2fs says %r while mounted, expected 'not clean'" % state)
        mnt2 = env.mkdir("second")
        rc, out = env.mount_wbcfs(dev, mnt2, [], expect_fail=True)
        t_check(rc != 0, "second mount of %s exited 0" % dev)
        t_log("second mount refused (exit %d): %s" % (
            rc, (out.strip().splitlines() or ["(no output)"])[-1]))
        t_check(t_is_mounted_ok(m.mnt), "first mount broken by second attempt")
    man = t_manifest(m.mnt)
    env.umount(m)
    t_eq(env.sb_state(dev), "clean", "state after umount")
    env.verify_after_umount(dev, man)
    return man


def t_is_mounted_ok(mnt):
    try:
        os.listdir(mnt)
        return t_mount_entry(mnt) is not None
    except OSError:
        return False


def check_ro(env, dev, man):
    t_step("-o ro: reads work, writes fail with EROFS, superblock stays clean")
    m = env.mount(dev, ["ro"])
    t_check("ro" in t_mount_entry(m.mnt)[2].split(","),
            "mount options lack ro: %s" % t_mount_entry(m.mnt)[2])
    got = t_manifest(m.mnt)
    from wbtest import t_compare
    t_compare(man, got, "rw mount", "ro mount")
    f = os.path.join(m.mnt, "state", "f0")
    t_errno(errno.EROFS, os.open, os.path.join(m.mnt, "new"),
            os.O_CREAT | os.O_WRONLY, 0o644, what="create on ro")
    t_errno(errno.EROFS, os.open, f, os.O_WRONLY, what="open O_WRONLY on ro")
    t_errno(errno.EROFS, os.mkdir, os.path.join(m.mnt, "d"), what="mkdir on ro")
    t_errno(errno.EROFS, os.unlink, f, what="unlink on ro")
    t_errno(errno.EROFS, os.chmod, f, 0o600, what="chmod on ro")
    t_errno(errno.EROFS, os.truncate, f, 0, what="truncate on ro")
    t_errno(errno.EROFS, os.setxattr, f, "user.x", b"1", what="setxattr on ro")
    t_errno(errno.EROFS, os.rename, f, f + "x", what="rename on ro")
    state = env.sb_state(dev)
    t_eq(state, "clean", "superblock state during a ro mount")
    env.umount(m)
    env.fsck(dev)


def check_image(env):
    t_step("an image file (no loop device) mounts as plain fuse")
    img = env.image(1 * GIB, "plain.img")
    t_run(["mkfs.ext4", "-q", "-F", "-b", "4096", img])
    if t_is_kernel():
        mnt = env.mkdir("img")
        t_run(["mount", "-t", "ext4", "-o", "loop", img, mnt])
        m = Mount(mnt, img, "kernel")
        env.mounts.append(m)
    else:
        m = env.mount(img)
        fstype = t_mount_entry(m.mnt)[1]
        t_check(fstype == "fuse" or fstype.startswith("fuse."),
                "an image file should mount as plain fuse, got %s" % fstype)
    write_some(m.mnt, "img")
    fd = os.open(os.path.join(m.mnt, "big"), os.O_CREAT | os.O_WRONLY, 0o644)
    t_write_all(fd, os.urandom(8 * MIB))
    os.close(fd)          # no fsync: unmount must write it
    man = t_manifest(m.mnt)
    env.umount(m)         # waits for the daemon pid (plain fuse)
    env.verify_after_umount(img, man)


def check_not_clean(env, dev):
    t_step("a filesystem not cleanly unmounted is refused unless -o fsck")
    t_run(["debugfs", "-w", "-R", "ssv state 0", dev])
    mnt = env.mkdir("unclean")
    rc, out = env.mount_wbcfs(dev, mnt, ["allow_other"], expect_fail=True)
    t_check(rc != 0, "state not clean: mount exited 0")
    t_check("e2fsck" in out, "state not clean: refused (exit %d) but the message "
            "does not mention e2fsck:\n%s" % (rc, out))
    t_log("state not clean refused: %s" % out.strip().splitlines()[-1])
    m = env.mount(dev, ["fsck"], mnt=mnt)
    write_some(m.mnt, "after-fsck-state")
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)

    t_step("needs_recovery is recovered at mount (an empty log here)")
    t_run(["debugfs", "-w", "-R", "feature needs_recovery", dev])
    m = env.mount(dev, mnt=mnt)
    t_check("journal recovered: 0 transactions" in m.daemon_log(),
            "no recovery line:\n" + m.daemon_log())
    write_some(m.mnt, "after-recovery")
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


def read_ctl(mnt, name):
    with open(os.path.join(mnt, ".wbcfs", name)) as f:
        return f.read()


def vmstat(mnt):
    return {k: int(v) for k, v in (ln.split() for ln in read_ctl(mnt, "vmstat").splitlines())}


def write_unsynced(mnt, name, size):
    """A file of @size random bytes, not fsynced: over the background
    threshold, the pool writes it. Returns (path, data)."""
    data = os.urandom(size)
    path = os.path.join(mnt, name)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    t_write_all(fd, data)
    os.close(fd)
    return path, data


def wait_pool_pages(mnt, pages):
    """Up to 60 s for the pdflush pool to have written @pages; the vmstat after."""
    end = time.monotonic() + 60
    while vmstat(mnt)["pdflush_pages_written"] < pages and time.monotonic() < end:
        time.sleep(0.1)
    return vmstat(mnt)


def check_pdflush(env, dev):
    t_step("-o flusher_model=pdflush: the pool writes in the background; "
           "readback, fsync, unmount, e2fsck")
    m = env.mount(dev, ["flusher_model=pdflush", "cache_size=256M",
                        "dirty_background_bytes=4M"])
    flusher = read_ctl(m.mnt, "flusher").split()
    t_eq(flusher[0], "pdflush", "first line of /.wbcfs/flusher")
    t_check(int(flusher[flusher.index("threads") + 1]) >= 2,
            "pool threads: %r" % flusher)
    path, data = write_unsynced(m.mnt, "pdflush.bin", 32 * MIB)
    v = wait_pool_pages(m.mnt, 1)
    t_log("pool: %d pages written in %d background rounds, %d threads"
          % (v["pdflush_pages_written"], v["pdflush_background_rounds"],
             v["nr_pdflush_threads"]))
    t_check(v["pdflush_pages_written"] > 0, "the pool wrote nothing: %r" % v)
    t_check(v["pdflush_background_rounds"] > 0, "no background rounds: %r" % v)
    # the time it spent there: 16 MiB take the loop device well over a ms
    wait_pool_pages(m.mnt, 4096)
    busy = wbtrace.bdi(m.mnt)["PdflushBusy"]
    t_log("PdflushBusy %d ms for %d pages" % (busy, vmstat(m.mnt)["pdflush_pages_written"]))
    t_check(vmstat(m.mnt)["pdflush_pages_written"] >= 4096 and busy >= 1,
            "PdflushBusy %d ms after the pool wrote 16 MiB" % busy)
    with open(path, "rb") as f:
        t_check(f.read() == data, "pdflush.bin reads back different")
    write_some(m.mnt, "pdflush")
    fd = os.open(os.path.join(m.mnt, "pdflush", "f1"), os.O_WRONLY)
    os.fsync(fd)          # the device's own worker, with the pool beside it
    os.close(fd)
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


def check_pdflush_one(env, dev):
    t_step("-o flusher_model=pdflush,pdflush_threads=1: a pool of one thread "
           "writes alone and never grows; readback, unmount, e2fsck")
    m = env.mount(dev, ["flusher_model=pdflush", "pdflush_threads=1", "cache_size=256M",
                        "dirty_background_bytes=4M"])
    flusher = read_ctl(m.mnt, "flusher").split()
    for key in ("threads", "min_threads", "max_threads"):
        t_eq(flusher[flusher.index(key) + 1], "1", "%s in /.wbcfs/flusher" % key)
    path, data = write_unsynced(m.mnt, "one.bin", 16 * MIB)
    v = wait_pool_pages(m.mnt, 2048)
    t_log("pool of one: %d pages written, %d threads started"
          % (v["pdflush_pages_written"], v["pdflush_threads_started"]))
    t_check(v["pdflush_pages_written"] >= 2048, "the pool of one wrote %d pages"
            % v["pdflush_pages_written"])
    # busy for over a second with no idle thread would start another: not past max
    t_eq(v["pdflush_threads_started"], 1, "pdflush_threads_started")
    t_eq(v["nr_pdflush_threads"], 1, "nr_pdflush_threads")
    with open(path, "rb") as f:
        t_check(f.read() == data, "one.bin reads back different")
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


def check_dirtier(env, dev):
    t_step("-o throttle=writeback, per-device workers and pdflush: writers over "
           "the limit write pages themselves; readback, unmount, e2fsck")
    for model in ("bdi", "pdflush"):
        m = env.mount(dev, ["throttle=writeback", "flusher_model=" + model,
                            "cache_size=64M", "dirty_ratio=10", "dirty_background_ratio=5"])
        t_eq(read_ctl(m.mnt, "throttle").strip(), "writeback", "/.wbcfs/throttle")
        datas = [os.urandom(24 * MIB) for _ in range(3)]
        paths = [os.path.join(m.mnt, "dirtier-%s-%d.bin" % (model, i)) for i in range(3)]
        ths = []
        for path, data in zip(paths, datas):
            def write(path=path, data=data):
                fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                for off in range(0, len(data), 256 * 1024):
                    t_write_all(fd, data[off:off + 256 * 1024])
                os.close(fd)
            ths.append(threading.Thread(target=write))
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        v = vmstat(m.mnt)
        t_log("%s: dirtiers looked over %d times, wrote %d pages, waited %d times"
              % (model, v["nr_dirtier_evals"], v["nr_dirtier_pages"], v["nr_dirtier_waits"]))
        # 72 MiB into a 64 MiB cache with a 10% limit: the writers must have written
        t_check(v["nr_dirtier_evals"] > 0, "no dirtier was over the limit: %r" % v)
        t_check(v["nr_dirtier_pages"] > 0, "the dirtiers wrote nothing: %r" % v)
        t_eq(v["nr_throttle_pauses"], 0, "IO-less pauses under throttle=writeback")
        for path, data in zip(paths, datas):
            with open(path, "rb") as f:
                t_check(f.read() == data, "%s reads back different" % path)
        man = t_manifest(m.mnt)
        env.umount(m)
        env.verify_after_umount(dev, man)


def body(env):
    if not t_is_kernel():
        check_help(env)
    dev = env.new_fs(1 * GIB)
    bindir = env.mkdir("bin")
    path_env = dict(os.environ)
    if not t_is_kernel():
        os.symlink(t_wbcfs_bin(), os.path.join(bindir, "wbcfs"))
        path_env["PATH"] = bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")
        install_on_default_path(env, bindir)
        check_bad_options(env, dev)
    man = check_state_and_second(env, dev)
    check_ro(env, dev, man)
    check_mount_t(env, dev, path_env)
    check_fstab(env, dev, path_env)
    check_image(env)
    if not t_is_kernel():
        check_not_clean(env, dev)
        check_pdflush(env, dev)
        check_pdflush_one(env, dev)
        check_dirtier(env, dev)
    else:
        t_log("kernel target: --help, options, second mount and e2fsck "
              "refusal are wbcfs-only; skipped")


if __name__ == "__main__":
    enter_private_mount_ns()
    t_main("mount", body, deadline_s=400)
