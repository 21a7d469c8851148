// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A domain's socket: the daemon's side (the signal thread, the listening
 * socket and the server thread that mounts what joiners send) and the
 * joiner's (domain_join). Apart from domain.c's mounts and cache because
 * this is the protocol between two processes, its message and answers
 * (described at the head of domain.c), and neither needs the other's
 * internals beyond struct wbfs_domain.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/lib/list.h"
#include "daemon_i.h"

#define JOIN_MAGIC "wbcfs-join"
#define JOIN_MSG_MAX 16384
#define JOIN_RETRY 2		/* answer: the daemon is ending, start the domain anew */
#define JOIN_WAIT_MS 30000	/* a starting daemon may replay a journal first */
#define STOP_KICK_MS 100	/* how often a stopping loop is nudged */

/* ---- the daemon: signals and joiners -------------------------------------- */

/* Ask every serving mount to end, and keep nudging until they have. */
void *domain_sig_thread(void *arg)
{
	struct wbfs_domain *d = arg;
	struct dmount *m;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigwait(&set, &sig))
		return NULL;
	ls_mutex_lock(&d->lock, &lc_domain_lock);
	if (!d->closing)
		fprintf(stderr, "wbcfs: signal %d: every mount of the daemon ends\n", sig);
	d->stopping = true;
	while (d->nr_mounts) {
		list_for_each_entry(m, &d->mounts, link) {
			if (!m->serving)
				continue;
			m->stopping = true;
			fuse_session_exit(m->se);
			pthread_kill(m->thread, SIGUSR2);
		}
		ls_mutex_unlock(&d->lock);
		usleep(STOP_KICK_MS * 1000);
		ls_mutex_lock(&d->lock, &lc_domain_lock);
	}
	ls_mutex_unlock(&d->lock);
	return NULL;
}

/* A joiner's standard error, tee'd into the daemon's own. */
static ssize_t tee_write(void *cookie, const char *buf, size_t len)
{
	int fd = (int)(intptr_t)cookie;

	if (write(fd, buf, len) < 0)
		(void)0;	/* a joiner that went away still gets its mount */
	fwrite(buf, 1, len, stderr);
	fflush(stderr);
	return (ssize_t)len;
}

/* Parse a join message; NULL-terminated pointers into @buf. */
static int join_parse(char *buf, size_t len, char **dev, char **mnt, char **optv, int max_opts)
{
	char *p = buf, *end = buf + len;
	int n = 0;

	if (len == 0 || buf[len - 1] != '\0' || strcmp(p, JOIN_MAGIC))
		return -EPROTO;
	p += strlen(p) + 1;
	if (p >= end)
		return -EPROTO;
	*dev = p;
	p += strlen(p) + 1;
	if (p >= end)
		return -EPROTO;
	*mnt = p;
	p += strlen(p) + 1;
	while (p < end && n < max_opts) {
		optv[n++] = p;
		p += strlen(p) + 1;
	}
	if (p < end)
		return -E2BIG;
	optv[n] = NULL;
	return n;
}

/* Mount a joiner's device: its options over the domain's, checked. */
static int join_mount(struct wbfs_domain *d, char *dev, char *mnt, char **optv, int n)
{
	/* [0] the domain's options as they are now, [1] the joiner's over them */
	struct wbcfs_options *live = malloc(2 * sizeof(*live)), *o = live + 1;
	const char *differs;
	char err[256];
	int i, ret = 0;

	if (!live)
		return -ENOMEM;
	/* tunables may have been changed live: the cache's own are the domain's */
	*live = d->opts;
	options_domain_seed(live, &d->opts, &d->cache->tun);
	options_default(o);
	options_domain_seed(o, live, NULL);
	for (i = 0; i < n && !ret; i++) {
		ret = options_parse(o, optv[i], err, sizeof(err));
		if (ret)
			fprintf(msg_stream(), "wbcfs: %s\n", err);
	}
	if (!ret) {
		ret = options_check(o, err, sizeof(err));
		if (ret)
			fprintf(msg_stream(), "wbcfs: %s\n", err);
	}
	differs = ret ? NULL : options_domain_conflict(live, o);
	if (differs) {
		fprintf(msg_stream(), "wbcfs: %s: %s belongs to domain %s and differs from its "
			"value there (leave it out when joining)\n", dev, differs, d->name);
		ret = -EINVAL;
	} else if (!ret && o->write_log[0]) {
		fprintf(msg_stream(), "wbcfs: %s: write_log is only for a domain's first device\n",
			dev);
		ret = -EINVAL;
	} else if (!ret && d->opts.write_log[0]) {
		/* the log is the first device's: another's writes would corrupt it */
		fprintf(msg_stream(), "wbcfs: %s: domain %s records a write log of its "
			"first device: no other device may join it\n", dev, d->name);
		ret = -EBUSY;
	}
	if (!ret)
		ret = domain_mount(d, dev, mnt, o);
	free(live);
	return ret;
}

/* The last mount is gone or a signal ends them all: no more joiners. */
static bool domain_ending(struct wbfs_domain *d)
{
	bool ending;

	ls_mutex_lock(&d->lock, &lc_domain_lock);
	ending = d->stopping || d->closing;
	ls_mutex_unlock(&d->lock);
	return ending;
}

static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return false;
	return cr.uid == 0 || cr.uid == getuid();
}

