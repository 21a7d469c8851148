# SPDX-License-Identifier: GPL-2.0-or-later
"""Shared helpers for the wbcfs integration tests (Python 3 stdlib only).

A test builds a fresh ext4 filesystem on a loop device it creates itself,
mounts it through wbcfs (or, with --kernel / WBCFS_TEST_TARGET=kernel,
through the kernel's ext4 so the test itself can be validated), runs its
checks, unmounts, runs `e2fsck -fn`, mounts the device read-only with the
kernel's ext4 and compares the tree with what it saw through the mount.

Everything a test creates (temp dirs, images, loop devices, mounts,
daemons) is recorded in a T_Env and undone by T_Env.cleanup(), which
t_main() runs in a finally clause and on SIGTERM/SIGINT: only what the test
created is touched.  A watchdog thread kills the daemon when the test
overruns its deadline, so a hung FUSE request cannot wedge the run.

WBCFS_IO_ENGINE=uring|aio|psync in the environment adds io_engine= to every
wbcfs mount (meson runs each suite once per engine).  WBCFS_TRANSPORT=
uring|dev|auto adds transport=; a mount asked for uring or dev fails the
test unless /.wbcfs/transport reports that transport serving it.

WBCFS_DEVICE=nbd serves each device a test mounts through wbcfs by nbdkit
(file plugin, unix socket in the temp dir) and mounts its NBD URI instead:
the same suite then runs over NBD, and its oracles (e2fsck, the kernel's
ext4) still read the device once the daemon and the server are gone.

WBCFS_DEVICE=rbd does the same over Ceph RBD: a tools/ceph-dev cluster
(started at the first mount, stopped in cleanup) gets each device as an
image (`rbd import`, at its first mount), wbcfs mounts rbd:rbd/IMAGE, and
after each unmount or kill the extents the image changed since its import
(`rbd diff` from a snapshot) are copied back onto the device for the
oracles. A test that writes the device itself between mounts is not
followed (the image is kept).

Exit codes: 0 pass, 1 fail, 77 skip (meson's convention).
"""

import atexit
import errno
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

T_EXIT_SKIP = 77
T_EXIT_FAIL = 1

MIB = 1 << 20
GIB = 1 << 30


class TFail(Exception):
    """A check failed: the message says what was expected and what was seen."""


class TSkip(Exception):
    """The machine cannot run this test (not root, no /dev/fuse, ...)."""


# --------------------------------------------------------------------------
# logging and checks

_t0 = time.monotonic()


def t_log(msg):
    print("[%7.2fs] %s" % (time.monotonic() - _t0, msg), flush=True)


def t_step(msg):
    """Announce what is being checked next."""
    t_log("check: " + msg)


def t_fail(msg):
    raise TFail(msg)


def t_check(cond, msg):
    if not cond:
        raise TFail(msg)


def t_check_bitmaps_tracked(mnt):
    """syncfs, which writes every group's bitmaps and counts those that
    changed without the daemon having noted it (nr_bitmap_untracked): a
    commit writes only the noted ones, so any such change was late."""
    subprocess.run(["sync", "-f", mnt], check=True)
    with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
        vm = dict((k, int(v)) for k, v in (line.split() for line in f))
    t_eq(vm["nr_bitmap_untracked"], 0, "bitmaps changed without being noted")


def t_eq(got, want, what):
    if got != want:
        raise TFail("%s: expected %r, got %r" % (what, want, got))


def t_errno(want, fn, *args, what=None, **kw):
    """Call fn(*args); it must raise OSError with errno `want` (or one of a
    tuple of errnos)."""
    wants = want if isinstance(want, tuple) else (want,)
    label = what or "%s%r" % (getattr(fn, "__name__", fn), args)
    try:
        ret = fn(*args, **kw)
    except OSError as e:
        if e.errno not in wants:
            raise TFail("%s: expected %s, got %s (%s)" % (
                label, "/".join(errno.errorcode[w] for w in wants),
                errno.errorcode.get(e.errno, e.errno), e.strerror))
        return e
    raise TFail("%s: expected %s, but it succeeded (returned %r)" % (
        label, "/".join(errno.errorcode[w] for w in wants), ret))


def t_dump_stacks(pid):
    """Print where every thread of a hung daemon waits: each task's
    kernel stack, and with gdb installed each thread's backtrace (a hang
    in CI is then diagnosable from its log alone)."""
    print("--- stacks of pid %d ---" % pid, flush=True)
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
    except OSError as e:
        print("no /proc/%d/task: %s" % (pid, e), flush=True)
        return
    for tid in tids:
        base = "/proc/%d/task/%s/" % (pid, tid)
        parts = []
        for f in ("comm", "wchan", "stack"):
            try:
                with open(base + f) as fh:
                    parts.append(fh.read().strip())
            except OSError:
                parts.append("?")
        print("task %s %s wchan=%s\n%s" % (tid, parts[0], parts[1],
                                           parts[2]), flush=True)
    if shutil.which("gdb"):
        try:
            p = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                                "-ex", "set pagination off",
                                "-ex", "thread apply all bt"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, timeout=120)
            print(p.stdout, flush=True)
        except (subprocess.TimeoutExpired, OSError) as e:
            print("gdb: %s" % e, flush=True)
    print("--- end of stacks ---", flush=True)


