/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Synchronous device writes and flushes issued outside the io engines
 * (the journal's log and superblock, recovery, zeroing). Every write and
 * flush the daemon sends to the device goes either through an io engine
 * or through these, so that one place can record them (mount option
 * write_log, for the crash-point harness tools/wbcfs-crash).
 *
 * The write log is a file of fixed 40-byte little-endian records after a
 * 16-byte header, appended with write(2) under one mutex, in the order the
 * events happen (doc/write_log.md has the format):
 *
 *   header: "WBCFSWL1", u32 version (1), u32 record size (40)
 *   record: u32 type, u32 zero, u64 seq, u64 off, u64 len, s64 res
 *           followed by len bytes of data for DEVLOG_WRITE only
 *
 * A write or flush is logged when it is issued (queued to an engine, or
 * just before the syscall) and again when its completion is seen, with
 * the same seq. A discard (FITRIM) is issued as DEVLOG_DISCARD, no data;
 * the device may read zeros or the old data there afterwards. Reads are
 * not logged. Records are written synchronously, so the log's size, as
 * fstat sees it right after an fsync returned, is a position in the log
 * at which every record of that fsync is already present.
 */
#ifndef WBCFS_DEVLOG_H
#define WBCFS_DEVLOG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define DEVLOG_MAGIC "WBCFSWL1"
#define DEVLOG_VERSION 1

enum devlog_type {
	DEVLOG_WRITE = 1,	/* issue: off, len, then len bytes of data */
	DEVLOG_WRITE_DONE = 2,	/* completion of a WRITE or DISCARD: res bytes or -errno */
	DEVLOG_FLUSH = 3,	/* issue of a flush of the device's volatile cache */
	DEVLOG_FLUSH_DONE = 4,	/* its completion: res 0 or -errno */
	DEVLOG_DISCARD = 5,	/* issue: off, len; no data */
};

struct devlog_header {
	char magic[8];		/* DEVLOG_MAGIC */
	uint32_t version;	/* DEVLOG_VERSION */
	uint32_t rec_bytes;	/* sizeof(struct devlog_rec) */
};

struct devlog_rec {
	uint32_t type;		/* enum devlog_type */
	uint32_t zero;
	uint64_t seq;		/* pairs an issue with its completion; from 1 */
	uint64_t off;		/* bytes */
	uint64_t len;		/* bytes */
	int64_t res;		/* completions only */
};

/*
 * True while a write log is open. Set by devlog_open() before any thread
 * starts, cleared by devlog_close() after they stopped: read without a lock,
 * so that a mount without write_log pays one branch per request.
 */
extern bool devlog_on;

/** Start recording to @path (created or truncated). Returns 0 or -errno. */
int devlog_open(const char *path);
/** Stop recording; no thread may issue I/O any more. */
void devlog_close(void);
/** Log a write's issue; returns its seq (0 when not recording). */
uint64_t devlog_write_issued(uint64_t off, const struct iovec *iov, int iovcnt);
/** Log a flush's issue; returns its seq (0 when not recording). */
uint64_t devlog_flush_issued(void);
/** Log a discard's issue; returns its seq (0 when not recording). */
uint64_t devlog_discard_issued(uint64_t off, uint64_t len);
/** Log the completion of @seq (DEVLOG_WRITE_DONE or DEVLOG_FLUSH_DONE). */
void devlog_completed(enum devlog_type type, uint64_t seq, int64_t res);

#endif
