# SPDX-License-Identifier: GPL-2.0-or-later
"""Memory experiments shared by test_memory.py and bench/memory (Python 3
stdlib only): a memory cgroup (v1 memory controller, or v2 where the
unified hierarchy has it) that a daemon is started inside, a swap file
switched on for one test, a memory hog in the cgroup, and the daemon's
VmRSS/VmSwap.

Everything is registered in a wbtest.T_Env: the cgroup in env.cgroups
(its tasks moved out, then rmdir'ed), the swap file in env.undo
(swapoff, then removed), so cleanup undoes them even when the test fails
or is interrupted.
"""

import os
import signal
import subprocess
import sys
import time

from wbtest import MIB, TFail, TSkip, t_log, t_run

V1_ROOT = "/sys/fs/cgroup/memory"
V2_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
HOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyhog.py")


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def _v2_root():
    """The cgroup v2 mount whose root offers the memory controller, or None."""
    for r in V2_ROOTS:
        ctl = _read(os.path.join(r, "cgroup.controllers"))
        if ctl is not None and "memory" in ctl.split():
            return r
    return None


def cgroup_flavour():
    """'v1', 'v2' or None: how a memory cgroup can be made here."""
    if os.path.isfile(os.path.join(V1_ROOT, "memory.limit_in_bytes")):
        return "v1"
    if _v2_root():
        return "v2"
    return None