static void join_serve(struct wbfs_domain *d, int cfd)
{
	char *buf = malloc(JOIN_MSG_MAX), *dev = NULL, *mnt = NULL, *optv[256];
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, JOIN_MSG_MAX };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	cookie_io_functions_t tee = { .write = tee_write };
	FILE *msg_to = NULL;
	struct cmsghdr *cm;
	int err_fd = -1, n;
	ssize_t len;
	char status = 1;

	if (!buf || !peer_allowed(cfd))
		goto out;
	len = recvmsg(cfd, &mh, MSG_CMSG_CLOEXEC);
	if (len <= 0)
		goto out;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&err_fd, CMSG_DATA(cm), sizeof(int));
	if (err_fd >= 0)
		msg_to = fopencookie((void *)(intptr_t)err_fd, "w", tee);
	if (msg_to) {
		setvbuf(msg_to, NULL, _IONBF, 0);
		msg_redirect(msg_to);
	}
	n = join_parse(buf, (size_t)len, &dev, &mnt, optv, 255);
	if (n < 0)
		fprintf(msg_stream(), "wbcfs: domain %s: a malformed request to join\n", d->name);
	else if (domain_ending(d))
		status = JOIN_RETRY;	/* the joiner waits for us to go, then starts anew */
	else if (join_mount(d, dev, mnt, optv, n) == 0)
		status = 0;
out:
	if (msg_to) {
		msg_redirect(NULL);
		fclose(msg_to);
	}
	if (err_fd >= 0)
		close(err_fd);
	if (write(cfd, &status, 1) != 1)
		(void)0;	/* the joiner is gone; the mount (if any) stays */
	close(cfd);
	free(buf);
}

void *domain_server_thread(void *arg)
{
	struct wbfs_domain *d = arg;
	int cfd;

	for (;;) {
		cfd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;	/* shut down by domain_run */
		}
		join_serve(d, cfd);
	}
}

/* ---- the joining side ------------------------------------------------------ */

int domain_sock_path(const char *name, const char *ext, char *out, size_t size)
{
	int n = snprintf(out, size, DOMAIN_RUN_DIR "/%s.%s", name, ext);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* 0 joined, DOMAIN_JOIN_REFUSED, or -errno (no daemon answers). */
static int join_send(const char *path, const char *dev, const char *mnt, char *const *optv,
		     int optc)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char *buf = malloc(JOIN_MSG_MAX), cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = { buf, 0 };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	const char *parts[3] = { JOIN_MAGIC, dev, mnt };
	size_t len = 0, l;
	int fd, i, errfd = 2, ret;
	char status;

	if (!buf)
		return -ENOMEM;
	for (i = 0; i < 3 + optc; i++) {
		const char *s = i < 3 ? parts[i] : optv[i - 3];

		l = strlen(s) + 1;
		if (len + l > JOIN_MSG_MAX) {
			free(buf);
			return -E2BIG;
		}
		memcpy(buf + len, s, l);
		len += l;
	}
	iov.iov_len = len;
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &errfd, sizeof(int));
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		goto out;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		goto out;
	}
	if (sendmsg(fd, &mh, 0) != (ssize_t)len) {
		ret = -errno;
		goto out;
	}
	/* the daemon answers once the mount is up, or refused */
	if (read(fd, &status, 1) != 1)
		ret = -ECONNRESET;
	else
		ret = status == JOIN_RETRY ? -EAGAIN : status ? DOMAIN_JOIN_REFUSED : 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

int domain_join(const char *name, const char *dev, const char *mnt, char *const *optv, int optc,
		int *lock_fd)
{
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)], lock[PATH_MAX];
	struct timespec t0, t;
	int ret, fd;

	*lock_fd = -1;
	if (domain_sock_path(name, "sock", sock, sizeof(sock)) ||
	    domain_sock_path(name, "lock", lock, sizeof(lock))) {
		fprintf(stderr, "wbcfs: domain %s: name too long\n", name);
		return DOMAIN_JOIN_REFUSED;
	}
	if (mkdir(DOMAIN_RUN_DIR, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "wbcfs: domain %s: cannot create %s: %s\n", name, DOMAIN_RUN_DIR,
			strerror(errno));
		return DOMAIN_JOIN_REFUSED;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ret = join_send(sock, dev, mnt, optv, optc);
		if (ret >= 0)
			return ret;
		if (ret == -E2BIG) {
			fprintf(stderr, "wbcfs: domain %s: options too long to send\n", name);
			return DOMAIN_JOIN_REFUSED;
		}
		/* nobody answered: whoever holds the lock runs (or starts) it */
		fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			fprintf(stderr, "wbcfs: domain %s: %s: %s\n", name, lock, strerror(errno));
			return DOMAIN_JOIN_REFUSED;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			struct stat a, b;

			/* the daemon that held it may have removed it on its way out */
			if (fstat(fd, &a) == 0 && stat(lock, &b) == 0 && a.st_ino == b.st_ino &&
			    a.st_dev == b.st_dev) {
				*lock_fd = fd;
				return DOMAIN_JOIN_START;
			}
			close(fd);
			continue;
		}
		close(fd);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 > JOIN_WAIT_MS) {
			fprintf(stderr, "wbcfs: domain %s: its daemon does not answer on %s\n",
				name, sock);
			return DOMAIN_JOIN_REFUSED;
		}
		usleep(100 * 1000);	/* it is starting, or its last mount is ending */
	}
}

int domain_listen_on(struct wbfs_domain *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (domain_sock_path(d->name, "sock", d->sock_path, sizeof(d->sock_path)))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, d->sock_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(d->sock_path);	/* we hold the lock: a socket there is stale */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(d->sock_path, 0600) < 0 ||
	    listen(fd, 16) < 0) {
		int ret = -errno;

		close(fd);
		unlink(d->sock_path);
		return ret;
	}
	d->listen_fd = fd;
	return 0;
}
