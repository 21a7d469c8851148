/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * jbd2/ internals. What ext4/ sees is in include/wbcfs/jbd2.h.
 */
#ifndef WBCFS_JBD2_JBD2_I_H
#define WBCFS_JBD2_JBD2_I_H

#include "wbcfs/jbd2.h"
#include "wbcfs/blkdev.h"
#include "wbcfs/lib/msg.h"

#include <sys/types.h>

/* jrecover.c, for jmount.c */

/* One line, "wbcfs: DEV: ...; run e2fsck". Returns -EUCLEAN. */
int jrec_err(const char *dev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Read @len bytes at @off, whole or -errno (-EIO at the device's end). */
int jrec_dev_pread(int fd, void *buf, size_t len, off_t off);
/* Write @len bytes at @off through the device log, 0 or -errno. */
int jrec_dev_pwrite(int fd, const void *buf, size_t len, off_t off);

#endif