class MemCgroup:
    """A memory cgroup with a hard limit: `preexec()` starts a child inside
    (so that every page it faults is charged here from the first one:
    v1 does not move charges with a task), `oom_kills()` counts the OOM
    killer's victims in it, `usage()` what is charged.  remove() moves any
    task left back to the root and rmdir's it."""

    def __init__(self, name, limit):
        self.flavour = cgroup_flavour()
        if self.flavour is None:
            raise TSkip("no memory cgroup: neither %s nor a cgroup v2 "
                        "hierarchy with the memory controller" % V1_ROOT)
        self.root = V1_ROOT if self.flavour == "v1" else _v2_root()
        self.path = os.path.join(self.root, name)
        self.limit = limit
        if self.flavour == "v2":
            sub = os.path.join(self.root, "cgroup.subtree_control")
            if "memory" not in (_read(sub, "") or "").split():
                try:
                    self._put_at(sub, "+memory")
                except OSError as e:
                    raise TSkip("cgroup v2: cannot enable memory in %s: %s"
                                % (sub, e))
        os.mkdir(self.path)
        try:
            if self.flavour == "v1":
                self._put("memory.limit_in_bytes", str(limit))
                # the OOM killer on, as on a machine left alone
                self._put("memory.oom_control", "0")
            else:
                self._put("memory.max", str(limit))
                self._put("memory.swap.max", "max")
        except OSError:
            os.rmdir(self.path)
            raise
        t_log("memory cgroup %s (%s) limited to %d MiB"
              % (self.path, self.flavour, limit // MIB))

    @staticmethod
    def _put_at(path, text):
        with open(path, "w") as f:
            f.write(text)

    def _put(self, f, text):
        self._put_at(os.path.join(self.path, f), text)

    def _get(self, f):
        return _read(os.path.join(self.path, f), "")

    def preexec(self):
        """For subprocess.Popen(preexec_fn=...): the child joins before it
        execs."""
        procs = os.path.join(self.path, "cgroup.procs")

        def fn():
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
        return fn

    def pids(self):
        return [int(x) for x in self._get("cgroup.procs").split()]

    def usage(self):
        f = "memory.usage_in_bytes" if self.flavour == "v1" else \
            "memory.current"
        try:
            return int(self._get(f).strip() or 0)
        except ValueError:
            return 0

    def swap_bytes(self):
        """What of the cgroup is in swap now (v1 memory.stat swap, v2
        memory.swap.current); 0 without swap accounting."""
        if self.flavour == "v2":
            try:
                return int(self._get("memory.swap.current").strip() or 0)
            except ValueError:
                return 0
        for line in self._get("memory.stat").splitlines():
            k, _, v = line.partition(" ")
            if k == "swap":
                return int(v)
        return 0

    def oom_kills(self):
        """Tasks the OOM killer killed in this cgroup (v1 memory.oom_control
        oom_kill, v2 memory.events oom_kill)."""
        f = "memory.oom_control" if self.flavour == "v1" else "memory.events"
        for line in self._get(f).splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self):
        """Tasks back to the root, rmdir; quiet, for cleanup paths."""
        if not os.path.isdir(self.path):
            return
        for _ in range(100):
            for pid in self.pids():
                try:
                    self._put_at(os.path.join(self.root, "cgroup.procs"),
                                 str(pid))
                except OSError:
                    pass
            try:
                os.rmdir(self.path)
                t_log("memory cgroup %s removed" % self.path)
                return
            except OSError:
                time.sleep(0.1)
        print("cleanup: could not remove cgroup %s (tasks %s)"
              % (self.path, self.pids()), flush=True)


def mem_cgroup(env, limit, name=None):
    """A MemCgroup of `limit` bytes registered for cleanup in env."""
    name = name or "wbt-mem-%d-%d" % (os.getpid(), len(env.cgroups))
    cg = MemCgroup(name, limit)
    env.cgroups.append(cg)
    return cg


class SwapFile:
    """A swap file on the root filesystem, switched on; remove() switches
    it off and deletes it (registered in env.undo)."""

    def __init__(self, path, size):
        self.path = path
        self.on = False
        if not os.path.exists("/proc/swaps"):
            raise TSkip("no swap support (/proc/swaps)")
        for prog in ("mkswap", "swapon", "swapoff"):
            if not _which(prog):
                raise TSkip("%s not installed" % prog)
        # dd, not fallocate: swapon refuses files with unwritten extents on
        # some filesystems
        t_run(["dd", "if=/dev/zero", "of=" + path, "bs=1M",
               "count=%d" % (size // MIB), "status=none"], timeout=600)
        os.chmod(path, 0o600)
        t_run(["mkswap", path])
        p = t_run(["swapon", path], check=False)
        if p.returncode != 0:
            os.unlink(path)
            raise TSkip("swapon %s failed (%s)" % (path, p.stdout.strip()))
        self.on = True
        t_log("swap file %s on (%d MiB)" % (path, size // MIB))

    def remove(self):
        if self.on:
            p = subprocess.run(["swapoff", self.path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                print("cleanup: swapoff %s: %s" % (self.path, p.stdout),
                      flush=True)
            else:
                self.on = False
        if not self.on and os.path.exists(self.path):
            os.unlink(self.path)
            t_log("swap file %s off and removed" % self.path)


def _which(prog):
    for d in os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":") \
            + ["/sbin", "/usr/sbin"]:
        if os.access(os.path.join(d, prog), os.X_OK):
            return True
    return False


def swap_file(env, size, where="/"):
    """A SwapFile of `size` bytes under `where` (default the root
    filesystem), removed by env's cleanup."""
    path = os.path.join(where, "wbt-swap-%d" % os.getpid())
    sw = SwapFile(path, size)
    env.undo.append(sw.remove)
    return sw


def mem_available():
    """/proc/meminfo MemAvailable in bytes (0 when unreadable)."""
    for line in (_read("/proc/meminfo", "") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def proc_status(pid):
    """{key: kB} of /proc/PID/status's Vm* lines ({} once it is gone)."""
    out = {}
    text = _read("/proc/%d/status" % pid, "")
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.startswith("Vm") or k.startswith("Rss"):
            parts = v.split()
            if parts and parts[0].isdigit():
                out[k] = int(parts[0]) * 1024
    return out


def alive(pid):
    """A process that is neither gone nor a zombie."""
    st = _read("/proc/%d/stat" % pid)
    if st is None:
        return False
    return st.rsplit(")", 1)[1].split()[0] != "Z"


class Hog:
    """pyhog.py in the cgroup: allocates `nbytes`, touches every page,
    holds them `hold` seconds and exits 0; wait() gives (exit code,
    seconds it took to get its memory or None)."""

    def __init__(self, cg, nbytes, hold=2.0, log=None):
        self.nbytes = nbytes
        self.logpath = log
        out = open(log, "w") if log else subprocess.DEVNULL
        cmd = [sys.executable, HOG, str(nbytes), "%.1f" % hold]
        t_log("$ %s &  (in %s)" % (" ".join(cmd), cg.path))
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=out, stdin=subprocess.DEVNULL,
                                     text=True, preexec_fn=cg.preexec())
        if log:
            out.close()
        self.pid = self.proc.pid

    def got(self, timeout=600):
        """For a hog that holds its memory long: wait for its `got` line;
        returns the seconds it took, or None when it died first."""
        import select
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    return None         # exited (or killed) without it
                if line.startswith("got "):
                    return float(line.split()[-1])
        raise TFail("the hog did not get %d MiB within %ds"
                    % (self.nbytes // MIB, timeout))

    def wait(self, timeout=600):
        try:
            so, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise TFail("the hog did not get %d MiB within %ds"
                        % (self.nbytes // MIB, timeout))
        got = None
        for line in so.splitlines():
            if line.startswith("got "):
                got = float(line.split()[-1])
        rc = self.proc.returncode
        t_log("hog pid %d: %s, got its %d MiB in %s s" % (
            self.pid, "exit %d" % rc if rc >= 0 else
            "killed by %s" % signal.Signals(-rc).name, self.nbytes // MIB,
            "%.2f" % got if got is not None else "-"))
        return rc, got

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def vmstat_or_empty(mnt):
    try:
        with open(os.path.join(mnt, ".wbcfs", "vmstat")) as f:
            return dict((k, int(v)) for k, v in
                        (ln.split() for ln in f if len(ln.split()) == 2))
    except (OSError, ValueError):
        return {}