def t_dump_umount_stacks():
    """Print the kernel stack of every umount(8) still running: which
    request the kernel waits on (SYNCFS, DESTROY, a flush)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != "umount":
                    continue
            with open("/proc/%s/stack" % pid) as f:
                print("umount pid %s:\n%s" % (pid, f.read().strip()), flush=True)
        except OSError:
            pass


def t_run(cmd, check=True, timeout=300, input=None, env=None, quiet=False):
    """Run a command, capture stdout+stderr as text; fail the test on a
    non-zero exit when check is set."""
    if not quiet:
        t_log("$ " + " ".join(cmd))
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, input=input, env=env,
                           stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TFail("%s: timed out after %ss" % (" ".join(cmd), timeout))
    if check and p.returncode != 0:
        raise TFail("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return p


# --------------------------------------------------------------------------
# target selection

def t_target():
    """'kernel' when the test runs against the kernel's ext4, else 'wbcfs'."""
    if "--kernel" in sys.argv[1:]:
        return "kernel"
    t = os.environ.get("WBCFS_TEST_TARGET", "wbcfs")
    if t not in ("wbcfs", "kernel"):
        raise TFail("WBCFS_TEST_TARGET must be wbcfs or kernel, not %r" % t)
    return t


def t_is_kernel():
    return t_target() == "kernel"


def t_wbcfs_bin():
    """Path of the wbcfs executable (env WBCFS_BIN, set by meson)."""
    p = os.environ.get("WBCFS_BIN")
    if not p:
        here = os.path.dirname(os.path.abspath(__file__))
        for cand in ("build-test/wbcfs", "build/wbcfs"):
            c = os.path.join(here, "..", "..", cand)
            if os.path.exists(c):
                p = os.path.abspath(c)
                break
    if not p or not os.access(p, os.X_OK):
        # A missing daemon is a failure, not a skip: meson always builds it.
        raise TFail("wbcfs executable not found (WBCFS_BIN=%r)" % p)
    return os.path.abspath(p)   # tests chdir and put it on PATH


