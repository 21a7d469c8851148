#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Journal recovery at mount, against the kernel's ext4 and e2fsck.

  kernel log     the kernel's ext4 (commit=60, so that only the syncfs
                 below commits) creates, writes (some with fsync), makes
                 directories, renames, unlinks, hard-links and sets xattrs;
                 a directory is deleted a transaction after its creation
                 (revoke records), a deleted file is held open (the orphan
                 list); syncfs commits it all to the journal without
                 checkpointing; the device is copied (O_DIRECT) while still
                 mounted: an image whose metadata is in the log only.
                 wbcfs mounts the copy: one line says the journal was
                 recovered with revoked blocks skipped, the orphan is
                 freed, the tree is the kernel's (names, sizes, modes,
                 contents, xattrs), and after unmount e2fsck -fn is clean
                 and the kernel's ext4 sees the same tree. A second copy
                 replayed by e2fsck -fy gives the same tree and the same
                 free counts (the log's superblock had stale ones).
  wrapped log    rounds of creates and unlinks, each committed, in a
                 4 MiB journal, until the copied log (walked here by its
                 headers) has a committed transaction across the end of the
                 ring: wbcfs replays it to the kernel's tree, fsck-clean.
  read-only      -o ro on that copy still replays (the device can be
                 written), as the kernel does; on a read-only loop device
                 the mount is refused with one line, the device unchanged.
  norecovery     -o ro,norecovery (and its other name, noload) on that
                 copy replays nothing (xfstests generic/537): no
                 "journal recovered" line but one saying so, the tree is
                 the kernel's ext4 mounting it ro,noload, FITRIM fails with
                 EROFS as on the kernel's, and not a byte of the device is
                 written (the kernel's ext4 frees the orphans even then),
                 also from a read-only device: the next plain mount still
                 replays the journal.
                 -o norecovery without ro is refused with one line.
  refused        a corrupt journal superblock (bad magic; bad checksum), an
                 external journal, fast commits waiting in the log (the
                 kernel's, with -O fast_commit): one line naming e2fsck, a
                 non-zero exit, not a byte of the device written; e2fsck -fy
                 then repairs the fast-commit image.
  kernel oracle  the copy's last commit block damaged past its header (the
                 kernel mounts: "incomplete commit block"): wbcfs mounts
                 with a line saying so, to the kernel's tree; damaged in
                 its header, or a tag sent to block 0 or past the
                 filesystem (the kernel refuses): wbcfs refuses, the last
                 two without writing a byte. A logged superblock with
                 another group geometry: refused after the replay.

    WBCFS_BIN=build/wbcfs test/integration/test_jrecover.py
"""

import errno
import fcntl
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, Mount, TFail, TSkip, t_check, t_compare, t_errno,  # noqa: E402
                    t_is_kernel, t_log, t_main, t_manifest, t_run, t_sha256_file,
                    t_step)

BS = 4096
SB = 1024
# what a replay must carry over (times are the kernel's, also replayed)
KEYS = ["type", "mode", "uid", "gid", "size", "nlink", "target", "xattrs",
        "sha256", "mtime_ns", "links"]


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_T = _crc32c_table()


def crc32c(crc, data):
    """The kernel's crc32c (no final inversion), as ext4 uses it."""
    for b in data:
        crc = _CRC_T[(crc ^ b) & 0xff] ^ (crc >> 8)
    return crc


def workload(mnt):
    """Every kind of metadata change, some files fsync'ed; a directory
    logged in one transaction and deleted in the next (its blocks are
    revoked); a file unlinked but still open (on the orphan list).
    Returns the descriptors to close once the device is copied."""
    gone = os.path.join(mnt, "gone")
    os.mkdir(gone)
    for i in range(300):
        with open(os.path.join(gone, "entry-with-a-longish-name-%04d" % i), "wb") as f:
            f.write(b"g" * 10)
    t_run(["sync", "-f", mnt])
    for n in os.listdir(gone):
        os.unlink(os.path.join(gone, n))
    os.rmdir(gone)
    t_run(["sync", "-f", mnt])
    orphan = os.path.join(mnt, "orphan")
    fd = os.open(orphan, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, os.urandom(200000))
    os.unlink(orphan)
    d = os.path.join(mnt, "dir")
    os.mkdir(d)
    os.mkdir(os.path.join(d, "sub"))
    for i in range(40):
        with open(os.path.join(d, "f%02d" % i), "wb") as f:
            f.write(os.urandom(100 + i * 997))
            if i % 4 == 0:
                f.flush()
                os.fsync(f.fileno())
    with open(os.path.join(mnt, "big"), "wb") as f:
        f.write(os.urandom(3 * MIB + 123))
        os.fsync(f.fileno())
    os.rename(os.path.join(d, "f01"), os.path.join(d, "sub", "moved"))
    os.unlink(os.path.join(d, "f02"))
    os.link(os.path.join(d, "f03"), os.path.join(mnt, "hardlink"))
    os.symlink("dir/f04", os.path.join(mnt, "symlink"))
    os.setxattr(os.path.join(d, "f05"), "user.color", b"blue")
    os.setxattr(os.path.join(d, "sub"), "user.big", b"x" * 300)
    os.chmod(os.path.join(d, "f06"), 0o600)
    os.truncate(os.path.join(d, "f07"), 10)
    return [fd]


def jsb_start(img):
    p = t_run(["dumpe2fs", "-h", img], quiet=True)
    feats = start = None
    for line in p.stdout.splitlines():
        if line.startswith("Filesystem features:"):
            feats = line.split(":", 1)[1].split()
        if line.startswith("Journal start:"):
            start = int(line.split(":", 1)[1])
    return feats, start


def free_counts(img):
    p = t_run(["dumpe2fs", "-h", img], quiet=True)
    return [ln for ln in p.stdout.splitlines()
            if ln.startswith("Free blocks:") or ln.startswith("Free inodes:")]


def crashed_image(env, name, mkfs_opts=(), work=workload, sync=True):
    """The kernel's ext4 with committed, not checkpointed, transactions,
    copied while mounted. Returns (image path, manifest of the mount)."""
    dev = env.new_fs(256 * MIB, list(mkfs_opts), name=name + "-live.img")
    mnt = env.mkdir(name + "-kernel")
    t_run(["mount", "-t", "ext4", "-o", "commit=60", dev, mnt])
    m = Mount(mnt, dev, "kernel")
    env.mounts.append(m)
    fds = work(mnt) or []
    if sync:
        t_run(["sync", "-f", mnt])
    man = t_manifest(mnt)
    img = os.path.join(env.tmp, name + ".img")
    # O_DIRECT: what is on the device, not the kernel's buffer cache
    t_run(["dd", "if=" + dev, "of=" + img, "bs=1M", "iflag=direct", "status=none"])
    for fd in fds:
        os.close(fd)
    env.umount(m)
    env.detach(dev)
    os.unlink(os.path.join(env.tmp, name + "-live.img"))
    feats, start = jsb_start(img)
    t_check("needs_recovery" in feats and start,
            "the copy needs no recovery (features %s, journal start %s)" % (feats, start))
    t_log("%s: needs_recovery, journal starts at block %d" % (name, start))
    return img, man


def copy(env, src, name):
    dst = os.path.join(env.tmp, name)
    t_run(["cp", "--sparse=always", src, dst])
    return dst


def kernel_tree(env, dev):
    k = env.kernel_ro(dev)
    try:
        return t_manifest(k.mnt)
    finally:
        env.umount(k)


def recovered_line(log, orphans=True, revokes=True):
    lines = [ln for ln in log.splitlines() if "journal recovered:" in ln]
    t_check(len(lines) == 1, "no single 'journal recovered' line:\n" + log)
    t_check(" 0 transactions" not in lines[0], "nothing replayed: " + lines[0])
    t_check(not revokes or " 0 revoked" not in lines[0],
            "no revoked block skipped: " + lines[0])
    t_check(not orphans or "1 orphan inode deleted" in log,
            "the orphan was not deleted:\n" + log)
    return lines[0]


def case_kernel_log(env, img, man):
    t_step("wbcfs replays the kernel's journal")
    dev = env.loop(copy(env, img, "wb.img"))
    m = env.mount(dev)
    t_log(recovered_line(m.daemon_log()))
    got = t_manifest(m.mnt, exclude=(".wbcfs",))
    t_compare(man, got, "kernel", "wbcfs", keys=KEYS)
    env.umount(m)
    feats, start = jsb_start(dev)
    t_check("needs_recovery" not in feats and start == 0,
            "after recovery: features %s, journal start %s" % (feats, start))
    env.fsck(dev)
    t_compare(man, kernel_tree(env, dev), "kernel", "kernel-after-wbcfs", keys=KEYS)

    t_step("e2fsck -fy replays a second copy to the same tree")
    dev2 = env.loop(copy(env, img, "fsck.img"))
    p = t_run(["e2fsck", "-fy", dev2], check=False)
    t_check(p.returncode in (0, 1), "e2fsck -fy: exit %d\n%s" % (p.returncode, p.stdout))
    env.fsck(dev2)
    t_compare(kernel_tree(env, dev), kernel_tree(env, dev2), "wbcfs-replay", "e2fsck-replay",
              keys=KEYS)
    # the superblock's free counts were the log's stale ones: recounted
    t_check(free_counts(dev) == free_counts(dev2),
            "free blocks/inodes after wbcfs %s, after e2fsck %s"
            % (free_counts(dev), free_counts(dev2)))
    env.detach(dev2)
    env.detach(dev)


def case_read_only(env, img, man):
    t_step("-o ro replays when the device can be written")
    dev = env.loop(copy(env, img, "ro.img"))
    m = env.mount(dev, opts=["ro"])
    t_log(recovered_line(m.daemon_log(), orphans=False))   # read-only: left listed
    t_compare(man, t_manifest(m.mnt, exclude=(".wbcfs",)), "kernel", "wbcfs-ro", keys=KEYS)
    env.umount(m)
    feats, start = jsb_start(dev)
    t_check("needs_recovery" not in feats and start == 0,
            "after an ro recovery: features %s, journal start %s" % (feats, start))
    env.detach(dev)

    t_step("-o ro on a read-only device is refused")
    path = copy(env, img, "rodev.img")
    before = t_sha256_file(path)
    p = t_run(["losetup", "--find", "--show", "--read-only", path])
    rdev = p.stdout.strip().splitlines()[-1]
    env.loops.append(rdev)
    refused(env, rdev, "cannot be written", opts=["ro"])
    env.detach(rdev)
    t_check(t_sha256_file(path) == before, "the read-only device changed")


FITRIM = 0xC0185879     # _IOWR('X', 121, struct fstrim_range)


def fitrim(mnt):
    """fstrim of the whole filesystem through the mount's root."""
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FITRIM, bytearray(struct.pack("=QQQ", 0, 2**64 - 1, 0)))
    finally:
        os.close(fd)


def case_norecovery(env, img):
    t_step("-o ro,norecovery replays nothing: the tree is the kernel's ro,noload one")
    # a copy of its own: the kernel's ext4 writes even on ro,noload when
    # the orphan list is not empty (it frees the orphans); wbcfs does not
    kdev = env.loop(copy(env, img, "norec-kernel.img"))
    k = env.kernel_ro(kdev)         # ro,noload
    try:
        want = t_manifest(k.mnt)
        t_errno(errno.EROFS, fitrim, k.mnt, what="kernel ext4 ro,noload: FITRIM")
    finally:
        env.umount(k)
    env.detach(kdev)
    path = copy(env, img, "norec.img")
    before = t_sha256_file(path)
    dev = env.loop(path)
    p = t_run(["losetup", "--find", "--show", "--read-only", path])
    rdev = p.stdout.strip().splitlines()[-1]
    env.loops.append(rdev)
    # noload on a read-only device, which -o ro alone refuses (no replay)
    for opt, d in (("norecovery", dev), ("noload", rdev)):
        m = env.mount(d, opts=["ro", opt, "cache_size=64M"])
        log = m.daemon_log()
        t_check("journal recovered" not in log, "-o ro,%s replayed:\n%s" % (opt, log))
        t_check("not replayed (norecovery)" in log, "-o ro,%s: no line says the journal"
                " is not replayed:\n%s" % (opt, log))
        t_compare(want, t_manifest(m.mnt, exclude=(".wbcfs",)), "kernel-noload",
                  "wbcfs-" + opt, keys=KEYS)
        t_errno(errno.EROFS, fitrim, m.mnt, what="-o ro,%s: FITRIM" % opt)
        env.umount(m)
        t_check(t_sha256_file(path) == before, "-o ro,%s wrote to the device" % opt)
    env.detach(rdev)
    feats, start = jsb_start(dev)
    t_check("needs_recovery" in feats and start,
            "after norecovery mounts: features %s, journal start %s" % (feats, start))

    t_step("-o norecovery without ro is refused")
    rc, out = env.mount(dev, opts=["norecovery"], expect_fail=True)
    lines = [ln for ln in out.splitlines() if ln.startswith("wbcfs:")]
    t_check(rc != 0 and len(lines) == 1 and "norecovery (noload) requires ro" in lines[0],
            "want exit != 0 and one line naming ro, got %d:\n%s" % (rc, out))
    t_check(t_sha256_file(path) == before, "the refused mount wrote to the device")

    t_step("the journal was left alone: a plain mount replays it")
    m = env.mount(dev)
    t_log(recovered_line(m.daemon_log()))
    env.umount(m)
    env.fsck(dev)
    env.detach(dev)


def refused(env, dev, want, opts=()):
    rc, out = env.mount(dev, opts=opts, expect_fail=True)
    t_check(rc != 0, "wbcfs exited 0")
    lines = [ln for ln in out.splitlines() if ln.startswith("wbcfs:")]
    t_check(len(lines) == 1 and want in lines[0] and "e2fsck" in lines[0],
            "want one line with %r and e2fsck, got:\n%s" % (want, out))
    t_log("refused: " + lines[0])


def refused_image(env, path, want):
    before = t_sha256_file(path)
    dev = env.loop(path)
    refused(env, dev, want)
    env.detach(dev)
    t_check(t_sha256_file(path) == before, "a refused mount wrote to %s" % path)


def patch(path, off, data):
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)


