/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Synchronous device writes and flushes issued outside the io engines
 * (the journal's log and superblock, recovery, zeroing). Every write and
 * flush the daemon sends to the device goes either through an io engine
 * or through these, so that one place can record them (mount option
 * write_log, for the crash-point harness).
 */
#ifndef WBCFS_DEVLOG_H
#define WBCFS_DEVLOG_H

#include <sys/types.h>
#include <sys/uio.h>

/** pwritev that loops over short writes. Returns 0 or -errno. */
int devlog_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off);
/** fdatasync of the device (its volatile cache). Returns 0 or -errno. */
int devlog_flush(int fd);

#endif
