// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * wbcfs entry point: command line, mount, daemonizing and the FUSE loop.
 * The filesystem is opened and checked before anything is mounted, so a
 * bad device or option fails with a one-line message and writes nothing.
 * The daemon forks before any thread starts (threads do not survive a
 * fork); the parent waits for the child's word that the mount succeeded
 * and exits with its status, as mount.fuse3 and fstab expect. Once
 * detached, what the daemon prints on standard error (writeback errors,
 * data lost at unmount) goes to syslog instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "daemon_i.h"

#define CMDLINE_OPTS_MAX 64

struct cmdline {
	const char *dev;
	const char *mnt;
	bool help, version;
	char *optv[CMDLINE_OPTS_MAX];	/* the -o strings as given, for a domain join */
	int optc;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: wbcfs DEVICE MOUNTPOINT [-o option[,option...]] [-f] [-d]\n"
		"       mount -t fuse.wbcfs DEVICE MOUNTPOINT -o option,...\n\n"
		"Mounts the ext4 filesystem on DEVICE (a block device, an image file, or an\n"
		"NBD export: nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH)\n"
		"with its own page cache and writeback in user space.\n\n"
		"  -f            stay in the foreground\n"
		"  -d            foreground, with FUSE debug output\n"
		"  -o OPTIONS    comma-separated mount options (below)\n"
		"  -h, --help    this text\n"
		"  -V, --version the version\n\n"
		"Options (default in brackets):\n");
	options_usage(out);
}

static int parse_cmdline(int argc, char **argv, struct cmdline *c, struct wbcfs_options *o)
{
	char err[256];
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			c->help = true;
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			c->version = true;
		} else if (!strcmp(a, "-f")) {
			o->foreground = true;
		} else if (!strcmp(a, "-d")) {
			o->foreground = o->debug = true;
		} else if (!strncmp(a, "-o", 2)) {
			const char *opts = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);

			if (!opts) {
				fprintf(stderr, "wbcfs: -o needs an argument\n");
				return -EINVAL;
			}
			if (options_parse(o, opts, err, sizeof(err))) {
				fprintf(stderr, "wbcfs: %s\n", err);
				return -EINVAL;
			}
			if (c->optc == CMDLINE_OPTS_MAX) {
				fprintf(stderr, "wbcfs: more than %d -o arguments\n",
					CMDLINE_OPTS_MAX);
				return -EINVAL;
			}
			c->optv[c->optc++] = (char *)opts;
		} else if (a[0] == '-') {
			fprintf(stderr, "wbcfs: unknown argument '%s'\n", a);
			return -EINVAL;
		} else if (!c->dev) {
			c->dev = a;
		} else if (!c->mnt) {
			c->mnt = a;
		} else {
			fprintf(stderr, "wbcfs: unexpected argument '%s'\n", a);
			return -EINVAL;
		}
	}
	return 0;
}

/* stderr of a detached daemon: one syslog record per line. */
static ssize_t syslog_write(void *cookie, const char *buf, size_t len)
{
	int n = (int)len;

	if (n && buf[n - 1] == '\n')
		n--;
	if (n)
		syslog(LOG_ERR, "%.*s", n, buf);
	return (ssize_t)len;
}

static void stderr_to_syslog(void)
{
	cookie_io_functions_t io = { .write = syslog_write };
	FILE *f;

	openlog("wbcfs", LOG_PID, LOG_DAEMON);
	f = fopencookie(NULL, "w", io);
	if (!f)
		return;
	setvbuf(f, NULL, _IOLBF, 0);
	stderr = f;
}

/* Tell the waiting parent how the mount went, then detach. */
static void notify_parent(int fd, char status, bool detach)
{
	int devnull;

	if (fd < 0)
		return;
	if (write(fd, &status, 1) != 1)
		perror("wbcfs: notify parent");
	close(fd);
	if (!detach)
		return;
	devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		if (devnull > 2)
			close(devnull);
	}
	stderr_to_syslog();
}