def read(path, off, n):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def journal_block0(path):
    p = t_run(["debugfs", "-R", "bmap <8> 0", path], quiet=True)
    return int(p.stdout.split()[-1])


def ext4_sb_csum(path):
    sb = bytearray(read(path, SB, 1024))
    struct.pack_into("<I", sb, 0x3FC, crc32c(0xFFFFFFFF, bytes(sb[:0x3FC])))
    patch(path, SB, bytes(sb))


def case_refused(env, img):
    t_step("a journal superblock with a bad magic is refused")
    path = copy(env, img, "badmagic.img")
    jsb = journal_block0(path) * BS
    patch(path, jsb, b"\0\0\0\0")
    refused_image(env, path, "journal superblock")

    t_step("a journal superblock with a bad checksum is refused")
    path = copy(env, img, "badcsum.img")
    jsb = journal_block0(path) * BS
    patch(path, jsb + 0x200, bytes([read(path, jsb + 0x200, 1)[0] ^ 0xff]))
    refused_image(env, path, "checksum")

    t_step("an external journal is refused")
    path = copy(env, img, "extjournal.img")
    patch(path, SB + 0xD0, bytes(range(1, 17)))    # s_journal_uuid
    patch(path, SB + 0xE0, struct.pack("<I", 0))  # s_journal_inum
    ext4_sb_csum(path)
    refused_image(env, path, "external journal")


