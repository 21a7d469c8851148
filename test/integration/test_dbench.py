#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""dbench with 8 clients for 20 s: exit 0 and no ERROR in its output; then
unmount, e2fsck -fn, and the kernel's ext4 sees the same tree.

    WBCFS_BIN=build/wbcfs test/integration/test_dbench.py [--kernel]
Env: WBCFS_DBENCH_SECONDS (default 20), WBCFS_DBENCH_CLIENTS (default 8).
"""

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wbtest import (GIB, TFail, TSkip, t_log, t_main, t_manifest, t_run,  # noqa: E402
                    t_step)

LOADFILES = ("/usr/share/dbench/client.txt", "/usr/share/dbench4/client.txt",
             "/usr/local/share/client.txt")


def body(env):
    dbench = shutil.which("dbench")
    if dbench is None:
        raise TSkip("dbench not installed")
    loadfile = next((p for p in LOADFILES if os.path.exists(p)), None)
    secs = os.environ.get("WBCFS_DBENCH_SECONDS", "20")
    clients = os.environ.get("WBCFS_DBENCH_CLIENTS", "8")
    dev = env.new_fs(2 * GIB)
    m = env.mount(dev)
    t_step("dbench %s clients, %s s" % (clients, secs))
    cmd = [dbench, "-D", m.mnt, "-t", secs]
    if loadfile:
        cmd += ["-c", loadfile]
    cmd.append(clients)
    p = t_run(cmd, check=False, timeout=int(secs) + 300)
    lines = p.stdout.splitlines()
    bad = [ln for ln in lines if "ERROR" in ln or "failed" in ln.lower()]
    tput = [ln for ln in lines if ln.startswith("Throughput")]
    if p.returncode != 0 or bad or not tput:
        raise TFail("dbench: exit %d, %d error line(s):\n%s" % (
            p.returncode, len(bad), "\n".join((bad or lines)[-30:])))
    t_log(tput[-1].strip())
    m_ops = re.search(r"Operation\s+Count", p.stdout)
    if m_ops:
        t_log("dbench op table present")
    man = t_manifest(m.mnt)
    env.umount(m)
    env.verify_after_umount(dev, man)


if __name__ == "__main__":
    t_main("dbench", body, deadline_s=400)
