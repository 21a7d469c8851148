/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Journal recovery at mount: replay of ext4's internal journal (jbd2
 * format, jbd2/format.h) before libext2fs loads the filesystem, with the
 * rules of the kernel's jbd2 recovery (scan, revoke, replay): the log walk
 * in jbd2/jrecover.c, the ext4 superblock's side in jbd2/jmount.c. The
 * journal writer itself is jbd2/log.c, driven by ext4/journal.c.
 */
#ifndef WBCFS_FS_JRECOVER_H
#define WBCFS_FS_JRECOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <ext2fs/ext2fs.h>

/* One journal to replay: its blocks on the device, and where they may go. */
struct jrec_log {
	int fd;			/* the device: log reads and home writes */
	unsigned blocksize;	/* the filesystem's block size */
	const uint64_t *map;	/* journal block -> device block */
	uint32_t nr_blocks;	/* entries in @map */
	uint64_t fs_blocks;	/* home blocks are below this */
	const char *dev;	/* for messages */
};

/* What a replay found and did. */
struct jrec_stats {
	uint32_t transactions;	/* committed transactions replayed */
	uint64_t replayed;	/* blocks written home */
	uint64_t revoked;	/* logged blocks skipped for a revoke record */
	uint32_t next_sequence;	/* s_sequence left in the journal superblock */
	uint32_t jerrno;	/* the journal's s_errno found (ext4 error to record) */
	bool was_empty;		/* s_start was 0: nothing replayed */
};

/**
 * jrec_recover() - replay the journal of @dev if it needs recovery
 * @dev:  device path, for messages and, with @ro, to open it writable
 * @fd:   the device, opened read-write unless @ro (may be O_DIRECT)
 * @ro:   the mount is read-only: recovery still writes when the device
 *        can be written (as the kernel's ext4 does), else refuses
 *
 * Does nothing when the superblock lacks needs_recovery. Otherwise
 * replays the log, empties it (s_start = 0), clears needs_recovery and
 * flushes, printing one line to stderr. Every refusal prints one line.
 * Returns 0 (no recovery needed), 1 (recovered), -EUCLEAN (corrupt or
 * unsupported journal: run e2fsck),
 * -EROFS (the device cannot be written), -ENOMEM or -EIO.
 */
int jrec_recover(const char *dev, int fd, bool ro);

/**
 * jrec_replay() - replay @log's journal and mark it empty
 * @log:   the journal's blocks; block 0 holds its superblock
 * @stats: filled in
 *
 * The three passes of jbd2 recovery, writes home through devlog, a flush,
 * then the journal superblock rewritten with s_start = 0 and flushed.
 * The ext4 superblock is the caller's. Returns 0, -EUCLEAN (journal
 * corrupt, unsupported or needing e2fsck; one line printed), -EIO.
 */
int jrec_replay(const struct jrec_log *log, struct jrec_stats *stats);

/**
 * jrec_journal_map() - the device blocks of the first @maxlen blocks of
 * the journal inode @ino
 * @map: set to a malloc'ed array of @maxlen device block numbers
 *
 * Returns 0, -EUCLEAN (a hole, a block outside the filesystem, an inode
 * shorter than @maxlen blocks) or -ENOMEM / -EIO.
 */
int jrec_journal_map(ext2_filsys fs, ext2_ino_t ino, uint32_t maxlen, uint64_t **map);

#endif
