#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A full disk: write(2) itself returns ENOSPC, and nothing else is lost.

On a 64 MiB filesystem, write 4 MiB files (fsync each) until write(2)
fails with ENOSPC.  Then: fsync of the partial file succeeds, every earlier
file is intact, the partial file holds exactly the bytes the successful
writes reported, df shows about nothing available, freeing a file gives
space back; unmount, e2fsck -fn, the kernel's ext4 sees the same tree.

    WBCFS_BIN=build/wbcfs test/integration/test_enospc.py [--kernel]
"""

import errno
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (MIB, TFail, t_check, t_eq, t_log, t_main, t_manifest,  # noqa: E402
                    t_run, t_statfs, t_step, t_write_all)

FS_SIZE = 64 * MIB
FILE_SIZE = 4 * MIB
CHUNK = 256 * 1024


def chunk_data(fileno, i):
    return hashlib.sha256(b"%d/%d" % (fileno, i)).digest() * (CHUNK // 32)


def body(env):
    dev = env.new_fs(FS_SIZE)
    m = env.mount(dev)
    t_step("fill a 64 MiB filesystem until write(2) returns ENOSPC")
    sums = {}
    partial = None
    for fileno in range(64):
        name = os.path.join(m.mnt, "f%02d" % fileno)
        fd = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        h = hashlib.sha256()
        written = 0
        hit = None
        for i in range(FILE_SIZE // CHUNK):
            buf = chunk_data(fileno, i)
            try:
                n = os.write(fd, buf)
            except OSError as e:
                hit = e
                break
            h.update(buf[:n])
            written += n
            if n < len(buf):           # short write: the next one must fail
                try:
                    os.write(fd, buf[n:])
                    os.close(fd)
                    raise TFail("write after a short write succeeded")
                except OSError as e:
                    hit = e
                break
        if hit is not None:
            if hit.errno != errno.ENOSPC:
                raise TFail("write to %s failed with %s, expected ENOSPC"
                            % (name, errno.errorcode.get(hit.errno)))
            t_log("ENOSPC at f%02d after %d bytes of it (%d full files)"
                  % (fileno, written, len(sums)))
            t_step("fsync of the partial file succeeds after ENOSPC")
            os.fsync(fd)
            os.close(fd)
            partial = (name, written, h.hexdigest())
            break
        os.fsync(fd)
        os.close(fd)
        sums[name] = h.hexdigest()
    t_check(partial is not None, "64 files of 4 MiB fit on a 64 MiB filesystem?")
    t_check(len(sums) >= 8, "only %d files fit before ENOSPC" % len(sums))

    t_step("a second writer also gets ENOSPC; appending to a full file too")
    fd = os.open(os.path.join(m.mnt, "more"), os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        t_write_all(fd, b"x" * MIB)
        raise TFail("1 MiB write to a full filesystem succeeded")
    except OSError as e:
        t_eq(e.errno, errno.ENOSPC, "errno of write to full filesystem")
    os.close(fd)
    os.unlink(os.path.join(m.mnt, "more"))

    t_step("df shows about nothing available")
    s = t_statfs(m.mnt)
    avail = s["bavail"] * s["bsize"]
    p = t_run(["df", "-B1", "--output=avail", m.mnt])
    df_avail = int(p.stdout.split()[-1])
    t_log("statfs: bfree %d blocks, bavail %d blocks; df avail %d bytes"
          % (s["bfree"], s["bavail"], df_avail))
    t_check(df_avail <= 2 * MIB, "df shows %d bytes available on a full fs"
            % df_avail)
    t_eq(df_avail, avail, "df avail vs statfs")

    t_step("files written before are intact; partial file has what was reported")
    verify(sums, partial)

    t_step("unlinking a file gives the space back")
    victim = sorted(sums)[0]
    os.unlink(victim)
    del sums[victim]
    os.sync()
    name = os.path.join(m.mnt, "after-free")
    fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)
    buf = chunk_data(999, 0) * 8
    t_write_all(fd, buf)
    os.fsync(fd)
    os.close(fd)
    sums[name] = hashlib.sha256(buf).hexdigest()
    verify(sums, partial)

    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


def verify(sums, partial):
    for name, want in sorted(sums.items()):
        with open(name, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        t_eq(got, want, "sha256 of " + os.path.basename(name))
    name, written, want = partial
    t_eq(os.stat(name).st_size, written, "size of the partial file")
    with open(name, "rb") as f:
        t_eq(hashlib.sha256(f.read()).hexdigest(), want,
             "sha256 of the partial file")


if __name__ == "__main__":
    t_main("enospc", body, deadline_s=300)
