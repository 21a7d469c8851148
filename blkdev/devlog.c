// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The write log (mount option write_log) and the synchronous device writes
 * and flushes outside the io engines; see include/wbcfs/blkdev/devlog.h for the
 * record format. The io engines log through devlog_*_issued() and
 * devlog_completed() from blkdev/engine.c; nothing here reads the log
 * back: tools/wbcfs-crash does.
 *
 * Lock ordering: devlog_lock is a leaf; it is taken under whatever the
 * caller holds, and nothing is taken under it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/blkdev/devlog.h"
#include "wbcfs/blkdev/nbdev.h"
#include "wbcfs/lib/lockstat.h"

bool devlog_on;

/* devlog_lock protects: log_fd's file offset (record order), log_seq, log_broken */
static pthread_mutex_t devlog_lock = PTHREAD_MUTEX_INITIALIZER;
LOCK_CLASS(lc_devlog_lock, "devlog_lock")
static int log_fd = -1;
static uint64_t log_seq;	/* devlog_lock; last seq handed out */
static bool log_broken;		/* devlog_lock; a record could not be written */

/* Write all of @iov to the log. Context: devlog_lock held. */
static int log_writev_locked(struct iovec *iov, int cnt)
{
	lock_assert_held(&devlog_lock);

	while (cnt) {
		ssize_t n = writev(log_fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		while (cnt && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

/*
 * Append one record and its data. A log that cannot be written is worse
 * than none (the harness would check states that never existed), so the
 * first failure is reported and nothing more is appended: the tool sees a
 * log that ends early and the missing end record of the workload.
 */
static uint64_t log_append(struct devlog_rec *r, const struct iovec *data, int cnt)
{
	struct iovec v[64];
	uint64_t seq = 0;
	int i = 0, n, ret;

	ls_mutex_lock(&devlog_lock, &lc_devlog_lock);
	if (log_broken)
		goto out_unlock;
	if (!r->seq)
		r->seq = ++log_seq;
	seq = r->seq;
	/* a copy: log_writev_locked() consumes the vectors it writes */
	v[0] = (struct iovec){ r, sizeof(*r) };
	n = 1;
	do {
		for (; i < cnt && n < 64; i++)
			v[n++] = data[i];
		ret = log_writev_locked(v, n);
		n = 0;
	} while (!ret && i < cnt);
	if (ret) {
		log_broken = true;
		fprintf(stderr, "wbcfs: write_log: cannot append: %s; recording stopped\n",
			strerror(-ret));
	}
out_unlock:
	ls_mutex_unlock(&devlog_lock);
	return seq;
}

int devlog_open(const char *path)
{
	struct devlog_header h = { .version = DEVLOG_VERSION,
				   .rec_bytes = sizeof(struct devlog_rec) };
	struct iovec v = { &h, sizeof(h) };
	int ret;

	memcpy(h.magic, DEVLOG_MAGIC, sizeof(h.magic));
	log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0)
		return -errno;
	ls_mutex_lock(&devlog_lock, &lc_devlog_lock);	/* for the contract's check */
	ret = log_writev_locked(&v, 1);
	ls_mutex_unlock(&devlog_lock);
	if (ret) {
		close(log_fd);
		log_fd = -1;
		return ret;
	}
	log_seq = 0;
	log_broken = false;
	devlog_on = true;
	return 0;
}

void devlog_close(void)
{
	if (!devlog_on)
		return;
	devlog_on = false;
	close(log_fd);
	log_fd = -1;
}

uint64_t devlog_write_issued(uint64_t off, const struct iovec *iov, int iovcnt)
{
	struct devlog_rec r = { .type = DEVLOG_WRITE, .off = off };
	int i;

	if (!devlog_on)
		return 0;
	for (i = 0; i < iovcnt; i++)
		r.len += iov[i].iov_len;
	return log_append(&r, iov, iovcnt);
}

uint64_t devlog_flush_issued(void)
{
	struct devlog_rec r = { .type = DEVLOG_FLUSH };

	return devlog_on ? log_append(&r, NULL, 0) : 0;
}

uint64_t devlog_discard_issued(uint64_t off, uint64_t len)
{
	struct devlog_rec r = { .type = DEVLOG_DISCARD, .off = off, .len = len };

	return devlog_on ? log_append(&r, NULL, 0) : 0;
}

void devlog_completed(enum devlog_type type, uint64_t seq, int64_t res)
{
	struct devlog_rec r = { .type = type, .seq = seq, .res = res };

	if (devlog_on && seq)
		log_append(&r, NULL, 0);
}