JBD2_MAGIC = 0xC03B3998


def journal_blocks(img):
    p = t_run(["debugfs", "-R", "blocks <8>", img], quiet=True)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def log_wraps(img, blocks):
    """Walk the log of img as jbd2 recovery would (headers only): does a
    committed transaction cross the end of the ring? @blocks: the journal
    inode's blocks (read once from the unmounted device: a copy of a live
    device may catch its inode table mid-write)."""
    jsb = read(img, blocks[0] * BS, 1024)
    maxlen, first, seq, start = struct.unpack(">IIII", jsb[16:32])
    incompat = struct.unpack(">I", jsb[40:44])[0]
    if not start:
        return False
    csum3, csum2, is64 = incompat & 0x10, incompat & 0x8, incompat & 0x2
    tag = 16 if csum3 else 8 + (2 if csum2 else 0) + (4 if is64 else 0)
    tail = 4 if csum3 or csum2 else 0
    pos, steps, wrapped, committed_wrap = start, 0, False, False
    while steps < maxlen:
        b = read(img, blocks[pos] * BS, BS)
        magic, btype, bseq = struct.unpack(">III", b[:12])
        if magic != JBD2_MAGIC or bseq != seq:
            break
        n = 1
        if btype == 1:
            off = 12
            while off + tag <= BS - tail:
                fl = b[off + 4:off + 8] if csum3 else b[off + 6:off + 8]
                flags = int.from_bytes(fl, "big")
                n += 1
                off += tag + (0 if flags & 2 else 16)
                if flags & 8:
                    break
        elif btype == 2:
            seq += 1
            committed_wrap = wrapped
        elif btype != 5:
            break
        steps += n
        pos += n
        if pos >= maxlen:
            pos -= maxlen - first
            wrapped = True
    return committed_wrap


