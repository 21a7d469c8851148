/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blkdev/ internals: the engines behind io_engine_init. What the other
 * folders see is in include/wbcfs/blkdev.h.
 */
#ifndef WBCFS_BLKDEV_BLKDEV_I_H
#define WBCFS_BLKDEV_BLKDEV_I_H

#include "wbcfs/blkdev.h"

extern const struct io_engine_ops io_engine_uring_ops;
extern const struct io_engine_ops io_engine_aio_ops;
extern const struct io_engine_ops io_engine_psync_ops;
extern const struct io_engine_ops io_engine_nbd_ops;

#endif
