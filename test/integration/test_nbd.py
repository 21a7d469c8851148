#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""wbcfs on a network block device: ext4 images served by nbdkit over a
unix socket, mounted by URI (io_engine=nbd through libnbd).

  a. file plugin (export "disk", other names refused by the exportname
     filter; 4 KiB to 1 MiB blocks enforced by the blocksize-policy
     filter): a short POSIX workload against a model (create, write,
     overwrite, rename, rename over, unlink, mkdir, rmdir, symlink, hard
     link, truncate, fsync); /.wbcfs/nbd names the export and its
     capabilities; g. fstrim discards the free blocks over NBD TRIM (the
     image file gives them back). Unmount, e2fsck -fn of the image clean,
     the kernel's ext4 (loop) sees the tree the mount showed.
  b. memory plugin, filled with `nbdcopy IMG URI`, not cleanly unmounted:
     refused, then mounted by mount.fuse3 (mount -t fuse.wbcfs) with -o fsck
     (e2fsck -p through nbdfuse) and the empty export name; written,
     unmounted, copied out with nbdcopy: e2fsck -fn clean, the same tree.
  c. refusals, one line on stderr, exit non-zero, the image unchanged: no
     server on the socket, a wrong export name, an export smaller than
     the filesystem, an export with 64 KiB blocks, a read-only export
     without -o ro (which then mounts), io_engine=uring with a URI,
     io_engine=nbd with a loop device.
  d. server faults (nbdkit's error filter, armed while a trigger file
     exists): a read of an uncached file gives EIO, then its data once
     disarmed; writes: fsync gives EIO again and again, the pages are
     kept (read back as written), close of a second writable fd gives
     EIO; disarmed, fsync succeeds; unmount exit 0, e2fsck clean, the
     kernel sees the data. Then a write fault left armed through
     unmount: the daemon names the pages lost and exits non-zero; the
     next mount replays the journal (through the export), the lost range
     reads as zeros, e2fsck is clean after (the README's promises for
     device errors, over NBD).
  e. the server goes away (SIGKILL, 10 MB/s so that an fsync's writes are
     in flight) under a mount with nbd_retry=1: that fsync and the next
     give EIO, /.wbcfs/nbd says disconnected, cached pages still read, an
     uncached file gives EIO; the export back smaller is not taken back;
     nbdkit restarted on the same socket and file: fsync succeeds within
     seconds, reconnects counted, unmount exit 0, e2fsck clean, the data
     right. Then nbd_retry=0: a server killed and restarted is not
     reconnected to, and unmount ends at once, exit non-zero, the
     unwritten pages named lost.
  f. a slow export (rate filter, 10 MB/s) with a small cache: the writer
     is throttled, judged on the controller's trace and counters
     (/.wbcfs/trace, /.wbcfs/vmstat, /.wbcfs/bdi), never on rates.
  h. a server that stops answering (nbdkit's pause filter) under
     nbd_timeout=2: fsync gives EIO within seconds, the connection is
     left; the page written again meanwhile; resumed: reconnected, fsync
     succeeds, the last write is what the kernel's ext4 reads.
  i. the daemon killed (SIGKILL) twice: each next mount replays the
     journal through the export (4 KiB blocks enforced), and the files
     fsync'ed before the kill are intact; a read-only export that needs
     recovery is refused, -o ro on a writable one replays it; e2fsck
     clean, the kernel's ext4 agrees.

Skips (77) without nbdkit, nbdcopy or nbdfuse (packages nbdkit and
libnbd-bin). Every nbdkit started is killed at the end, after the mounts
it serves are gone; they also die with the test (--exit-with-parent).

    WBCFS_BIN=build/wbcfs test/integration/test_nbd.py
    WBCFS_NBD_ONLY=a,c WBCFS_BIN=build/wbcfs test/integration/test_nbd.py
"""

import errno
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (t_pattern, MIB, Mount, TFail, TSkip, t_check, t_compare,  # noqa: E402
                    t_eq, t_errno, t_is_kernel, t_log, t_main, t_manifest,
                    t_mount_entry, t_read_all, t_run, t_sha256_file, t_step,
                    t_wbcfs_bin, t_wbcfs_pids, t_write_all)
import wbtrace  # noqa: E402

IMG_SIZE = 64 * MIB
# nbdkit's blocksize-policy filter: what a server may demand
BLOCKSIZES = ["blocksize-minimum=4096", "blocksize-preferred=64K",
              "blocksize-maximum=1M", "blocksize-error-policy=error"]
RATE_BPS = 10 * 1000 * 1000     # a slow export: nbdkit's rate filter
CACHE = "cache_size=64M"          # a quick mount: little to fault in
CTL_NBD = os.path.join(".wbcfs", "nbd")


# --------------------------------------------------------------------------
# nbdkit servers

class NbdServer:
    """One nbdkit on a unix socket in the test's temp dir, in the
    foreground (-f) as our child, dying with us (--exit-with-parent).
    args are nbdkit's, from the filters and plugin on."""

    live = []               # every server started and not yet stopped

    def __init__(self, env, name, args, export="", readonly=False):
        self.name = name
        self.args = list(args)
        self.export = export
        self.readonly = readonly
        self.sock = os.path.join(env.tmp, name + ".sock")
        self.log = os.path.join(env.tmp, name + "-nbdkit.log")
        self.proc = None

    def uri(self, export=None):
        return "nbd+unix:///%s?socket=%s" % (
            self.export if export is None else export, self.sock)

    def start(self, timeout=15):
        # nbdkit leaves its socket behind when killed, and will not bind
        # over it
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        cmd = ["nbdkit", "--exit-with-parent", "-f", "-U", self.sock]
        if self.readonly:
            cmd.append("-r")
        cmd += self.args
        t_log("$ " + " ".join(cmd) + " &")
        with open(self.log, "a") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        NbdServer.live.append(self)
        end = time.monotonic() + timeout
        while not self._greets():
            if self.proc.poll() is not None:
                raise TFail("nbdkit %s exited %d:\n%s"
                            % (self.name, self.proc.returncode, self.log_text()))
            if time.monotonic() > end:
                raise TFail("nbdkit %s: no greeting on %s within %ds"
                            % (self.name, self.sock, timeout))
            time.sleep(0.05)
        t_log("nbdkit %s serving on %s (pid %d)" % (self.name, self.sock,
                                                   self.proc.pid))
        return self

    def _greets(self):
        """The server answers with NBD's greeting (newstyle: NBDMAGIC)."""
        if not os.path.exists(self.sock):
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(self.sock)
            return s.recv(8) == b"NBDMAGIC"
        except OSError:
            return False
        finally:
            s.close()

    def kill(self, sig=signal.SIGKILL):
        """The server dies at once (SIGKILL: no goodbye to its clients)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
            t_log("nbdkit %s (pid %d) killed by signal %d"
                  % (self.name, self.proc.pid, sig))
        if self in NbdServer.live:
            NbdServer.live.remove(self)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self in NbdServer.live:
            NbdServer.live.remove(self)

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    @classmethod
    def stop_all(cls):
        for s in list(cls.live):
            s.stop()


def file_server(env, name, img, filters=(), params=(), **kw):
    """nbdkit [--filter=F...] file file=IMG PARAMS..."""
    args = ["--filter=" + f for f in filters] + ["file", "file=" + img]
    return NbdServer(env, name, args + list(params), **kw).start()


# --------------------------------------------------------------------------
# helpers

def new_image(env, name, src=None):
    """A 64 MiB ext4 image file (mkfs.ext4 on the file), filled from
    directory src when given (mkfs.ext4 -d): files no mount has cached."""
    img = env.image(IMG_SIZE, name)
    env.mkfs(img, ["-d", src] if src else None)
    return img


def nbd_ctl(mnt):
    """/.wbcfs/nbd as {key: int or str}."""
    out = {}
    with open(os.path.join(mnt, CTL_NBD)) as f:
        for line in f:
            k, _, v = line.strip().partition(" ")
            v = v.strip()
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
    return out


NBD_KEYS = ("name", "uri", "state", "size", "block_min", "block_preferred",
            "block_max", "can_flush", "can_fua", "can_trim",
            "can_multi_conn", "reconnects", "failed", "requests")


def check_nbd_ctl(m, srv, export):
    t_step("/.wbcfs/nbd describes the export")
    c = nbd_ctl(m.mnt)
    t_log("nbd: %s" % " ".join("%s=%s" % kv for kv in c.items()))
    missing = [k for k in NBD_KEYS if k not in c]
    t_check(not missing, "/.wbcfs/nbd lacks %s: %r" % (missing, c))
    t_check(srv.sock in str(c["uri"]) and ("/" + export) in str(c["uri"]),
            "uri %r names socket %s and export %r" % (c["uri"], srv.sock, export))
    t_eq(c["state"], "connected", "nbd state")
    t_check(str(c["name"]).startswith("nbd"), "name %r is nbdN" % c["name"])
    t_eq(c["size"], IMG_SIZE, "nbd size")
    t_eq(c["can_flush"], 1, "can_flush of nbdkit's file plugin")
    t_eq(c["can_trim"], 1, "can_trim of nbdkit's file plugin")
    t_eq(c["failed"], 0, "failed requests")
    t_check(c["requests"] > 0, "requests completed: %r" % c["requests"])
    # 0: the server stated no constraint (nbdkit's file plugin states none)
    bs = (c["block_min"], c["block_preferred"], c["block_max"])
    t_check(bs == (0, 0, 0) or 0 < bs[0] <= bs[1] <= bs[2],
            "block sizes min %r <= preferred %r <= max %r, or all 0" % bs)
    return c


def write_file(path, content, fsync=True):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        t_write_all(fd, content)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_model(mnt, model, what):
    """Every file of the model reads back its content."""
    for rel, content in sorted(model.items()):
        got = read_file(os.path.join(mnt, rel))
        t_check(got == content, "%s: %s reads %d bytes, %s (want %d)"
                % (what, rel, len(got),
                   "same length, other bytes" if len(got) == len(content)
                   else "wrong length", len(content)))


def kernel_sees(env, img, manifest=None, model=None):
    """e2fsck -fn of the image clean; the kernel's ext4 on a loop device of
    it shows the manifest (and the model's contents)."""
    env.fsck(img)
    dev = env.loop(img)
    t_step("kernel ext4 (ro, loop) sees what the NBD mount showed")
    k = env.kernel_ro(dev)
    try:
        if manifest is not None:
            t_compare(manifest, t_manifest(k.mnt), "nbd-mount", "kernel-ext4")
        if model is not None:
            check_model(k.mnt, model, "kernel ext4")
    finally:
        env.umount(k)
        env.detach(dev)


def umount_rc(env, m, timeout=120):
    """umount(8); returns the daemon's exit status and log (env.umount
    fails on a non-zero status; some cases expect one)."""
    p = subprocess.run(["umount", m.mnt], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if p.returncode != 0:
        raise TFail("umount %s: %s\n%s" % (m.mnt, p.stdout, m.daemon_log()))
    m.mounted = False
    try:
        rc = m.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        m.proc.kill()
        m.proc.wait()
        raise TFail("wbcfs still running %ds after umount:\n%s"
                    % (timeout, m.daemon_log()))
    env.mounts.remove(m)
    return rc, m.daemon_log()


def poll(fn, timeout, what, interval=0.1):
    """Call fn() until it returns true (returns that); fail after timeout."""
    end = time.monotonic() + timeout
    while True:
        r = fn()
        if r:
            return r
        if time.monotonic() > end:
            raise TFail("%s: not within %ss" % (what, timeout))
        time.sleep(interval)


def fsync_until_ok(fd, timeout, what, each=None):
    """fsync until it succeeds: returns (EIOs before, seconds taken).
    Each fd hears of a writeback failure once, so an error that happened
    between two calls may still be reported once after the device is back.
    each(), if given, runs before every try."""
    t0 = time.monotonic()
    eios = 0
    while True:
        if each:
            each()
        try:
            os.fsync(fd)
            return eios, time.monotonic() - t0
        except OSError as e:
            if e.errno != errno.EIO:
                raise TFail("%s: fsync gave %s, not EIO"
                            % (what, errno.errorcode.get(e.errno, e.errno)))
            eios += 1
        if time.monotonic() - t0 > timeout:
            raise TFail("%s: fsync still EIO after %ds (%d tries)"
                        % (what, timeout, eios))
        time.sleep(0.2)


def mount_fuse3(env, uri, opts):
    """mount.fuse3 URI MNT -t fuse.wbcfs -o OPTS, as mount(8) runs it for
    `mount -t fuse.wbcfs` (wbcfs found on PATH; it daemonizes)."""
    bindir = env.mkdir("bin")
    link = os.path.join(bindir, "wbcfs")
    if not os.path.exists(link):
        os.symlink(t_wbcfs_bin(), link)
    path_env = dict(os.environ)
    path_env["PATH"] = bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    mnt = env.mkdir("mnt-fuse3")
    t_run(["mount.fuse3", uri, mnt, "-t", "fuse.wbcfs", "-o", ",".join(opts)],
          env=path_env, timeout=60)
    ent = t_mount_entry(mnt)
    t_check(ent is not None and ent[0] == uri and ent[1] == "fuse.wbcfs",
            "mount.fuse3: %s mounted as %r" % (mnt, ent))
    m = Mount(mnt, uri, "external")
    env.mounts.append(m)
    m.ext_pids = t_wbcfs_pids(mnt)
    t_check(len(m.ext_pids) == 1, "one wbcfs daemon serves %s: %r"
            % (mnt, m.ext_pids))
    t_log("mount.fuse3: %s on %s, daemon pid %d" % (uri, mnt, m.ext_pids[0]))
    return m


def umount_fuse3(env, m, timeout=60):
    """umount, then wait for the daemon to exit (a plain fuse mount's
    umount returns before the daemon has written everything)."""
    t_run(["umount", m.mnt])
    env.mounts.remove(m)
    pid = m.ext_pids[0]
    end = time.monotonic() + timeout
    while os.path.exists("/proc/%d" % pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(") ")[1].startswith("Z"):
                    break
        except OSError:
            break
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            raise TFail("wbcfs pid %d still running %ds after umount" % (pid, timeout))
        time.sleep(0.05)


def log_has_no_complaint(m):
    log = m.daemon_log()
    for bad in ("libext2fs", "Segmentation", "assert"):
        t_check(bad not in log, "daemon log mentions %r:\n%s" % (bad, log))


# --------------------------------------------------------------------------
# a. file plugin: POSIX workload, the kernel's view; g. FITRIM

def posix_workload(mnt):
    """Namespace and data operations; returns the model {path: bytes}."""
    t_step("POSIX workload over NBD against a model")
    model = {}

    def put(rel, content, fsync=True):
        write_file(os.path.join(mnt, rel), content, fsync)
        model[rel] = content

    os.makedirs(os.path.join(mnt, "d1", "d2"))
    os.mkdir(os.path.join(mnt, "gone"))
    put("big", t_pattern("big", 3 * MIB + 123))
    put("mid", t_pattern("mid", 300 * 1024), fsync=False)
    for i in range(24):
        put("d1/s%02d" % i, t_pattern("s%d" % i, 100 + i * 997), fsync=i % 4 == 0)
    # overwrite in the middle, extend past EOF
    fd = os.open(os.path.join(mnt, "big"), os.O_RDWR)
    over = t_pattern("over", 70000)
    t_write_all(fd, over, 12345)
    tail = t_pattern("tail", 5000)
    t_write_all(fd, tail, len(model["big"]) + 8192)
    os.fsync(fd)
    os.close(fd)
    b = bytearray(model["big"])
    b[12345:12345 + len(over)] = over
    b += bytes(8192) + tail
    model["big"] = bytes(b)
    # rename, rename over, unlink, rmdir
    os.rename(os.path.join(mnt, "mid"), os.path.join(mnt, "d1/d2/mid"))
    model["d1/d2/mid"] = model.pop("mid")
    put("new", t_pattern("new", 40000), fsync=False)
    os.rename(os.path.join(mnt, "new"), os.path.join(mnt, "d1/s00"))
    model["d1/s00"] = model.pop("new")
    for i in range(1, 6):
        os.unlink(os.path.join(mnt, "d1/s%02d" % i))
        del model["d1/s%02d" % i]
    os.rmdir(os.path.join(mnt, "gone"))
    # symlinks (inline and in a block), a hard link
    os.symlink("d1/d2/mid", os.path.join(mnt, "ln"))
    os.symlink("x" * 200, os.path.join(mnt, "d1/longlink"))
    os.link(os.path.join(mnt, "d1/s06"), os.path.join(mnt, "d1/d2/hard"))
    model["d1/d2/hard"] = model["d1/s06"]
    # truncate down into a block, up into a hole
    os.truncate(os.path.join(mnt, "big"), 1000001)
    model["big"] = model["big"][:1000001]
    os.truncate(os.path.join(mnt, "d1/d2/mid"), 2 * MIB + 7)
    model["d1/d2/mid"] += bytes(2 * MIB + 7 - len(model["d1/d2/mid"]))
    fsync_path(os.path.join(mnt, "big"))
    fsync_path(os.path.join(mnt, "d1/d2/mid"))
    fsync_path(os.path.join(mnt, "d1"))
    fsync_path(mnt)
    check_model(mnt, model, "through the mount")
    t_eq(os.readlink(os.path.join(mnt, "ln")), "d1/d2/mid", "symlink")
    t_eq(read_file(os.path.join(mnt, "ln")), model["d1/d2/mid"],
         "read through the symlink")
    return model


def fitrim(env, m, img):
    t_step("fstrim over NBD: trimmed bytes reported, the image gives back "
           "a deleted file's blocks")
    junk = os.path.join(m.mnt, "junk")
    write_file(junk, t_pattern("junk", 12 * MIB))
    os.unlink(junk)
    fsync_path(m.mnt)                 # the commit that frees the blocks
    before = os.stat(img).st_blocks * 512
    p = t_run(["fstrim", "-v", m.mnt], timeout=60)
    g = re.search(r"\((\d+) bytes\) trimmed", p.stdout)
    t_check(g is not None, "fstrim -v output: %r" % p.stdout)
    trimmed = int(g.group(1))
    after = os.stat(img).st_blocks * 512
    t_log("fstrim trimmed %d bytes; image %d -> %d bytes allocated"
          % (trimmed, before, after))
    t_check(trimmed >= 12 * MIB, "fstrim trimmed %d bytes, want >= 12 MiB"
            % trimmed)
    t_check(after <= before - 12 * MIB,
            "the image file gave back the deleted file's blocks (%d -> %d)"
            % (before, after))


def case_a(env):
    t_step("a. file plugin: mount by URI, workload, e2fsck, kernel's view")
    img = new_image(env, "a.img")
    # block size constraints enforced (EINVAL otherwise): 4 KiB aligned,
    # transfers over 1 MiB split
    srv = file_server(env, "a", img, filters=["exportname", "blocksize-policy"],
                      params=["exportname=disk", "exportname-strict=true"]
                      + BLOCKSIZES, export="disk")
    m = env.mount(srv.uri(), [CACHE])
    c = check_nbd_ctl(m, srv, "disk")
    t_eq((c["block_min"], c["block_preferred"], c["block_max"], c["max_request"]),
         (4096, 65536, MIB, MIB), "block sizes and max_request")
    t_check("nbd" in os.listdir(os.path.join(m.mnt, ".wbcfs")),
            "nbd listed in /.wbcfs")
    model = posix_workload(m.mnt)
    fitrim(env, m, img)
    check_model(m.mnt, model, "after fstrim")
    man = t_manifest(m.mnt)
    c = nbd_ctl(m.mnt)
    t_eq(c["failed"], 0, "failed NBD requests after the workload")
    log_has_no_complaint(m)
    env.umount(m)
    srv.stop()
    kernel_sees(env, img, man, model)
    return img


# --------------------------------------------------------------------------
# b. memory plugin, nbdcopy in and out, -o fsck

def case_b(env):
    t_step("b. memory plugin: nbdcopy in, -o fsck, write, nbdcopy out")
    img = new_image(env, "b.img")
    # not cleanly unmounted: refused, then checked through nbdfuse
    t_run(["debugfs", "-w", "-R", "ssv state 0", img])
    srv = NbdServer(env, "b", ["memory", "size=%d" % IMG_SIZE]).start()
    t_run(["nbdcopy", img, srv.uri()], timeout=60)
    refused(env, srv.uri(), [CACHE], None, "e2fsck",
            "a filesystem not cleanly unmounted, without -o fsck")
    t_step("mount -t fuse.wbcfs (mount.fuse3) -o fsck,_netdev: e2fsck -p "
           "through nbdfuse, then the mount")
    m = mount_fuse3(env, srv.uri(), ["allow_other", CACHE, "fsck", "_netdev"])
    model = {}
    for i in range(6):
        rel = "f%d" % i
        write_file(os.path.join(m.mnt, rel), t_pattern(rel, 200000 * i + 17))
        model[rel] = t_pattern(rel, 200000 * i + 17)
    os.mkdir(os.path.join(m.mnt, "dir"))
    os.rename(os.path.join(m.mnt, "f5"), os.path.join(m.mnt, "dir/f5"))
    model["dir/f5"] = model.pop("f5")
    fsync_path(m.mnt)
    check_model(m.mnt, model, "memory export")
    man = t_manifest(m.mnt)
    umount_fuse3(env, m)
    out = os.path.join(env.tmp, "b-out.img")
    t_run(["nbdcopy", srv.uri(), out], timeout=60)
    srv.stop()
    t_eq(env.sb_state(out), "clean", "superblock state after -o fsck and unmount")
    kernel_sees(env, out, man, model)


# --------------------------------------------------------------------------
# c. refusals

def refused(env, uri, opts, img, want, what):
    """wbcfs URI MNT -f -o OPTS fails: exit non-zero, nothing on stdout,
    one line on stderr saying `want` (any of a tuple, case-insensitive),
    the image's bytes unchanged."""
    before = t_sha256_file(img) if img else None
    mnt = env.mkdir("mnt-refuse")
    cmd = [t_wbcfs_bin(), uri, mnt, "-f"]
    if opts:
        cmd += ["-o", ",".join(opts)]
    t_log("$ " + " ".join(cmd))
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        raise TFail("%s: wbcfs did not refuse within 60 s" % what)
    dt = time.monotonic() - t0
    if p.returncode == 0 or os.path.ismount(mnt):
        subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL)
        raise TFail("%s: wbcfs accepted it (exit %d): %s%s"
                    % (what, p.returncode, p.stdout, p.stderr))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    t_check(len(lines) == 1 and not p.stdout.strip(),
            "%s: want one line on stderr and nothing on stdout, got:\n"
            "stderr: %s\nstdout: %s" % (what, p.stderr, p.stdout))
    line = lines[0]
    t_check(line.startswith("wbcfs: "), "%s: error does not start 'wbcfs: ': %r"
            % (what, line))
    wants = want if isinstance(want, tuple) else (want,)
    t_check(any(w.lower() in line.lower() for w in wants),
            "%s: error %r says none of %r" % (what, line, wants))
    if img:
        t_check(t_sha256_file(img) == before, "%s: the image was modified" % what)
    t_log("%-32s exit %d in %.2fs: %s" % (what, p.returncode, dt, line))
    return line


def case_c(env, img):
    t_step("c. refusals: one line, exit non-zero, image unchanged")
    nosock = os.path.join(env.tmp, "nobody.sock")
    refused(env, "nbd+unix:///disk?socket=" + nosock, [CACHE], img,
            "cannot connect to the NBD server", "no server on the socket")
    # a socket file nobody listens on: connect(2) says ECONNREFUSED
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(nosock)
    try:
        refused(env, "nbd+unix:///disk?socket=" + nosock, [CACHE], img,
                "cannot connect to the NBD server", "a socket nobody listens on")
    finally:
        dead.close()

    srv = file_server(env, "c-name", img, filters=["exportname"],
                      params=["exportname=disk", "exportname-strict=true"],
                      export="disk")
    refused(env, srv.uri("wrong"), [CACHE], img, "wrong", "a wrong export name")
    srv.stop()

    srv = file_server(env, "c-small", img, filters=["truncate"],
                      params=["truncate=%d" % (IMG_SIZE // 2)])
    refused(env, srv.uri(), [CACHE], img, "export (33554432 bytes) is smaller than "
            "the filesystem", "an export smaller than the filesystem")
    refused(env, srv.uri(), [CACHE, "ro"], img, "smaller than the filesystem",
            "the smaller export, -o ro")
    srv.stop()

    srv = file_server(env, "c-bs", img, filters=["blocksize-policy"],
                      params=["blocksize-minimum=64K", "blocksize-preferred=64K",
                              "blocksize-maximum=1M", "blocksize-error-policy=error"])
    refused(env, srv.uri(), [CACHE], img, "minimum block size",
            "an export with 64 KiB blocks")
    srv.stop()

    srv = file_server(env, "c-ro", img, readonly=True)
    refused(env, srv.uri(), [CACHE], img, "read-only",
            "a read-only export without -o ro")
    refused(env, srv.uri(), [CACHE, "io_engine=uring"], img, "io_engine",
            "io_engine=uring with a URI")
    t_step("the read-only export mounts with -o ro and reads")
    before = t_sha256_file(img)
    m = env.mount(srv.uri(), [CACHE, "ro"])
    t_eq(nbd_ctl(m.mnt)["state"], "connected", "state of the ro mount")
    got = read_file(os.path.join(m.mnt, "d1/d2/mid"))
    t_eq(len(got), 2 * MIB + 7, "size of d1/d2/mid through the ro mount")
    t_errno((errno.EROFS,), write_file, os.path.join(m.mnt, "x"), b"x",
            what="create on the ro NBD mount")
    env.umount(m)
    srv.stop()
    t_check(t_sha256_file(img) == before, "the -o ro mount changed the image")

    dev = env.loop(img)
    refused(env, dev, [CACHE, "io_engine=nbd"], img, "io_engine",
            "io_engine=nbd with a loop device")
    env.detach(dev)


# --------------------------------------------------------------------------
# d. server faults: nbdkit's error filter

def case_d(env):
    t_step("d. server faults (error filter): EIO, pages kept, recovery")
    src = env.mkdir("d-src")
    cold = t_pattern("cold", 700 * 1024)
    with open(os.path.join(src, "cold"), "wb") as f:
        f.write(cold)
    img = new_image(env, "d.img", src)
    trig_r = os.path.join(env.tmp, "d-read-errors")
    trig_w = os.path.join(env.tmp, "d-write-errors")
    srv = file_server(env, "d", img, filters=["error"],
                      params=["error-pread-rate=100%", "error-pread-file=" + trig_r,
                              "error-pwrite-rate=100%", "error-pwrite-file=" + trig_w])
    m = env.mount(srv.uri(), [CACHE])
    mnt = m.mnt
    a = os.path.join(mnt, "a")
    safe = t_pattern("a-safe", MIB)
    write_file(a, safe)

    t_step("read errors: an uncached file gives EIO, reads once disarmed")
    open(trig_r, "w").close()
    fd = os.open(os.path.join(mnt, "cold"), os.O_RDONLY)
    t_errno(errno.EIO, os.pread, fd, 4096, 0, what="read of an uncached file")
    t_check(read_file(a) == safe, "a cached file still reads")
    os.unlink(trig_r)
    t_check(t_read_all(fd, len(cold) + 1, 0) == cold, "cold after the fault")
    os.close(fd)

    t_step("write errors: fsync EIO twice, pages kept, fsync of fd2 EIO")
    fd1 = os.open(a, os.O_RDWR)
    fd2 = os.open(a, os.O_WRONLY)
    open(trig_w, "w").close()
    over = t_pattern("a-over", 256 * 1024)
    tail = t_pattern("a-tail", 512 * 1024 + 100)
    t_write_all(fd1, over, 64 * 1024)
    t_write_all(fd1, tail, len(safe))
    want = bytearray(safe)
    want[64 * 1024:64 * 1024 + len(over)] = over
    want += tail
    want = bytes(want)
    t_errno(errno.EIO, os.fsync, fd1, what="fsync while the server fails writes")
    t_errno(errno.EIO, os.fsync, fd1, what="second fsync (pages kept dirty)")
    t_check(t_read_all(fd1, len(want) + 1, 0) == want,
            "a reads what was written (pages kept)")
    c = nbd_ctl(mnt)
    t_check(c["failed"] > 0, "/.wbcfs/nbd counts failed requests: %r" % c["failed"])
    t_eq(c["state"], "connected", "an EIO from the server is no disconnect")
    v = wbtrace.vmstat(mnt)
    t_check(v.get("nr_write_errors", 0) > 0,
            "vmstat nr_write_errors %r" % v.get("nr_write_errors"))
    # a second writer open since before: its fsync reports the failure
    # (its close would not, as with the kernel's ext4)
    t_errno(errno.EIO, os.fsync, fd2, what="fsync of a second writer open since before")
    os.close(fd2)

    t_step("disarmed: fsync succeeds, a reads back, and keeps doing so")
    os.unlink(trig_w)
    eios, dt = fsync_until_ok(fd1, 15, "after the write fault")
    t_log("fsync ok after %d more EIO(s), %.2fs" % (eios, dt))
    t_check(eios <= 1, "fsync after the fault cleared gave EIO %d times" % eios)
    os.fsync(fd1)
    t_check(t_read_all(fd1, len(want) + 1, 0) == want, "a after recovery")
    os.close(fd1)
    model = {"a": want, "cold": cold}
    check_model(mnt, model, "after recovery")
    man = t_manifest(mnt)
    env.umount(m)
    kernel_sees(env, img, man, model)

    t_step("write fault left armed through unmount: pages named lost, exit != 0")
    m = env.mount(srv.uri(), [CACHE])
    lost = os.path.join(m.mnt, "lost")
    write_file(lost, b"")
    open(trig_w, "w").close()
    fd = os.open(lost, os.O_WRONLY)
    t_write_all(fd, t_pattern("lost", 96 * 1024))
    t_errno(errno.EIO, os.fsync, fd, what="fsync of the doomed file")
    os.close(fd)
    t0 = time.monotonic()
    rc, log = umount_rc(env, m)
    os.unlink(trig_w)
    t_log("daemon exited %d after %.1fs; log:\n%s"
          % (rc, time.monotonic() - t0, log.strip()))
    t_check(rc != 0, "daemon exit status is non-zero after losing data")
    t_check("lost" in log, "the loss is named in the daemon's log")

    t_step("the next mount replays the journal: the lost range never shows "
           "stale blocks, e2fsck clean after")
    m = env.mount(srv.uri(), [CACHE])
    t_check("journal recovered" in m.daemon_log(),
            "the mount replayed the journal:\n%s" % m.daemon_log())
    got = read_file(lost) if os.path.exists(lost) else b""
    t_log("after the replay: lost has %d bytes, %d of them zero"
          % (len(got), got.count(0)))
    t_check(got.count(0) == len(got), "the lost range reads as zeros")
    t_check(read_file(os.path.join(m.mnt, "a")) == want, "a is intact")
    env.umount(m)
    srv.stop()
    env.fsck(img)


# --------------------------------------------------------------------------
# e. the server goes away and comes back

def case_e(env):
    t_step("e. server killed under the mount (nbd_retry=1), then restarted")
    src = env.mkdir("e-src")
    cold = t_pattern("e-cold", 300 * 1024)
    with open(os.path.join(src, "cold"), "wb") as f:
        f.write(cold)
    img = new_image(env, "e.img", src)
    # 10 MB/s: the kill finds writes in flight
    srv = file_server(env, "e", img, filters=["rate"],
                      params=["rate=%d" % (RATE_BPS * 8), "burstiness=0.2"])
    m = env.mount(srv.uri(), [CACHE, "nbd_retry=1"])
    mnt = m.mnt
    pre = t_pattern("pre", 256 * 1024)
    write_file(os.path.join(mnt, "pre"), pre)
    t_check(read_file(os.path.join(mnt, "pre")) == pre, "pre reads back")
    late = t_pattern("late", 8 * MIB + 5)
    fd = os.open(os.path.join(mnt, "late"), os.O_CREAT | os.O_RDWR, 0o644)
    t_write_all(fd, late)

    t_step("killed while an fsync's writes are in flight")
    res = {}

    def bg_fsync():
        try:
            os.fsync(fd)
            res["rc"] = 0
        except OSError as e:
            res["rc"] = e.errno
    th = threading.Thread(target=bg_fsync)
    th.start()
    poll(lambda: wbtrace.vmstat(mnt).get("nr_writeback", 0) > 0, 10,
         "writeback in flight")
    srv.kill(signal.SIGKILL)
    th.join(30)
    t_check(not th.is_alive(), "the fsync in flight returned once the server died")
    t_eq(errno.errorcode.get(res.get("rc"), res.get("rc")), "EIO",
         "the fsync in flight when the server died")
    t_step("disconnected: fsync EIO, cached pages read, uncached EIO")
    t_errno(errno.EIO, os.fsync, fd, what="fsync with the server gone")
    poll(lambda: nbd_ctl(mnt)["state"] == "disconnected", 5,
         "/.wbcfs/nbd says disconnected")
    t_check(read_file(os.path.join(mnt, "pre")) == pre, "pre read from the cache")
    t_check(t_read_all(fd, len(late) + 1, 0) == late, "late read from the cache")
    t_errno(errno.EIO, read_file, os.path.join(mnt, "cold"),
            what="read of an uncached file with the server gone")
    t_errno(errno.EIO, os.fsync, fd, what="fsync again with the server gone")
    failed = nbd_ctl(mnt)["failed"]
    t_check(failed > 0, "failed requests counted while disconnected: %r" % failed)

    t_step("the export back smaller on the same socket: not taken back")
    small = NbdServer(env, "e", ["--filter=truncate", "file", "file=" + img,
                                 "truncate=%d" % (IMG_SIZE // 2)])
    small.start()
    poll(lambda: "came back smaller" in m.daemon_log(), 10,
         "the daemon refuses the smaller export")
    c = nbd_ctl(mnt)
    t_check(c["state"] == "disconnected" and c["reconnects"] == 0,
            "a smaller export was taken back: %r" % c)
    small.stop()

    t_step("nbdkit restarted on the same socket: fsync succeeds within seconds")
    srv.start()
    eios, dt = fsync_until_ok(fd, 20, "after the server came back")
    t_log("fsync ok %.2fs after the restart (%d EIO meanwhile)" % (dt, eios))
    c = nbd_ctl(mnt)
    t_eq(c["state"], "connected", "state after the restart")
    t_check(c["reconnects"] >= 1, "reconnects counted: %r" % c["reconnects"])
    os.fsync(fd)
    os.close(fd)
    model = {"pre": pre, "late": late, "cold": cold}
    check_model(mnt, model, "after the reconnect")
    man = t_manifest(mnt)
    env.umount(m)
    kernel_sees(env, img, man, model)

    t_step("nbd_retry=0: no reconnect; unmount with the server gone ends, "
           "naming the pages lost")
    m = env.mount(srv.uri(), [CACHE, "nbd_retry=0"])
    t_eq(nbd_ctl(m.mnt)["retry_s"], 0, "retry_s with nbd_retry=0")
    write_file(os.path.join(m.mnt, "kept"), t_pattern("kept", 64 * 1024))
    fd = os.open(os.path.join(m.mnt, "doomed"), os.O_CREAT | os.O_WRONLY, 0o644)
    t_write_all(fd, t_pattern("doomed", 200 * 1024))
    srv.kill(signal.SIGKILL)
    srv.start()
    t_errno(errno.EIO, os.fsync, fd, what="fsync with the server gone, nbd_retry=0")
    time.sleep(1.5)     # what nbd_retry=1 took to reconnect above
    c = nbd_ctl(m.mnt)
    t_check(c["state"] == "disconnected" and c["reconnects"] == 0,
            "nbd_retry=0 reconnected: %r" % c)
    os.close(fd)
    t0 = time.monotonic()
    rc, log = umount_rc(env, m, timeout=60)
    t_log("daemon exited %d %.1fs after umount; log:\n%s"
          % (rc, time.monotonic() - t0, log.strip()))
    t_check(rc != 0, "exit status after losing the unwritten pages")
    t_check("lost" in log, "the loss is named in the daemon's log")
    srv.stop()


# --------------------------------------------------------------------------
# f. a slow export: the throttle paces the writer


def case_f(env):
    t_step("f. slow export (rate filter, 10 MB/s): the writer is throttled")
    img = new_image(env, "f.img")
    srv = file_server(env, "f", img, filters=["rate"],
                      params=["rate=%d" % (RATE_BPS * 8), "burstiness=0.5"])
    m = env.mount(srv.uri(), ["cache_size=32M"])
    mnt = m.mnt
    v0 = wbtrace.vmstat(mnt)
    tr = wbtrace.TraceReader(mnt, os.path.join(env.tmp, "f-trace.txt"))
    total = 24 * MIB
    try:
        p = subprocess.Popen(["dd", "if=/dev/zero", "of=" + os.path.join(mnt, "slow"),
                              "bs=256k", "count=%d" % (total // (256 * 1024)),
                              "conv=fsync"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=120)
        t_check(p.returncode == 0, "dd over the slow export: %s" % out)
        t_log("dd: %s" % out.strip().splitlines()[-1])
        v1 = wbtrace.vmstat(mnt)
        with open(os.path.join(mnt, ".wbcfs", "bdi")) as f:
            bdi = f.read()
    finally:
        tr.stop()
    recs = wbtrace.parse(tr.path)
    s = wbtrace.summary(recs)
    mine = [kv for _, ev, kv in recs if ev == "bdp" and kv.get("pid") == p.pid]
    slept = [kv for kv in mine if kv.get("pause", 0) > 0]
    bws = [kv for _, ev, kv in recs if ev == "bw"]
    pauses = v1.get("nr_throttle_pauses", 0) - v0.get("nr_throttle_pauses", 0)
    t_log("trace: %r; dd pid %d: %d bdp records, %d with a pause; "
          "nr_throttle_pauses +%d" % (s["events"], p.pid, len(mine),
                                      len(slept), pauses))
    if bws:
        t_log("last bw record: %r (server limit %.1f MB/s)"
              % (bws[-1], RATE_BPS / 1e6))
    t_log("bdi:\n%s" % bdi.strip())
    t_check(len(slept) > 0, "the writer (pid %d) was paused by the controller"
            % p.pid)
    t_check(pauses > 0, "vmstat counts throttle pauses (+%d)" % pauses)
    t_check(len(bws) > 0, "the trace has bandwidth updates")
    # at the hard limit the pause repeats until the dirty pages are back
    # under it: a decision may see them a little over, never far
    over = max((kv.get("dirty", 0) - kv.get("limit", 0) for kv in mine),
               default=0)
    lim = max((kv.get("limit", 0) for kv in mine), default=0)
    t_log("dirty pages at most %d over the limit (%d pages)" % (over, lim))
    t_check(over <= lim // 4, "dirty pages %d over a limit of %d" % (over, lim))
    t_eq(os.stat(os.path.join(mnt, "slow")).st_size, total, "size written")
    env.umount(m)
    srv.stop()
    env.fsck(img)


# --------------------------------------------------------------------------
# h. a server that stops answering: nbd_timeout

def pause_ctl(path, c):
    """Send one command to nbdkit's pause filter; returns its echo."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(path)
        s.send(c)
        return s.recv(1)
    finally:
        s.close()


def case_h(env):
    t_step("h. a server that stops answering (pause filter): nbd_timeout=2")
    img = new_image(env, "h.img")
    ctl = os.path.join(env.tmp, "h-pause.ctl")
    srv = file_server(env, "h", img, filters=["pause"],
                      params=["pause-control=" + ctl])
    m = env.mount(srv.uri(), [CACHE, "nbd_retry=1", "nbd_timeout=2"])
    mnt = m.mnt
    t_eq(nbd_ctl(mnt)["timeout_s"], 2, "timeout_s")
    path = os.path.join(mnt, "x")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    t_write_all(fd, b"A" * 65536, 0)
    os.fsync(fd)
    t_write_all(fd, b"B" * 65536, 0)
    t_eq(pause_ctl(ctl, b"p"), b"P", "the server paused")
    t0 = time.monotonic()
    t_errno(errno.EIO, os.fsync, fd, what="fsync while the server does not answer")
    dt = time.monotonic() - t0
    t_log("fsync gave EIO after %.1fs with nbd_timeout=2" % dt)
    # bounded, not forever (nbd_retry=1 alone would wait): a hang detector
    # with room for a busy machine, not a measure of how fast
    t_check(dt < 60, "fsync waited %.1fs for a silent server (nbd_timeout=2)" % dt)
    t_eq(nbd_ctl(mnt)["state"], "disconnected", "state after the timeout")
    # the page changes again while the server is away: the last write wins
    t_write_all(fd, b"C" * 65536, 0)
    t_eq(pause_ctl(ctl, b"r"), b"R", "the server resumed")

    def revive():
        # nbdkit 1.32's pause filter can abort (raw_send_socket: Assertion
        # `sock >= 0') when the replies to requests it held go to a
        # connection the client has closed, as wbcfs did at the timeout
        # with two writes in flight. The server is then back by a restart,
        # which is what the daemon must reconnect to all the same.
        if srv.proc.poll() is not None:
            t_log("nbdkit h died (exit %d) after the resume; started again:\n%s"
                  % (srv.proc.returncode, srv.log_text()))
            srv.kill()
            srv.start()

    eios, dt = fsync_until_ok(fd, 20, "after the server answered again", each=revive)
    t_log("fsync ok %.2fs after the resume (%d EIO meanwhile)" % (dt, eios))
    c = nbd_ctl(mnt)
    t_check(c["state"] == "connected" and c["reconnects"] >= 1,
            "reconnected after the timeout: %r" % c)
    t_check(t_read_all(fd, 65537, 0) == b"C" * 65536, "x reads the last write")
    os.close(fd)
    model = {"x": b"C" * 65536}
    man = t_manifest(mnt)
    t_check("no reply for 2 s" in m.daemon_log(),
            "the daemon says why it left the connection:\n%s" % m.daemon_log())
    env.umount(m)
    srv.stop()
    kernel_sees(env, img, man, model)


# --------------------------------------------------------------------------
# i. the daemon killed: the next mount over NBD replays the journal

def kill_daemon(env, m):
    """SIGKILL the daemon (a crash: the journal is left to replay) and
    take its dead mount away."""
    m.proc.kill()
    m.proc.wait(30)
    t_run(["umount", m.mnt], check=False)
    m.mounted = False
    env.mounts.remove(m)


def case_i(env):
    t_step("i. wbcfs killed (SIGKILL): the next NBD mount replays the journal")
    img = new_image(env, "i.img")
    srv = file_server(env, "i", img, filters=["blocksize-policy"], params=BLOCKSIZES)
    model = {}
    for rnd in range(2):
        m = env.mount(srv.uri(), [CACHE])
        if rnd:
            t_check("journal recovered" in m.daemon_log(),
                    "the mount replayed the journal:\n%s" % m.daemon_log())
            check_model(m.mnt, model, "after the replay")
        rel = "f%d" % rnd
        model[rel] = t_pattern(rel, 300000)
        write_file(os.path.join(m.mnt, rel), model[rel])
        os.mkdir(os.path.join(m.mnt, "d%d" % rnd))
        fsync_path(m.mnt)
        kill_daemon(env, m)
        feats = t_run(["dumpe2fs", "-h", img], quiet=True).stdout
        t_check("needs_recovery" in feats, "needs_recovery set after the kill")
    t_step("a read-only export that needs recovery is refused, even with -o ro")
    srv.stop()
    ro = file_server(env, "i-ro", img, readonly=True)
    refused(env, ro.uri(), [CACHE, "ro"], img, "read-only",
            "journal recovery on a read-only export")
    ro.stop()
    t_step("-o ro on a writable export replays it")
    srv.start()
    m = env.mount(srv.uri(), [CACHE, "ro"])
    t_check("journal recovered" in m.daemon_log(),
            "the ro mount replayed the journal:\n%s" % m.daemon_log())
    check_model(m.mnt, model, "after the replay (ro)")
    man = t_manifest(m.mnt)
    env.umount(m)
    srv.stop()
    kernel_sees(env, img, man, model)


# --------------------------------------------------------------------------

CASES = "abcdefhi"


def body(env):
    if t_is_kernel():
        raise TSkip("wbcfs over NBD: the kernel here has no nbd module")
    for prog, pkg in (("nbdkit", "nbdkit"), ("nbdcopy", "libnbd-bin"),
                      ("nbdfuse", "libnbd-bin"), ("fstrim", "util-linux")):
        if shutil.which(prog) is None:
            raise TSkip("%s not installed (package %s)" % (prog, pkg))
    only = os.environ.get("WBCFS_NBD_ONLY", CASES).replace(",", "")
    try:
        img_a = None
        if "a" in only or "c" in only:
            img_a = case_a(env)
        if "b" in only:
            case_b(env)
        if "c" in only:
            case_c(env, img_a)
        if "d" in only:
            case_d(env)
        if "e" in only:
            case_e(env)
        if "f" in only:
            case_f(env)
        if "h" in only:
            case_h(env)
        if "i" in only:
            case_i(env)
    finally:
        # the mounts go first: a daemon whose server is gone would retry
        for m in reversed(list(env.mounts)):
            env._undo_mount(m)
            env.mounts.remove(m)
        NbdServer.stop_all()


if __name__ == "__main__":
    t_main("nbd", body, deadline_s=240)