def case_wrapped_log(env):
    t_step("a kernel log that wraps around the end of its ring")
    dev = env.new_fs(64 * MIB, ["-J", "size=4"], name="wrap-live.img")
    blocks = journal_blocks(dev)
    t_check(len(blocks) >= 1024, "journal inode blocks: %d" % len(blocks))
    mnt = env.mkdir("wrap-kernel")
    t_run(["mount", "-t", "ext4", "-o", "commit=60", dev, mnt])
    m = Mount(mnt, dev, "kernel")
    env.mounts.append(m)
    img = os.path.join(env.tmp, "wrap.img")
    for r in range(300):
        d = os.path.join(mnt, "r%03d" % r)
        os.mkdir(d)
        for i in range(20):
            with open(os.path.join(d, "f%d" % i), "wb") as f:
                f.write(b"%d/%d" % (r, i))
        if r > 20:
            for i in range(10):
                os.unlink(os.path.join(mnt, "r%03d" % (r - 20), "f%d" % i))
        t_run(["sync", "-f", mnt], quiet=True)
        t_run(["dd", "if=" + dev, "of=" + img, "bs=1M", "iflag=direct", "status=none"],
              quiet=True)
        if log_wraps(img, blocks):
            break
    else:
        raise TFail("the kernel's log never wrapped in 300 rounds")
    t_log("the log wraps after %d rounds" % (r + 1))
    man = t_manifest(mnt)
    env.umount(m)
    env.detach(dev)
    dev = env.loop(img)
    w = env.mount(dev)
    t_log(recovered_line(w.daemon_log(), orphans=False, revokes=False))
    t_compare(man, t_manifest(w.mnt, exclude=(".wbcfs",)), "kernel", "wbcfs", keys=KEYS)
    env.umount(w)
    env.fsck(dev)
    env.detach(dev)