def t_wbcfs_pids(mnt):
    """Pids of wbcfs processes serving mnt (by /proc: exe and argv)."""
    binp = os.path.realpath(t_wbcfs_bin())
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % d)
            with open("/proc/%s/cmdline" % d, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if exe == binp and os.fsencode(mnt) in args:
            out.append(int(d))
    return out


def t_require_machine(need_fuse=None):
    """Skip (77) when the machine cannot run mount tests."""
    if os.geteuid() != 0:
        raise TSkip("needs root")
    for prog in ("mkfs.ext4", "e2fsck", "losetup", "mount", "umount",
                 "dumpe2fs", "mountpoint"):
        if shutil.which(prog) is None:
            raise TSkip("%s not installed" % prog)
    if not os.path.exists("/dev/loop-control"):
        raise TSkip("no loop device support (/dev/loop-control)")
    if need_fuse is None:
        need_fuse = not t_is_kernel()
    if need_fuse and not os.path.exists("/dev/fuse"):
        raise TSkip("no /dev/fuse")


# --------------------------------------------------------------------------
# mounts

URING_SWITCH = "/sys/module/fuse/parameters/enable_uring"


def t_uring_switch_on():
    """FUSE over io_uring for the io_uring runs: the kernel's switch on
    (it only matters to daemons that ask for it in INIT), or skip."""
    try:
        with open(URING_SWITCH) as f:
            if f.read().strip() == "Y":
                return
        with open(URING_SWITCH, "w") as f:
            f.write("Y")
    except OSError as e:
        raise TSkip("no FUSE over io_uring in this kernel (%s)" % e)


def _unescape_mount(s):
    return s.replace("\\040", " ").replace("\\011", "\t") \
            .replace("\\012", "\n").replace("\\134", "\\")


def t_mount_entry(path):
    """The (source, fstype, options) of the mount at `path`, or None."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and _unescape_mount(parts[1]) == path:
                found = (_unescape_mount(parts[0]), parts[2], parts[3])
    return found


def t_is_mounted(path):
    return t_mount_entry(path) is not None


class Mount:
    def __init__(self, mnt, dev, kind, proc=None, log=None):
        self.mnt = mnt          # mount point
        self.dev = dev          # device or image
        self.kind = kind        # 'wbcfs' | 'kernel' | 'kernel-ro' | 'external'
        self.proc = proc        # subprocess.Popen of a -f daemon, or None
        self.pid = proc.pid if proc else None
        self.log = log          # daemon log file path
        self.mounted = True
        self.nbdkit = None      # WBCFS_DEVICE=nbd: the server of dev
        self.rbd = None         # WBCFS_DEVICE=rbd: (env, device) to copy back

    def daemon_log(self):
        if not self.log or not os.path.exists(self.log):
            return ""
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]


BLKIO_ROOT = "/sys/fs/cgroup/blkio"
MEMORY_ROOT = "/sys/fs/cgroup/memory"


def t_dev_majmin(dev):
    """'MAJ:MIN' of a block device node."""
    rdev = os.stat(dev).st_rdev
    return "%d:%d" % (os.major(rdev), os.minor(rdev))


class BlkioCgroup:
    """A cgroup v1 blkio group: write_bps(dev, bps) limits what its tasks
    write to dev, add(pid) moves a process (all its threads) in, preexec()
    is a subprocess preexec_fn that starts the child inside.  Made through
    T_Env.blkio_cgroup(), which removes it at cleanup."""

    def __init__(self, name, root=BLKIO_ROOT):
        self.name = name
        self.root = root
        self.path = os.path.join(root, name)
        os.mkdir(self.path)
        t_log("cgroup %s created" % self.path)

    def _put(self, f, text):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(text)

    def write_bps(self, dev, bps):
        """Limit writes to block device dev (a /dev path) to bps bytes/s."""
        self._put("blkio.throttle.write_bps_device",
                  "%s %d" % (t_dev_majmin(dev), bps))
        t_log("blkio %s: writes to %s (%s) limited to %d B/s"
              % (self.name, dev, t_dev_majmin(dev), bps))

    def add(self, pid):
        """Move a process (in v1, cgroup.procs moves every thread)."""
        self._put("cgroup.procs", str(pid))

    def preexec(self):
        """For subprocess.Popen(preexec_fn=...): the child joins the group
        before it execs."""
        path = os.path.join(self.path, "cgroup.procs")

        def fn():
            with open(path, "w") as fh:
                fh.write(str(os.getpid()))
        return fn

    def pids(self):
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as fh:
                return [int(x) for x in fh.read().split()]
        except OSError:
            return []

    def remove(self):
        """Move the tasks back to the root group and rmdir; quiet, for
        cleanup paths."""
        if not os.path.isdir(self.path):
            return
        for _ in range(50):
            for pid in self.pids():
                try:
                    with open(os.path.join(self.root, "cgroup.procs"),
                              "w") as fh:
                        fh.write(str(pid))
                except OSError:
                    pass            # exited meanwhile
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)     # a task was still leaving or forking
        print("cleanup: could not remove cgroup %s (tasks %s)"
              % (self.path, self.pids()), flush=True)


class T_Env:
    """Everything one test created, undone by cleanup() in reverse order."""

    def __init__(self, name, deadline_s=600):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="wbt-%s-" % name)
        os.chmod(self.tmp, 0o755)   # non-root children must reach mounts
        self.dirs = []          # mount points we made (inside self.tmp)
        self.loops = []         # loop devices we attached
        self.mounts = []        # Mount objects
        self.procs = []         # other daemons (pids) we must reap
        self.shm = []           # tmpfs dirs we made
        self.cgroups = []       # cgroups we made (anything with remove())
        self.undo = []          # other system state: callables, run last
                                # first after the cgroups (swapoff, ...)
        self.watchdog_fired = False
        self._cleaned = False
        self._wd = threading.Timer(deadline_s, self._watchdog)
        self._wd.daemon = True
        self._wd.start()
        t_log("test %s: target=%s, temp dir %s" % (name, t_target(), self.tmp))

    # -- watchdog: a hung FUSE request must not hang the test forever.
    def _watchdog(self):
        self.watchdog_fired = True
        print("WATCHDOG: test overran its deadline; killing wbcfs daemons",
              flush=True)
        t_dump_umount_stacks()
        for m in self.mounts:
            if m.proc and m.proc.poll() is None:
                t_dump_stacks(m.pid)
                try:
                    m.proc.kill()
                except OSError:
                    pass

    # -- temp files
    def mkdir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        self.dirs.append(d)
        return d

    def shm_dir(self, name):
        base = "/dev/shm" if os.path.isdir("/dev/shm") else self.tmp
        d = tempfile.mkdtemp(prefix="wbt-%s-%s-" % (self.name, name), dir=base)
        self.shm.append(d)
        return d

    def image(self, size_bytes, name="disk.img"):
        """A sparse image file of size_bytes in the temp dir."""
        p = os.path.join(self.tmp, name)
        with open(p, "wb") as f:
            f.truncate(size_bytes)
        return p

    def loop(self, img):
        """Attach img with losetup --direct-io=on; returns /dev/loopN."""
        p = t_run(["losetup", "--direct-io=on", "--find", "--show", img])
        dev = p.stdout.strip().splitlines()[-1]
        t_check(dev.startswith("/dev/loop"), "losetup gave %r" % dev)
        self.loops.append(dev)
        return dev

    def mkfs(self, dev, opts=None, block_size=4096):
        """mkfs.ext4 -q -F with 4 KiB blocks unless told otherwise."""
        cmd = ["mkfs.ext4", "-q", "-F", "-b", str(block_size)]
        cmd += list(opts or [])
        cmd.append(dev)
        t_run(cmd)

    def new_fs(self, size_bytes=1 * GIB, mkfs_opts=None, name="disk.img", fill=None):
        """Image + loop + mkfs; returns the loop device. With fill (bytes),
        the image is first filled with that pattern repeated, and mkfs
        neither discards nor leaves inode tables or the journal to lazy
        init: every block no one writes keeps the pattern, as stale data
        on a used disk would."""
        img = self.image(size_bytes, name)
        opts = list(mkfs_opts or [])
        if fill:
            chunk = (fill * (MIB // len(fill) + 1))[:MIB]
            with open(img, "r+b") as f:
                for _ in range(size_bytes // MIB):
                    f.write(chunk)
                f.write(chunk[:size_bytes % MIB])
            opts = ["-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"] + opts
        dev = self.loop(img)
        self.mkfs(dev, opts)
        return dev

    def detach(self, dev):
        t_run(["losetup", "-d", dev], check=False)
        if dev in self.loops:
            self.loops.remove(dev)

    # -- mounting the target
    def mount(self, dev, opts=(), mnt=None, extra_args=(), expect_fail=False,
              timeout=120, preexec=None):
        """Mount dev on a temp dir with the target under test.

        wbcfs: `WBCFS_BIN DEV MNT -f -o allow_other,default_permissions,...`
        in the background; wait until it shows in /proc/mounts or the daemon
        exits.  kernel: `mount -t ext4`.  With expect_fail the mount must
        fail: returns (exit code, output) instead of a Mount.  preexec (a
        subprocess preexec_fn, e.g. a cgroup's) runs in the daemon before
        it execs."""
        mnt = mnt or self.mkdir("mnt%d" % len(self.mounts))
        if t_is_kernel():
            kopts = [o for o in opts if o in ("ro", "noatime")]
            cmd = ["mount", "-t", "ext4"]
            if kopts:
                cmd += ["-o", ",".join(kopts)]
            p = t_run(cmd + [dev, mnt], check=not expect_fail)
            if expect_fail:
                return (p.returncode, p.stdout)
            m = Mount(mnt, dev, "kernel")
            self.mounts.append(m)
            return m
        return self.mount_wbcfs(dev, mnt, ["allow_other", "default_permissions"]
                                + list(opts), extra_args, expect_fail, timeout,
                                preexec)

    def mount_wbcfs(self, dev, mnt, opts, extra_args=(), expect_fail=False,
                    timeout=120, preexec=None):
        binp = t_wbcfs_bin()
        eng = os.environ.get("WBCFS_IO_ENGINE")
        if eng and not any(o.startswith("io_engine=") for o in opts):
            opts = list(opts) + ["io_engine=" + eng]
        tra = os.environ.get("WBCFS_TRANSPORT")
        if tra and not any(o.startswith("transport=") for o in opts):
            opts = list(opts) + ["transport=" + tra]
            if tra == "uring":
                t_uring_switch_on()
        log = os.path.join(self.tmp, "wbcfs-%d.log" % len(self.mounts))
        nbdkit, src, rbd = None, dev, None
        if os.environ.get("WBCFS_DEVICE") == "nbd" and dev.startswith("/"):
            nbdkit, src = self._nbd_serve(dev, "ro" in opts)
        if os.environ.get("WBCFS_DEVICE") == "rbd" and dev.startswith("/"):
            src, rbd = self._rbd_image(dev), (self, dev)
            if dev in self._rbd_dead:
                self._rbd_dead.discard(dev)
                opts = list(opts) + ["break_lock"]
        cmd = [binp, src, mnt, "-f"] + list(extra_args)
        if opts:
            cmd += ["-o", ",".join(opts)]
        t_log("$ " + " ".join(cmd) + " &")
        logf = open(log, "w")
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec)
        logf.close()
        m = Mount(mnt, dev, "wbcfs", proc, log)
        m.mounted = False
        m.nbdkit = nbdkit
        m.rbd = rbd
        self.mounts.append(m)
        end = time.monotonic() + timeout
        while True:
            if t_is_mounted(mnt):
                m.mounted = True
                break
            rc = proc.poll()
            if rc is not None:
                out = m.daemon_log()
                if expect_fail:
                    self.mounts.remove(m)
                    _nbd_stop(m)
                    return (rc, out)
                raise TFail("wbcfs exited with %d before mounting %s:\n%s"
                            % (rc, dev, out))
            if time.monotonic() > end:
                raise TFail("wbcfs did not mount %s within %ds:\n%s"
                            % (dev, timeout, m.daemon_log()))
            time.sleep(0.05)
        if expect_fail:
            raise TFail("wbcfs mounted %s but should have refused" % dev)
        # the first access waits for FUSE_INIT; make sure it works
        try:
            os.stat(mnt)
        except OSError as e:
            raise TFail("stat of fresh mount %s: %s\n%s" % (mnt, e, m.daemon_log()))
        self._check_transport(m, opts)
        t_log("mounted %s on %s (%s, pid %s)" % (dev, mnt,
              t_mount_entry(mnt)[1], m.pid))
        return m

    def _nbd_serve(self, dev, ro):
        """nbdkit serving dev on a unix socket; returns (Popen, URI)."""
        if not shutil.which("nbdkit"):
            raise TSkip("WBCFS_DEVICE=nbd: nbdkit is not installed")
        sock = os.path.join(self.tmp, "nbd%d.sock" % len(self.mounts))
        if os.path.exists(sock):
            os.unlink(sock)
        cmd = ["nbdkit", "--exit-with-parent", "-f", "-U", sock] + (["-r"] if ro else [])
        cmd += ["file", "file=" + dev]
        t_log("$ " + " ".join(cmd) + " &")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        end = time.monotonic() + 15
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                proc.wait()
                raise TFail("nbdkit did not serve %s on %s" % (dev, sock))
            time.sleep(0.02)
        return proc, "nbd+unix:///?socket=" + sock

    def _rbd_image(self, dev):
        """WBCFS_DEVICE=rbd: the image standing for @dev (imported at its
        first mount, with a snapshot 'base' to diff against); returns its
        rbd: name."""
        if not hasattr(self, "_rbd"):
            if not shutil.which("ceph-mon") or not shutil.which("rbd"):
                raise TSkip("WBCFS_DEVICE=rbd: the ceph packages are not installed")
            d = os.path.join(self.tmp, "ceph")
            top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            tool = os.path.join(top, "tools", "ceph-dev")
            self.undo.append(lambda: t_run([tool, "stop", d], check=False, timeout=120))
            p = t_run([tool, "start", d], timeout=240)
            os.environ["CEPH_CONF"] = p.stdout.strip().splitlines()[-1].split("=", 1)[1]
            self._rbd = {}
            self._rbd_dead = set()
        if dev not in self._rbd:
            name = "img%d" % len(self._rbd)
            # a loop device's backing file reads faster than the device
            back = t_run(["losetup", "-nO", "BACK-FILE", dev], check=False,
                         quiet=True).stdout.strip() if dev.startswith("/dev/loop") else ""
            t_run(["rbd", "import", "--no-progress", back or dev, "rbd/" + name],
                  timeout=600)
            t_run(["rbd", "snap", "create", "rbd/%s@base" % name])
            self._rbd[dev] = name
        return "rbd:rbd/" + self._rbd[dev]

    def _rbd_copy_back(self, dev):
        """Write onto @dev what its image changed since 'base' (rbd
        export-diff's stream: its writes and zeroed ranges), then move
        'base' to now, so the oracles read what wbcfs wrote."""
        import struct
        name = self._rbd[dev]
        diff = os.path.join(self.tmp, name + ".diff")
        if os.path.exists(diff):
            os.unlink(diff)
        t_run(["rbd", "export-diff", "--no-progress", "--from-snap", "base",
               "rbd/" + name, diff], timeout=600)
        n_ext = 0
        with open(diff, "rb") as f:
            fdo = os.open(dev, os.O_WRONLY)
            try:
                t_check(f.readline() == b"rbd diff v1\n", "rbd export-diff: not a v1 diff")
                while True:
                    tag = f.read(1)
                    if tag in (b"", b"e"):
                        break
                    if tag in (b"f", b"t"):         # from/to snapshot names
                        f.read(struct.unpack("<I", f.read(4))[0])
                    elif tag == b"s":               # the image's size
                        f.read(8)
                    elif tag in (b"w", b"z"):       # data, or zeros
                        off, n = struct.unpack("<QQ", f.read(16))
                        n_ext += 1
                        while n:
                            k = min(n, 4 * MIB)
                            t_write_all(fdo, f.read(k) if tag == b"w" else bytes(k), off)
                            off += k
                            n -= k
                    else:
                        raise TFail("rbd export-diff: unknown record %r" % tag)
                os.fsync(fdo)
            finally:
                os.close(fdo)
        os.unlink(diff)
        t_run(["rbd", "snap", "rm", "--no-progress", "rbd/%s@base" % name])
        t_run(["rbd", "snap", "create", "rbd/%s@base" % name])
        t_log("rbd: %d extents of rbd/%s copied back to %s" % (n_ext, name, dev))

    def _check_transport(self, m, opts):
        """transport=uring|dev must be what serves the mount."""
        want = [o.split("=", 1)[1] for o in opts if o.startswith("transport=")]
        if not want or want[-1] not in ("uring", "dev"):
            return
        ctl = ".wbcfs"
        for o in opts:
            if o.startswith("ctl_name="):
                ctl = o.split("=", 1)[1]
        try:
            with open(os.path.join(m.mnt, ctl, "transport")) as f:
                got = f.readline().strip()
        except OSError as e:
            raise TFail("cannot read /%s/transport: %s" % (ctl, e))
        if got != want[-1]:
            raise TFail("mounted with transport=%s but %s serves it:\n%s"
                        % (want[-1], got, m.daemon_log()))

    def wait_daemon(self, m, timeout=120):
        """Wait for a wbcfs daemon to exit; kill -9 and fail on timeout or
        on a non-zero exit."""
        if not m.proc:
            return
        try:
            rc = m.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            t_dump_stacks(m.pid)
            m.proc.kill()
            m.proc.wait()
            raise TFail("wbcfs (pid %d) still running %ds after umount; killed\n%s"
                        % (m.pid, timeout, m.daemon_log()))
        if rc != 0:
            raise TFail("wbcfs (pid %d) exited with %d after umount:\n%s"
                        % (m.pid, rc, m.daemon_log()))
        if "unavailable" in m.daemon_log() and os.environ.get("WBCFS_IO_ENGINE"):
            raise TFail("wbcfs (pid %d) did not use io_engine=%s:\n%s"
                        % (m.pid, os.environ["WBCFS_IO_ENGINE"], m.daemon_log()))
        t_log("daemon pid %d exited 0" % m.pid)

    def umount(self, m, timeout=120):
        """umount(8), then wait for the daemon (plain fuse mounts return
        before it has finished writing)."""
        t0 = time.monotonic()
        t_log("$ umount " + m.mnt)
        p = subprocess.Popen(["umount", m.mnt], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             stdin=subprocess.DEVNULL)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # umount waits in the kernel for the daemon's reply: show
            # both sides, then kill the daemon, which ends the umount
            t_dump_umount_stacks()
            if m.proc and m.proc.poll() is None:
                t_dump_stacks(m.pid)
                m.proc.kill()
            p.kill()
            p.communicate()
            raise TFail("umount %s: timed out after %ss; daemon killed\n%s"
                        % (m.mnt, timeout, m.daemon_log()))
        if p.returncode != 0:
            raise TFail("umount %s failed: %s\n%s" % (m.mnt, out,
                                                     m.daemon_log()))
        m.mounted = False
        self.wait_daemon(m, timeout)
        _nbd_stop(m)
        _rbd_stop(m)
        if m in self.mounts:
            self.mounts.remove(m)
        t_log("unmounted %s in %.2fs" % (m.mnt, time.monotonic() - t0))

    def kill(self, m, tries=100):
        """SIGKILL the daemon of @m (a crash: nothing is flushed or
        committed) and take down its dead mount. The kernel's ext4 cannot
        be killed: it is unmounted cleanly instead, which still validates
        a test's oracle."""
        if t_is_kernel():
            self.umount(m)
            return
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait(60)
        t_log("daemon pid %d killed with SIGKILL" % m.pid)
        _rbd_stop(m, killed=True)
        for _ in range(tries):
            if not t_is_mounted(m.mnt):
                break
            if t_run(["umount", m.mnt], check=False).returncode != 0:
                time.sleep(0.1)
        if t_is_mounted(m.mnt):
            t_run(["umount", "-l", m.mnt], check=False)
        t_check(not t_is_mounted(m.mnt), "dead mount %s would not go away" % m.mnt)
        m.mounted = False
        self.mounts.remove(m)

    def kernel_ro(self, dev):
        """Mount dev read-only with the kernel's ext4 (noload: never replay)."""
        mnt = self.mkdir("kro%d" % len(self.mounts))
        t_run(["mount", "-t", "ext4", "-o", "ro,noload", dev, mnt])
        m = Mount(mnt, dev, "kernel-ro")
        self.mounts.append(m)
        return m

    def fsck(self, dev):
        """e2fsck -fn must find nothing."""
        t_step("e2fsck -fn %s is clean" % dev)
        p = t_run(["e2fsck", "-fn", dev], check=False)
        if p.returncode != 0:
            raise TFail("e2fsck -fn %s: exit %d\n%s" % (dev, p.returncode,
                                                       p.stdout))
        t_log(p.stdout.strip().splitlines()[-1])

    def sb_state(self, dev):
        """'clean' or 'not clean' (...) from dumpe2fs -h."""
        p = t_run(["dumpe2fs", "-h", dev], quiet=True)
        for line in p.stdout.splitlines():
            if line.startswith("Filesystem state:"):
                return line.split(":", 1)[1].strip()
        raise TFail("dumpe2fs -h %s: no Filesystem state line" % dev)

    def verify_after_umount(self, dev, manifest, keys=None, exclude=()):
        """The common ending: e2fsck -fn clean, then the kernel's ext4 sees
        `manifest` (taken through the mount before unmount)."""
        self.fsck(dev)
        t_step("kernel ext4 (ro) sees the same tree as the mount did")
        k = self.kernel_ro(dev)
        try:
            got = t_manifest(k.mnt, exclude=exclude)
        finally:
            self.umount(k)
        t_compare(manifest, got, "mounted", "kernel-ext4", keys=keys)

    # -- slow disks: cgroup v1 blkio throttling
    def blkio_cgroup(self, name=None):
        """A new blkio cgroup (default name wbt-<pid>-<n>), removed by
        cleanup() whatever happens: its tasks go back to the root cgroup,
        then it is rmdir'ed.  Skips the test when cgroup v1 blkio is not
        mounted."""
        if not os.path.isfile(os.path.join(BLKIO_ROOT,
                                           "blkio.throttle.write_bps_device")):
            raise TSkip("no cgroup v1 blkio throttling at %s" % BLKIO_ROOT)
        name = name or "wbt-%d-%d" % (os.getpid(), len(self.cgroups))
        cg = BlkioCgroup(name)
        self.cgroups.append(cg)
        return cg

    def memory_cgroup(self, limit_bytes, name=None):
        """A new cgroup v1 memory group limited to limit_bytes (the same
        object as blkio_cgroup's: add, preexec, pids), removed by cleanup()
        whatever happens.  Skips the test without cgroup v1 memory."""
        if not os.path.isfile(os.path.join(MEMORY_ROOT, "memory.limit_in_bytes")):
            raise TSkip("no cgroup v1 memory controller at %s" % MEMORY_ROOT)
        name = name or "wbt-%d-%d" % (os.getpid(), len(self.cgroups))
        cg = BlkioCgroup(name, MEMORY_ROOT)
        self.cgroups.append(cg)
        cg._put("memory.limit_in_bytes", str(limit_bytes))
        t_log("memory cgroup %s: limit %d" % (name, limit_bytes))
        return cg

    # -- cleanup
    def cleanup(self):
        if self._cleaned:
            return
        self._cleaned = True
        self._wd.cancel()
        for m in reversed(self.mounts):
            self._undo_mount(m)
        self.mounts = []
        for cg in reversed(self.cgroups):
            cg.remove()
        self.cgroups = []
        for fn in reversed(self.undo):
            try:
                fn()
            except Exception as e:      # the rest must still be undone
                print("cleanup: %r: %s" % (fn, e), flush=True)
        self.undo = []
        for dev in reversed(self.loops):
            p = subprocess.run(["losetup", "-d", dev], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                print("cleanup: losetup -d %s: %s" % (dev, p.stdout.strip()),
                      flush=True)
        self.loops = []
        for d in self.shm:
            shutil.rmtree(d, ignore_errors=True)
        if _mounts_under(self.tmp):
            print("cleanup: %s still has mounts under it; left in place"
                  % self.tmp, flush=True)
        elif os.environ.get("WBCFS_KEEP_TMP"):
            print("cleanup: kept %s" % self.tmp, flush=True)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _undo_mount(self, m):
        _close_fds_under(m.mnt)

        def run(cmd):
            try:
                return subprocess.run(cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      timeout=60).returncode
            except subprocess.TimeoutExpired:
                return -1
        if t_is_mounted(m.mnt) and run(["umount", m.mnt]) != 0:
            if m.proc and m.proc.poll() is None:
                t_dump_stacks(m.pid)
                m.proc.kill()
            if t_is_mounted(m.mnt) and run(["umount", m.mnt]) != 0:
                print("cleanup: lazy unmount of %s" % m.mnt, flush=True)
                run(["umount", "-l", m.mnt])
        if m.proc:
            try:
                m.proc.wait(30)
            except subprocess.TimeoutExpired:
                print("cleanup: killing wbcfs pid %d" % m.pid, flush=True)
                t_dump_stacks(m.pid)
                m.proc.kill()
                m.proc.wait()
            # a daemon killed just as it mounted leaves a dead mount behind
            if t_is_mounted(m.mnt) and run(["umount", m.mnt]) != 0:
                run(["umount", "-l", m.mnt])
        _nbd_stop(m)


def _rbd_stop(m, killed=False):
    """WBCFS_DEVICE=rbd: m's daemon is gone: its image's changes go onto
    the device, for the oracles. A killed daemon still holds the image's
    lock: the next mount of the device breaks it."""
    r, m.rbd = m.rbd, None
    if r:
        r[0]._rbd_copy_back(r[1])
        if killed:
            r[0]._rbd_dead.add(r[1])


def _nbd_stop(m):
    """Stop the nbdkit serving m's device (WBCFS_DEVICE=nbd), once its
    daemon is gone: the device is then the oracles' alone."""
    p, m.nbdkit = m.nbdkit, None
    if not p:
        return
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _close_fds_under(mnt):
    """Close this process's descriptors that point into mnt (a failed test
    leaves them open, and they would keep the mount busy)."""
    mnt = os.path.realpath(mnt)
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target == mnt or target.startswith(mnt + "/"):
            try:
                os.close(int(fd))
            except OSError:
                pass


def _mounts_under(path):
    path = os.path.realpath(path)
    res = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = _unescape_mount(line.split()[1])
            if mp == path or mp.startswith(path + "/"):
                res.append(mp)
    return res


# --------------------------------------------------------------------------
# tree manifests

_ZERO_CHUNK = 1 << 20
_zero_digest = hashlib.sha256(bytes(_ZERO_CHUNK)).hexdigest()


def t_content_hash(path, size=None):
    """A hash of a regular file's contents that does not depend on how
    holes are stored: sha256 over the sha256 of each 1 MiB chunk (a chunk of
    zeros, read or hole, has one known digest).  Large files skip holes
    with SEEK_DATA/SEEK_HOLE."""
    outer = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if size is None:
            size = os.fstat(fd).st_size
        nchunks = (size + _ZERO_CHUNK - 1) // _ZERO_CHUNK
        data_regions = None
        if size > 64 * MIB:
            data_regions = _data_regions(fd, size)
        for i in range(nchunks):
            off = i * _ZERO_CHUNK
            n = min(_ZERO_CHUNK, size - off)
            if data_regions is not None and not _overlaps(data_regions, off, n):
                buf = None
            else:
                buf = os.pread(fd, n, off)
                while len(buf) < n:
                    more = os.pread(fd, n - len(buf), off + len(buf))
                    if not more:
                        raise TFail("%s: short read at %d (size %d)"
                                    % (path, off + len(buf), size))
                    buf += more
            if buf is None or (n == _ZERO_CHUNK and buf.count(0) == n):
                d = _zero_digest if n == _ZERO_CHUNK else \
                    hashlib.sha256(bytes(n)).hexdigest()
            else:
                d = hashlib.sha256(buf).hexdigest()
            outer.update(d.encode())
        # nothing after EOF
        if os.pread(fd, 1, size):
            raise TFail("%s: data readable past st_size %d" % (path, size))
    finally:
        os.close(fd)
    return outer.hexdigest()


def _data_regions(fd, size):
    regions = []
    off = 0
    while off < size:
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            return None
        h = os.lseek(fd, d, os.SEEK_HOLE)
        regions.append((d, h))
        off = h
    return regions


def _overlaps(regions, off, n):
    for a, b in regions:
        if a < off + n and b > off:
            return True
    return False


def _xattrs(path):
    out = []
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return ()
        raise
    for n in sorted(names):
        if n.startswith("user.") or n.startswith("security."):
            v = os.getxattr(path, n, follow_symlinks=False)
            out.append((n, v.hex()))
    return tuple(out)


MANIFEST_KEYS = ("type", "mode", "uid", "gid", "size", "nlink", "target",
                 "rdev", "xattrs", "sha256", "mtime_ns", "links")


def t_manifest(root, exclude=(), hash_files=True):
    """Walk root: {relative path: {type, mode, uid, gid, size, nlink,
    target, rdev, xattrs, sha256, mtime_ns, links}} where `links` lists the
    other names of a hard-linked inode (the grouping, independent of inode
    numbers).  `exclude` lists relative paths to leave out."""
    man = {}
    by_ino = {}
    root = os.path.abspath(root)

    def visit(rel, st, full):
        mode = st.st_mode
        e = {"mode": "%o" % stat.S_IMODE(mode), "uid": st.st_uid,
             "gid": st.st_gid, "nlink": st.st_nlink,
             "mtime_ns": st.st_mtime_ns}
        if stat.S_ISDIR(mode):
            e["type"] = "dir"
        elif stat.S_ISREG(mode):
            e["type"] = "file"
            e["size"] = st.st_size
            if hash_files:
                e["sha256"] = t_content_hash(full, st.st_size)
        elif stat.S_ISLNK(mode):
            e["type"] = "symlink"
            e["target"] = os.readlink(full)
            e["size"] = st.st_size
        elif stat.S_ISFIFO(mode):
            e["type"] = "fifo"
        elif stat.S_ISCHR(mode):
            e["type"] = "chr"
            e["rdev"] = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        elif stat.S_ISBLK(mode):
            e["type"] = "blk"
            e["rdev"] = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        elif stat.S_ISSOCK(mode):
            e["type"] = "sock"
        e["xattrs"] = _xattrs(full)
        man[rel] = e
        if not stat.S_ISDIR(mode) and st.st_nlink > 1:
            by_ino.setdefault(st.st_ino, []).append(rel)

    visit(".", os.lstat(root), root)
    stack = [("", root)]
    while stack:
        rel_dir, full_dir = stack.pop()
        with os.scandir(full_dir) as it:
            for de in it:
                rel = de.name if not rel_dir else rel_dir + "/" + de.name
                if rel in exclude:
                    continue
                full = os.path.join(full_dir, de.name)
                st = os.lstat(full)
                visit(rel, st, full)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((rel, full))
    for names in by_ino.values():
        names.sort()
        for n in names:
            man[n]["links"] = tuple(x for x in names if x != n)
    return man


def t_compare(a, b, name_a="a", name_b="b", keys=None, limit=40):
    """Fail with a readable diff when two manifests differ (on `keys`)."""
    keys = keys or MANIFEST_KEYS
    diffs = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            diffs.append("only in %s: %s %s" % (name_a, p, _brief(a[p])))
            continue
        if p not in a:
            diffs.append("only in %s: %s %s" % (name_b, p, _brief(b[p])))
            continue
        for k in keys:
            va, vb = a[p].get(k), b[p].get(k)
            if va != vb:
                diffs.append("%s: %s: %s=%r %s=%r" % (p, k, name_a, va,
                                                      name_b, vb))
    if diffs:
        msg = "%d difference(s) between %s and %s:\n  " % (len(diffs), name_a,
                                                          name_b)
        msg += "\n  ".join(diffs[:limit])
        if len(diffs) > limit:
            msg += "\n  ... %d more" % (len(diffs) - limit)
        raise TFail(msg)
    t_log("%s and %s agree on %d entries" % (name_a, name_b, len(a)))


def _brief(e):
    return "(%s size=%s)" % (e.get("type"), e.get("size"))


# --------------------------------------------------------------------------
# misc helpers

def t_statfs(path):
    s = os.statvfs(path)
    return {"bfree": s.f_bfree, "bavail": s.f_bavail, "files": s.f_files,
            "ffree": s.f_ffree, "bsize": s.f_frsize, "blocks": s.f_blocks}


def t_pattern(tag, n):
    """n bytes that depend on tag (bytes or str) alone: a model of a file's
    contents needs no copy of them."""
    if isinstance(tag, str):
        tag = tag.encode()
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%s/%d" % (tag, i)).digest()
        i += 1
    return bytes(out[:n])


def t_syncfs(path):
    """syncfs(2) of the filesystem holding path; OSError when it fails."""
    import ctypes
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "syncfs %s: %s" % (path, os.strerror(e)))
    finally:
        os.close(fd)


def t_write_all(fd, data, off=None):
    """Write all of data (pwrite at off when given); returns bytes written."""
    mv = memoryview(data)
    done = 0
    while done < len(mv):
        if off is None:
            n = os.write(fd, mv[done:])
        else:
            n = os.pwrite(fd, mv[done:], off + done)
        if n <= 0:
            raise TFail("write returned %d" % n)
        done += n
    return done


def t_read_all(fd, n, off):
    out = bytearray()
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


def t_as_user(uid, gid, fn, groups=(), umask=None):
    """Run fn() in a forked child with uid/gid, the supplementary groups
    and (when given) the umask; returns its result string: 'ok' (or what
    fn returned) or 'errno:NAME' or 'exc:...'."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if umask is not None:
                os.umask(umask)
            res = fn() or "ok"
        except OSError as e:
            res = "errno:" + errno.errorcode.get(e.errno, str(e.errno))
        except BaseException as e:  # noqa: B902
            res = "exc:%r" % e
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


def t_sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 * MIB)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def t_main(name, body, deadline_s=600):
    """Run body(env) with a T_Env; print PASS/FAIL/SKIP; exit 0/1/77.
    The environment is cleaned up whatever happens."""
    env = None

    def on_signal(signum, frame):
        raise SystemExit("killed by signal %d" % signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = T_EXIT_FAIL
    try:
        t_require_machine()
        if not t_is_kernel():
            t_wbcfs_bin()
        env = T_Env(name, deadline_s)
        atexit.register(env.cleanup)
        body(env)
        if env.watchdog_fired:
            raise TFail("watchdog fired (test overran %ds)" % deadline_s)
        rc = 0
    except TSkip as e:
        print("SKIP %s: %s" % (name, e), flush=True)
        rc = T_EXIT_SKIP
    except TFail as e:
        print("FAIL %s: %s" % (name, e), flush=True)
        _print_daemon_logs(env)
    except SystemExit as e:
        print("FAIL %s: %s" % (name, e), flush=True)
    except BaseException:
        traceback.print_exc()
        print("FAIL %s: unexpected exception (above)" % name, flush=True)
        _print_daemon_logs(env)
    finally:
        if env:
            try:
                env.cleanup()
            except BaseException:
                traceback.print_exc()
                rc = rc or T_EXIT_FAIL
    if rc == 0:
        print("PASS %s (%s, %.1fs)" % (name, t_target(), time.monotonic() - _t0),
              flush=True)
    sys.exit(rc)


def _print_daemon_logs(env):
    if not env:
        return
    for m in env.mounts:
        if m.proc:
            rc = m.proc.poll()
            state = "running" if rc is None else (
                "killed by signal %d" % -rc if rc < 0 else "exited %d" % rc)
            print("--- wbcfs log (pid %s, %s, %s) ---\n%s" % (
                m.pid, m.mnt, state, m.daemon_log()), flush=True)
