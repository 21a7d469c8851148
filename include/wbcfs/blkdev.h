/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blkdev/, the device layer: the I/O engines the flushers submit through
 * (io_uring, libaio, psync, NBD, RBD: blkdev/engine.h), the NBD client
 * (nbdev.h), the RBD client (rbdev.h), the synchronous I/O that mount, journal and recovery do by
 * descriptor (sync.h), and the write log that records what reached the
 * device (devlog.h). It depends on lib/ alone. Internals: blkdev/blkdev_i.h.
 */
#ifndef WBCFS_BLKDEV_H
#define WBCFS_BLKDEV_H

#include "wbcfs/blkdev/engine.h"
#include "wbcfs/blkdev/nbdev.h"
#include "wbcfs/blkdev/rbdev.h"
#include "wbcfs/blkdev/devlog.h"
#include "wbcfs/blkdev/sync.h"

#endif