def case_fast_commit(env):
    t_step("fast commits pending in the kernel's journal are refused")
    img, man = crashed_image(env, "fc", ["-O", "fast_commit"], work=fc_work, sync=False)
    refused_image(env, img, "fast commits")
    t_step("e2fsck -fy replays them")
    dev = env.loop(img)
    p = t_run(["e2fsck", "-fy", dev], check=False)
    t_check(p.returncode in (0, 1), "e2fsck -fy: exit %d\n%s" % (p.returncode, p.stdout))
    # directory mtimes are not in a fast commit: e2fsck sets its own
    t_compare(man, kernel_tree(env, dev), "kernel", "e2fsck-replay",
              keys=[k for k in KEYS if k != "mtime_ns"])
    env.detach(dev)


def fc_work(mnt):
    os.mkdir(os.path.join(mnt, "d"))
    t_run(["sync", "-f", mnt])      # a full commit: the log is not empty
    for name in ("d/x", "y"):
        with open(os.path.join(mnt, name), "wb") as f:
            f.write(b"fast" * 1500)
            os.fsync(f.fileno())    # a fast commit, not a full one


def log_walk(img):
    """The committed log of img as jbd2 recovery walks it (headers only):
    [(kind, device block, transaction, tags)], tags a list of (block
    number, byte offset of the tag in its descriptor, device block of its
    data); and the journal's checksum seed."""
    blocks = journal_blocks(img)
    jsb = read(img, blocks[0] * BS, 1024)
    maxlen, first, seq, pos = struct.unpack(">IIII", jsb[16:32])
    incompat = struct.unpack(">I", jsb[40:44])[0]
    csum3, csum2, is64 = incompat & 0x10, incompat & 0x8, incompat & 0x2
    tag = 16 if csum3 else 8 + (2 if csum2 else 0) + (4 if is64 else 0)
    tail = 4 if csum3 or csum2 else 0
    out, steps = [], 0
    while pos and steps < maxlen:
        b = read(img, blocks[pos] * BS, BS)
        magic, btype, bseq = struct.unpack(">III", b[:12])
        if magic != JBD2_MAGIC or bseq != seq:
            break
        n, tags = 1, []
        if btype == 1:
            off = 12
            while off + tag <= BS - tail:
                fl = b[off + 4:off + 8] if csum3 else b[off + 6:off + 8]
                flags = int.from_bytes(fl, "big")
                hi = struct.unpack(">I", b[off + 8:off + 12])[0] if is64 else 0
                dpos = pos + n
                if dpos >= maxlen:
                    dpos -= maxlen - first
                tags.append((struct.unpack(">I", b[off:off + 4])[0] | hi << 32, off,
                             blocks[dpos]))
                n += 1
                off += tag + (0 if flags & 2 else 16)
                if flags & 8:
                    break
        elif btype == 2:
            seq += 1
        elif btype != 5:
            break
        out.append((btype, blocks[pos], bseq, tags))
        steps += n
        pos += n
        if pos >= maxlen:
            pos -= maxlen - first
    return out, crc32c(0xFFFFFFFF, jsb[48:64])


