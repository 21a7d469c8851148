#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A memory hog: pyhog.py BYTES [HOLD_SECONDS]

Allocates BYTES of anonymous memory in 64 MiB pieces and writes a byte to
every page of each (so each is really charged, not just reserved), prints
`got BYTES SECONDS` (the time to get all of it), holds it HOLD_SECONDS
[2] and exits 0. Killed by the OOM killer, it never prints the line.
Used by test_memory.py and bench/memory, started inside a memory cgroup.
"""

import sys
import time

PIECE = 64 << 20
PAGE = 4096


def main():
    nbytes = int(sys.argv[1])
    hold = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    held = []
    t0 = time.monotonic()
    left = nbytes
    while left > 0:
        n = min(PIECE, left)
        b = bytearray(n)            # calloc: zero pages not yet faulted
        b[::PAGE] = b"\x01" * ((n + PAGE - 1) // PAGE)
        held.append(b)
        left -= n
    dt = time.monotonic() - t0
    print("got %d %.3f" % (nbytes, dt), flush=True)
    time.sleep(hold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
