#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""wbcfs on a Ceph RBD image through librbd (rbd:POOL/IMAGE), against a
throwaway one-node cluster from tools/ceph-dev (one mon, one mgr, one
bluestore OSD), started once for the file and stopped in cleanup.

  a. an ext4 image (mkfs.ext4 on a file, `rbd import`ed) mounted through
     $CEPH_CONF: files written with known checksums, some fsync'ed;
     /.wbcfs/rbd names the image, its size, the lock held; a deleted
     file's space given back by fstrim (rbd du); unmount exit 0; the
     image's lock is released; `rbd export`: e2fsck -fn clean, the
     kernel's ext4 (loop, read-only) reads every file with its checksum.
  b. refusals, each one line naming the cause, exit non-zero, well within
     30 s (never librados' 300 s): a missing image, a missing pool, a
     wrong key (ceph_keyring=), no monitor listening (ceph_conf= naming
     a dead port), a snapshot without ro. The snapshot mounts with ro
     and reads what was written before it was taken (no lock taken).
  c. one writer: a second read-write mount is refused naming the lock's
     holder (client.N at its address); break_lock while the holder lives
     takes the lock and blocklists it: the old daemon's fsync fails with
     EIO, it reports the loss, /.wbcfs/rbd says lock lost. The holder
     killed (SIGKILL) after an fsync: a mount without break_lock is
     still refused at once (not after librbd's 30 s watch timeout); with
     break_lock it replays the journal, the fsync'ed file is intact;
     unmounted: e2fsck clean.

Skips (77) when the ceph daemons, the rbd tool or librbd support are
missing (tools/deps.sh installs them).

    WBCFS_BIN=build/wbcfs test/integration/test_rbd.py
"""

import errno
import hashlib
import json
import os
import socket
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, TSkip, t_check, t_eq, t_log, t_main, t_run,  # noqa: E402
                    t_sha256_file, t_step, t_is_kernel, t_wbcfs_bin)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CEPH_DEV = os.path.join(TOP, "tools", "ceph-dev")
IMG_SIZE = 256 * MIB
REFUSE_S = 30       # a refusal must come well before this


class Cluster:
    """tools/ceph-dev start; stop is in env.undo (after the mounts go)."""

    def __init__(self, env, osds=1):
        d = os.path.join(env.tmp, "ceph")
        t_step("starting a %d-OSD ceph cluster in %s" % (osds, d))
        p = t_run([CEPH_DEV, "start", "-n", str(osds), d], check=False, timeout=240)
        # stopped in cleanup whatever happened (a failed start stops itself)
        env.undo.append(lambda: t_run([CEPH_DEV, "stop", d], check=False, timeout=120))
        if p.returncode != 0:
            raise TFail("tools/ceph-dev start failed:\n%s" % p.stdout)
        self.dir = d
        self.conf = p.stdout.strip().splitlines()[-1].split("=", 1)[1]
        os.environ["CEPH_CONF"] = self.conf    # for rbd(8) and wbcfs alike

    def rbd(self, *args, check=True):
        return t_run(["rbd"] + list(args), check=check, timeout=120)


def make_image(env, cl, name):
    """A fresh ext4 (4 KiB blocks) imported as rbd/NAME."""
    f = os.path.join(env.tmp, name + ".ext4")
    with open(f, "wb") as fh:
        fh.truncate(IMG_SIZE)
    t_run(["mkfs.ext4", "-q", "-F", "-b", "4096", f])
    cl.rbd("import", "--no-progress", f, "rbd/" + name)
    os.unlink(f)
    return "rbd:rbd/" + name


def export_check(env, cl, name, files):
    """rbd export: e2fsck -fn clean, the kernel's ext4 reads @files."""
    out = os.path.join(env.tmp, name + ".export")
    if os.path.exists(out):
        os.unlink(out)
    cl.rbd("export", "--no-progress", "rbd/" + name, out)
    env.fsck(out)
    dev = env.loop(out)
    m = env.kernel_ro(dev)
    for rel, want in files.items():
        t_eq(t_sha256_file(os.path.join(m.mnt, rel)), want, "kernel's %s" % rel)
    t_run(["umount", m.mnt])
    env.mounts.remove(m)
    env.detach(dev)
    os.unlink(out)


def write_file(path, n_mib, seed, fsync=True):
    data = bytearray()
    block = (b"%s-%d-" % (os.path.basename(path).encode(), seed)) * 100
    while len(data) < n_mib * MIB:
        data += block
    data = bytes(data[:n_mib * MIB])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return hashlib.sha256(data).hexdigest()


def ctl_rbd(m):
    """/.wbcfs/rbd as a dict."""
    with open(os.path.join(m.mnt, ".wbcfs", "rbd")) as f:
        return dict(l.split(" ", 1) for l in f.read().splitlines())


def rbd_used(cl, name):
    """Bytes the image takes in the cluster (rbd du)."""
    d = json.loads(cl.rbd("du", "--format", "json", "rbd/" + name).stdout)
    return sum(i["used_size"] for i in d["images"])


def lock_list(cl, name):
    return cl.rbd("lock", "ls", "rbd/" + name).stdout


def case_a(env, cl):
    t_step("a. write through librbd, unmount, export: clean, same data")
    dev = make_image(env, cl, "a")
    m = env.mount(dev)
    t_check(m.proc.poll() is None, "daemon alive")
    files = {}
    for i in range(4):
        files["f%d" % i] = write_file(os.path.join(m.mnt, "f%d" % i), 4 + i, i, fsync=i % 2 == 0)
    os.mkdir(os.path.join(m.mnt, "dir"))
    files["dir/big"] = write_file(os.path.join(m.mnt, "dir", "big"), 24, 9, fsync=True)
    for rel, want in files.items():
        t_eq(t_sha256_file(os.path.join(m.mnt, rel)), want, "mount's %s" % rel)
    t_check("client." in lock_list(cl, "a"), "a read-write mount holds the image's lock")
    c = ctl_rbd(m)
    t_eq((c["image"], c["size"], c["lock"], c["read_only"]),
         (dev, str(IMG_SIZE), "held", "0"), "/.wbcfs/rbd")
    # a deleted file's blocks, once its delete is committed, go back by fstrim
    used = rbd_used(cl, "a")
    os.unlink(os.path.join(m.mnt, "dir", "big"))
    del files["dir/big"]
    write_file(os.path.join(m.mnt, "commit"), 1, 0, fsync=True)   # commits the delete
    del_commit = t_run(["fstrim", "-v", m.mnt])
    t_log(del_commit.stdout.strip())
    after = rbd_used(cl, "a")
    t_log("rbd du: %d MiB used before the delete and fstrim, %d MiB after"
          % (used // MIB, after // MIB))
    # rbd du counts whole 4 MiB objects: only those the file had alone go
    t_check(after <= used - 4 * MIB, "fstrim gave the deleted file's space back")
    files["commit"] = write_file(os.path.join(m.mnt, "commit"), 1, 0, fsync=True)
    env.umount(m)
    t_check("client." not in lock_list(cl, "a"), "the lock is released at unmount:\n"
            + lock_list(cl, "a"))
    export_check(env, cl, "a", files)
    return files


def refused(env, dev, opts, words):
    """The mount fails, promptly, with one line holding @words."""
    t0 = time.monotonic()
    rc, out = env.mount(dev, opts, expect_fail=True, timeout=REFUSE_S * 2)
    took = time.monotonic() - t0
    lines = [l for l in out.splitlines() if l.startswith("wbcfs: ")]
    t_log("refused in %.1fs: %s" % (took, " | ".join(lines)))
    t_check(rc != 0, "exit non-zero")
    t_check(took < REFUSE_S, "refused after %.0f s (limit %d s)" % (took, REFUSE_S))
    t_check(any(all(w in l for w in words) for l in lines),
            "no line with %s in:\n%s" % (words, out))
    return out


def case_b(env, cl, files_a):
    t_step("b. refusals, each prompt and named")
    refused(env, "rbd:rbd/nosuch", [], ["no image nosuch in pool rbd"])
    refused(env, "rbd:nopool/a", [], ["no pool nopool"])
    key = t_run(["ceph-authtool", "--gen-print-key"]).stdout.strip()
    kr = os.path.join(env.tmp, "bad.keyring")
    with open(kr, "w") as f:
        f.write("[client.admin]\n\tkey = %s\n" % key)
    refused(env, "rbd:rbd/a", ["ceph_keyring=" + kr], ["refused client.admin's key", kr])
    # a conf whose mon listens nowhere: a port just bound and released
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    conf = os.path.join(env.tmp, "deadmon.conf")
    with open(cl.conf) as f, open(conf, "w") as g:
        for line in f:
            g.write("mon_host = [v2:127.0.0.1:%d]\n" % port
                    if line.startswith("mon_host") else line)
    refused(env, "rbd:rbd/a", ["ceph_conf=" + conf, "rbd_connect_timeout=5"],
            ["no Ceph monitor answered within 5 s"])
    cl.rbd("snap", "create", "rbd/a@s1")
    refused(env, "rbd:rbd/a@s1", [], ["snapshot is read-only"])
    m = env.mount("rbd:rbd/a@s1", ["ro"])
    for rel, want in files_a.items():
        t_eq(t_sha256_file(os.path.join(m.mnt, rel)), want, "snapshot's %s" % rel)
    t_check("client." not in lock_list(cl, "a"), "a snapshot takes no lock")
    t_eq((ctl_rbd(m)["lock"], ctl_rbd(m)["read_only"]), ("none", "1"), "snapshot's /.wbcfs/rbd")
    env.umount(m)


def case_c(env, cl):
    t_step("c. one writer: refused, break_lock fences a live holder")
    dev = make_image(env, cl, "c")
    m1 = env.mount(dev)
    out = refused(env, dev, [], ["exclusive lock is held by client.", "break_lock"])
    t_check("127.0.0.1" in out, "the holder's address is named")
    m2 = env.mount(dev, ["break_lock"])
    t_check("break_lock: blocklisting client." in m2.daemon_log(), "m2 says whom it fenced")
    # the fenced daemon: its writes fail, and it says why
    fd = os.open(os.path.join(m1.mnt, "late"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * MIB)
        try:
            os.fsync(fd)
            raise TFail("fsync on a fenced client succeeded")
        except OSError as e:
            t_eq(e.errno, errno.EIO, "fenced client's fsync errno")
    finally:
        os.close(fd)
    end = time.monotonic() + 30
    while "exclusive lock lost" not in m1.daemon_log() and time.monotonic() < end:
        time.sleep(0.2)
    t_check("exclusive lock lost" in m1.daemon_log(), "the fenced daemon reports the loss:\n"
            + m1.daemon_log())
    t_eq(ctl_rbd(m1)["lock"], "lost", "fenced /.wbcfs/rbd lock")
    t_check(int(ctl_rbd(m1)["failed"]) > 0, "fenced requests counted as failed")
    env.kill(m1)

    t_step("c. holder killed after an fsync: refused, then break_lock replays")
    want = write_file(os.path.join(m2.mnt, "kept"), 8, 3, fsync=True)
    env.kill(m2)
    refused(env, dev, [], ["exclusive lock is held by client."])
    m3 = env.mount(dev, ["break_lock"])
    t_check("journal recovered" in m3.daemon_log() or "recover" in m3.daemon_log(),
            "the journal is replayed:\n" + m3.daemon_log())
    t_eq(t_sha256_file(os.path.join(m3.mnt, "kept")), want, "fsync'ed file after takeover")
    env.umount(m3)
    export_check(env, cl, "c", {"kept": want})


def body(env):
    if t_is_kernel():
        raise TSkip("RBD images are wbcfs's (the kernel target has no rbd: devices)")
    for prog, pkg in (("ceph-mon", "ceph-mon"), ("ceph-osd", "ceph-osd"),
                      ("ceph-mgr", "ceph-mgr"), ("rbd", "ceph-common")):
        if not shutil.which(prog):
            raise TSkip("%s not installed (package %s; tools/deps.sh)" % (prog, pkg))
    ldd = subprocess.run(["ldd", t_wbcfs_bin()], capture_output=True, text=True)
    if "librbd" not in ldd.stdout:
        raise TSkip("this wbcfs was built without librbd (librbd-dev)")
    cl = Cluster(env)
    files_a = case_a(env, cl)
    case_b(env, cl, files_a)
    case_c(env, cl)


if __name__ == "__main__":
    t_main("rbd", body, deadline_s=300)