def kernel_mounts(env, path):
    """Does the kernel's ext4 mount (and so replay) a copy of path?
    Returns its tree, or None when it refuses."""
    dev = env.loop(copy(env, path, "kernel-oracle.img"))
    mnt = env.mkdir("kernel-oracle")
    p = t_run(["mount", "-t", "ext4", "-o", "ro", dev, mnt], check=False)
    man = None
    if p.returncode == 0:
        m = Mount(mnt, dev, "kernel")
        env.mounts.append(m)
        man = t_manifest(mnt)
        env.umount(m)
    env.detach(dev)
    os.unlink(os.path.join(env.tmp, "kernel-oracle.img"))
    t_log("the kernel %s it" % ("mounts" if man is not None else "refuses"))
    return man


def case_commit_damage(env, img, man):
    t_step("a commit block whole in its header only: replayed, as the kernel does")
    log, _ = log_walk(img)
    commits = [e for e in log if e[0] == 2]
    t_check(commits, "no commit block in the log")
    last = commits[-1][1] * BS
    path = copy(env, img, "tornc.img")
    patch(path, last + 512, b"\xa5" * (BS - 512))
    kman = kernel_mounts(env, path)
    t_check(kman is not None, "the kernel refuses an incomplete commit block (older than 6.11?)")
    dev = env.loop(path)
    m = env.mount(dev)
    out = m.daemon_log()
    t_check("incomplete commit block" in out, "no line on the incomplete commit block:\n" + out)
    t_log(recovered_line(out))
    t_compare(man, t_manifest(m.mnt, exclude=(".wbcfs",)), "kernel", "wbcfs", keys=KEYS)
    t_compare(kman, t_manifest(m.mnt, exclude=(".wbcfs",)), "kernel-replay", "wbcfs",
              keys=KEYS)
    env.umount(m)
    env.fsck(dev)
    env.detach(dev)

    t_step("a commit block with a damaged header: refused, as the kernel does")
    path = copy(env, img, "badc.img")
    patch(path, last + 20, bytes([read(path, last + 20, 1)[0] ^ 0x01]))   # h_chksum[1]
    t_check(kernel_mounts(env, path) is None, "the kernel mounts a damaged commit header")
    # what came before it goes home, as the kernel's: the log stays for e2fsck
    dev = env.loop(path)
    refused(env, dev, "bad commit block")
    env.detach(dev)


