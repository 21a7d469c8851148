// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Two FUSE connections in one process, each with the channel hooks and
 * its own FUSE-over-io_uring queues (fuse_io.c, fuse_uring.c): both come
 * up as "uring" with their own queues, both serve requests over their
 * rings, and unmounting one (its rings end, its state is freed) leaves the
 * other serving. No filesystem behind them: a root directory answered by a
 * few lowlevel ops, which is all the transport needs.
 *
 * Needs root, /dev/fuse and the kernel's FUSE io_uring switch on
 * (/sys/module/fuse/parameters/enable_uring); exits 77 (skip) without
 * them, 1 on a failed check, 0 when every check passed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../fuse/fuse_i.h"
#include "../../ext4/ext4_i.h"

#define T_SKIP 77

static int failures;

#define t_check(cond, ...)						\
	do {								\
		if (!(cond)) {						\
			fprintf(stderr, "FAIL: " __VA_ARGS__);		\
			fputc('\n', stderr);				\
			failures++;					\
		}							\
	} while (0)

/* The root directory, never cached by the kernel: every stat is a request. */
static void t_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st = { .st_ino = ino, .st_mode = S_IFDIR | 0755, .st_nlink = 2 };

	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fuse_reply_attr(req, &st, 0);
}

static void t_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, ENOENT);
}

static const struct fuse_lowlevel_ops t_ops = {
	.getattr = t_getattr,
	.lookup = t_lookup,
};

struct t_mount {
	struct wbfs w;
	struct fuse_session *se;
	char mnt[64];
	pthread_t loop;
	bool looping;
};

static void *t_loop(void *arg)
{
	struct t_mount *m = arg;

	fuse_session_loop(m->se);
	return NULL;
}

static int t_mount(struct t_mount *m, int n)
{
	char *argv[] = { "two_conns", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);

	snprintf(m->mnt, sizeof(m->mnt), "/tmp/two_conns.%d.%d", (int)getpid(), n);
	if (mkdir(m->mnt, 0755))
		return -errno;
	m->w.dev_path = m->mnt;
	m->w.opts.transport = TRANSPORT_URING;
	m->w.destroyed = true;		/* no filesystem: SYNCFS has nothing to write */
	m->se = fuse_session_new(&args, &t_ops, sizeof(t_ops), &m->w);
	if (!m->se)
		return -EINVAL;
	if (fuse_session_mount(m->se, m->mnt))
		return -EIO;
	m->w.se = m->se;
	if (fuse_io_install(&m->w, m->se) || fuse_io_start(&m->w))
		return -EIO;
	if (pthread_create(&m->loop, NULL, t_loop, m))
		return -EAGAIN;
	m->looping = true;
	return 0;
}

/* What /.wbcfs/transport would print: "uring" and the requests served so far. */
static bool t_uring(struct t_mount *m, unsigned long *requests)
{
	char buf[128];
	const char *p;

	fuse_io_transport_show(&m->w, buf, sizeof(buf));
	if (strncmp(buf, "uring\n", 6))
		return false;
	p = strstr(buf, "requests ");
	*requests = p ? strtoul(p + 9, NULL, 10) : 0;
	return true;
}

/* Stats of the root, each a GETATTR (attributes are not cached). */
static bool t_stats(struct t_mount *m, int nr)
{
	struct stat st;
	int i;

	for (i = 0; i < nr; i++)
		if (stat(m->mnt, &st) || !S_ISDIR(st.st_mode))
			return false;
	return true;
}

/*
 * Unmount as main.c's teardown does once the loop has ended: the unmount
 * aborts a plain fuse connection, which ends the loop and the rings.
 */
static void t_unmount(struct t_mount *m)
{
	if (m->looping) {
		umount2(m->mnt, MNT_DETACH);
		pthread_join(m->loop, NULL);
		m->looping = false;
	}
	fuse_io_stop(&m->w);
	fuse_io_transport_stop(&m->w);
	if (m->se) {
		fuse_session_unmount(m->se);
		fuse_session_destroy(m->se);
		m->se = NULL;
	}
	rmdir(m->mnt);
}

int main(void)
{
	static struct t_mount a, b;
	unsigned long ra = 0, rb = 0, rb2 = 0;
	int ret;

	if (geteuid() || access("/dev/fuse", R_OK | W_OK) || furing_kernel_enabled() != 1) {
		fprintf(stderr, "two_conns: needs root, /dev/fuse and FUSE io_uring on: skipped\n");
		return T_SKIP;
	}
	ret = t_mount(&a, 0);
	if (!ret)
		ret = t_mount(&b, 1);
	if (ret) {
		fprintf(stderr, "two_conns: cannot mount (%s): skipped\n", strerror(-ret));
		t_unmount(&b);
		t_unmount(&a);
		return T_SKIP;
	}
	/* the first stat waits for INIT, after whose reply the rings start */
	t_check(t_stats(&a, 1) && t_stats(&b, 1), "stat of the mounts");
	t_check(t_uring(&a, &ra), "mount a is not served over io_uring");
	t_check(t_uring(&b, &rb), "mount b is not served over io_uring");
	t_check(a.w.fio != b.w.fio, "the mounts share their connection state");
	t_check(t_stats(&a, 20) && t_stats(&b, 20), "stat over the rings");
	t_uring(&a, &ra);
	t_uring(&b, &rb);
	t_check(ra >= 20, "mount a's rings served %lu of 20 requests", ra);
	t_check(rb >= 20, "mount b's rings served %lu of 20 requests", rb);

	/* a goes; b keeps its rings and serves on */
	t_unmount(&a);
	t_check(a.w.fio == NULL, "mount a's connection state not freed");
	t_check(t_stats(&b, 20), "stat of mount b after a's unmount");
	t_check(t_uring(&b, &rb2), "mount b lost io_uring with a's unmount");
	t_check(rb2 >= rb + 20, "mount b's rings served %lu of 20 after a's unmount", rb2 - rb);
	t_unmount(&b);
	if (failures)
		return 1;
	printf("two_conns: two mounts in one process, each on its own io_uring queues: ok "
	       "(ring requests: a %lu, b %lu, b after a's unmount %lu)\n", ra, rb, rb2);
	return 0;
}