/* Fork: the parent exits with the child's mount status. Returns the pipe fd in the child. */
static int daemonize_early(void)
{
	int pfd[2];
	char status = 1;
	pid_t pid;

	if (pipe(pfd) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(pfd[1]);
		if (read(pfd[0], &status, 1) != 1)
			status = 1;
		_exit(status);
	}
	close(pfd[0]);
	setsid();
	return pfd[1];
}

/*
 * The daemon changes directory to / and the kernel keeps fsname as given:
 * both paths are made absolute before anything is opened or mounted.
 */
static int absolute_paths(struct cmdline *c)
{
	static char dev[PATH_MAX], mnt[PATH_MAX];

	if (rbdev_is_spec(c->dev)) {
		/* an RBD image's name: no path */
		if (snprintf(dev, sizeof(dev), "%s", c->dev) >= (int)sizeof(dev)) {
			fprintf(stderr, "wbcfs: %s: name too long\n", c->dev);
			return -1;
		}
	} else if (nbdev_is_uri(c->dev)) {
		/* an NBD URI; a relative socket= path is made absolute */
		const char *q = strstr(c->dev, "socket=");
		char cwd[PATH_MAX];
		int n;

		if (q && (q[-1] == '?' || q[-1] == '&') && q[7] != '/' && getcwd(cwd, sizeof(cwd)))
			n = snprintf(dev, sizeof(dev), "%.*s%s/%s", (int)(q + 7 - c->dev), c->dev,
				     cwd, q + 7);
		else
			n = snprintf(dev, sizeof(dev), "%s", c->dev);
		if (n >= (int)sizeof(dev)) {
			fprintf(stderr, "wbcfs: %s: URI too long\n", c->dev);
			return -1;
		}
	} else if (!realpath(c->dev, dev)) {
		fprintf(stderr, "wbcfs: %s: %s\n", c->dev, strerror(errno));
		return -1;
	}
	if (!realpath(c->mnt, mnt)) {
		fprintf(stderr, "wbcfs: mount point %s: %s\n", c->mnt, strerror(errno));
		return -1;
	}
	c->dev = dev;
	c->mnt = mnt;
	return 0;
}

/*
 * Start the domain (a mount of its own without domain=, or the first
 * device of a named one), or hand the device to the daemon running it.
 */
static int run(struct cmdline *c, struct wbcfs_options *o)
{
	struct wbfs_domain *d;
	int notify_fd = -1, lock_fd = -1, ret;

	if (o->domain[0]) {
		ret = domain_join(o->domain, c->dev, c->mnt, c->optv, c->optc, &lock_fd);
		if (ret != DOMAIN_JOIN_START)
			return ret ? 1 : 0;
	}
	/* before ext4_open: the first write (marking the filesystem in use) is logged too */
	if (o->write_log[0]) {
		ret = devlog_open(o->write_log);
		if (ret) {
			fprintf(stderr, "wbcfs: write_log: cannot create %s: %s\n", o->write_log,
				strerror(-ret));
			return 1;
		}
	}
	/* the daemon forks before any thread starts: threads do not survive a fork */
	if (!o->foreground)
		notify_fd = daemonize_early();
	d = domain_create(o, lock_fd);
	if (!d) {
		devlog_close();
		return 1;
	}
	ret = domain_mount(d, c->dev, c->mnt, o);
	if (ret) {
		domain_destroy(d);
		return 1;
	}
	notify_parent(notify_fd, 0, true);
	if (!o->foreground)
		chdir("/");
	domain_run(d);
	/* data lost or metadata unwritten at an unmount: a non-zero exit */
	return domain_destroy(d);
}

int main(int argc, char **argv)
{
	struct wbcfs_options o;
	struct cmdline c = {0};

	initialize_ext2_error_table();	/* libext2fs errors by name */
	options_default(&o);
	if (parse_cmdline(argc, argv, &c, &o))
		return 1;
	if (c.help) {
		usage(stdout);
		return 0;
	}
	if (c.version) {
		printf("wbcfs %s (libfuse %s)\n", WBCFS_VERSION, fuse_pkgversion());
		return 0;
	}
	if (!c.dev || !c.mnt) {
		usage(stderr);
		return 1;
	}
	if (absolute_paths(&c))
		return 1;
	return run(&c, &o);
}