def retag(path, desc, off, seed, blocknr):
    """Point the tag at byte off of the descriptor at device block desc to
    blocknr; the tag's own checksum (of the data) still holds, the
    descriptor's is recomputed."""
    b = bytearray(read(path, desc * BS, BS))
    struct.pack_into(">I", b, off, blocknr & 0xFFFFFFFF)
    struct.pack_into(">I", b, off + 8, blocknr >> 32)      # 64-bit tags
    struct.pack_into(">I", b, BS - 4, 0)
    struct.pack_into(">I", b, BS - 4, crc32c(seed, bytes(b)))
    patch(path, desc * BS, bytes(b))


def case_bad_tag_homes(env, img):
    log, seed = log_walk(img)
    desc = [e for e in log if e[0] == 1][0]
    # a block that is no superblock, logged before the superblock itself
    blk, off, _ = [t for t in desc[3] if t[0] != 0][0]
    p = t_run(["dumpe2fs", "-h", img], quiet=True)
    nblocks = int([ln for ln in p.stdout.splitlines()
                   if ln.startswith("Block count:")][0].split(":")[1])
    for name, home, want in (("block 0", 0, "superblock"),
                             ("a block past the filesystem", nblocks + 7, "outside the filesystem")):
        t_step("a tag sending block %d to %s: refused, as the kernel does" % (blk, name))
        path = copy(env, img, "tag%d.img" % home)
        retag(path, desc[1], off, seed, home)
        t_check(kernel_mounts(env, path) is None, "the kernel mounts it")
        refused_image(env, path, want)


def case_replayed_sb_geometry(env, img):
    t_step("a logged superblock with another group geometry: refused after the replay")
    log, seed = log_walk(img)
    hits = [(e, t) for e in log if e[0] == 1 for t in e[3] if t[0] == 0]
    t_check(hits, "no superblock in the log")
    desc, (_, off, data) = hits[-1]
    path = copy(env, img, "sbgeo.img")
    b = bytearray(read(path, data * BS, BS))
    ipg = struct.unpack_from("<I", b, SB + 0x28)[0]
    struct.pack_into("<I", b, SB + 0x28, ipg // 2)          # s_inodes_per_group
    struct.pack_into("<I", b, SB + 0x3FC, crc32c(0xFFFFFFFF, bytes(b[SB:SB + 0x3FC])))
    patch(path, data * BS, bytes(b))
    t_check(struct.unpack(">I", read(path, journal_blocks(path)[0] * BS + 40, 4))[0] & 0x10,
            "not a checksum v3 journal")
    tb = bytearray(read(path, desc[1] * BS, BS))
    csum = crc32c(crc32c(seed, struct.pack(">I", desc[2])), bytes(b))
    struct.pack_into(">I", tb, off + 12, csum)               # the tag's data checksum
    struct.pack_into(">I", tb, BS - 4, 0)
    struct.pack_into(">I", tb, BS - 4, crc32c(seed, bytes(tb)))
    patch(path, desc[1] * BS, bytes(tb))
    dev = env.loop(path)
    refused(env, dev, "another group geometry")
    env.detach(dev)


def body(env):
    if t_is_kernel():
        raise TSkip("wbcfs's own recovery: nothing to run against the kernel")
    img, man = crashed_image(env, "crash")
    case_kernel_log(env, img, man)
    case_read_only(env, img, man)
    case_norecovery(env, img)
    case_refused(env, img)
    case_commit_damage(env, img, man)
    case_bad_tag_homes(env, img)
    case_replayed_sb_geometry(env, img)
    case_wrapped_log(env)
    case_fast_commit(env)


if __name__ == "__main__":
    t_main("jrecover", body, deadline_s=600)
