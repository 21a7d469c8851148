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

#include "wbcfs/devlog.h"
#include "fuse_uring.h"
#include "wbfs_i.h"

struct cmdline {
	const char *dev;
	const char *mnt;
	bool help, version;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: wbcfs DEVICE MOUNTPOINT [-o option[,option...]] [-f] [-d]\n"
		"       mount -t fuse.wbcfs DEVICE MOUNTPOINT -o option,...\n\n"
		"Mounts the ext4 filesystem on DEVICE (a block device or an image file)\n"
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

/* The mount options libfuse sees: ours first, then the user's pass-through. */
static int fuse_args_build(struct fuse_args *args, const struct wbfs *w, const char *dev)
{
	char opts[OPTIONS_FUSE_MAX + 2 * PATH_MAX + 256], fsname[2 * PATH_MAX];
	size_t n = 0;

	/* libfuse splits options at commas: escape them in the device path */
	for (; *dev && n + 2 < sizeof(fsname); dev++) {
		if (*dev == ',' || *dev == '\\')
			fsname[n++] = '\\';
		fsname[n++] = *dev;
	}
	fsname[n] = '\0';
	snprintf(opts, sizeof(opts), "fsname=%s,subtype=wbcfs,default_permissions%s%s%s%s%s",
		 fsname, w->is_blkdev ? ",blkdev,blksize=4096" : "", w->ro ? ",ro" : "",
		 w->opts.allow_other ? ",allow_other" : "",
		 w->opts.fuse_opts[0] ? "," : "", w->opts.fuse_opts);
	if (fuse_opt_add_arg(args, "wbcfs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, opts))
		return -ENOMEM;
	if (w->opts.debug && fuse_opt_add_arg(args, "-d"))
		return -ENOMEM;
	return 0;
}

static int serve(struct wbfs *w, struct fuse_session *se)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int ret;

	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, 1);
	fuse_loop_cfg_set_max_threads(cfg, w->opts.max_threads);
	fuse_loop_cfg_set_idle_threads(cfg, (w->opts.max_threads + 1) / 2);
	ret = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return ret;
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

	if (!realpath(c->dev, dev)) {
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

/* The write-path counters of /.wbcfs/vmstat, also in the daemon's log (-f). */
static void log_stats(struct wbfs *w, const char *dev)
{
	fprintf(stderr, "wbcfs: %s: nr_parallel_writes_max %ld nr_inval_sent %ld\n", dev,
		atomic_load(&w->stats.nr_parallel_writes_max),
		atomic_load(&w->stats.nr_inval_sent));
}

/*
 * transport=uring is a promise: refuse to mount, before anything is
 * opened, when the kernel would not keep it. (auto just asks in INIT.)
 */
static int transport_check(const struct cmdline *c, const struct wbcfs_options *o)
{
	int on;

	if (o->transport != TRANSPORT_URING)
		return 0;
	on = furing_kernel_enabled();
	if (on > 0)
		return 0;
	if (on == 0)
		fprintf(stderr, "wbcfs: %s: transport=uring: FUSE over io_uring is off in this "
			"kernel (echo Y > /sys/module/fuse/parameters/enable_uring)\n", c->dev);
	else
		fprintf(stderr, "wbcfs: %s: transport=uring: this kernel has no FUSE over "
			"io_uring (6.14+ with CONFIG_FUSE_IO_URING)\n", c->dev);
	return -EOPNOTSUPP;
}

static int run(struct cmdline *c, struct wbcfs_options *o, int notify_fd)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct wbfs *w = calloc(1, sizeof(*w));
	struct fuse_session *se = NULL;
	int ret;

	if (!w)
		return 1;
	ret = transport_check(c, o);
	if (ret)
		goto out_free;
	/* before wbfs_open: the first write (marking the filesystem in use) is logged too */
	if (o->write_log[0]) {
		ret = devlog_open(o->write_log);
		if (ret) {
			fprintf(stderr, "wbcfs: write_log: cannot create %s: %s\n", o->write_log,
				strerror(-ret));
			goto out_free;
		}
	}
	/* before wbfs_open: the mount's own libext2fs work is counted too */
	if (o->lockstat)
		lockstat_enable(true);
	ret = wbfs_open(w, c->dev, o);
	if (ret)
		goto out_free;
	ctl_mount_check(w);
	ret = fuse_args_build(&args, w, c->dev);
	if (!ret) {
		se = fuse_session_new(&args, &wbfs_ops, sizeof(wbfs_ops), w);
		ret = se ? 0 : -EINVAL;
	}
	if (!ret && fuse_session_mount(se, c->mnt)) {
		fprintf(stderr, "wbcfs: %s: cannot mount on %s\n", c->dev, c->mnt);
		ret = -EIO;
	}
	if (ret)
		goto out_close;
	w->se = se;
	if (wbfs_fuse_io_install(w, se))
		fprintf(stderr, "wbcfs: %s: FUSE channel hooks not installed: no syncfs, "
			"no shared mmap, no parallel writes\n", c->dev);
	if (wbfs_inval_start(w))
		fprintf(stderr, "wbcfs: %s: no page cache notifier thread: shared mmaps "
			"may see stale data\n", c->dev);
	if (wbfs_fuse_io_start(w))
		fprintf(stderr, "wbcfs: %s: no timer for throttled replies: throttled "
			"writers hold a FUSE worker while they pause\n", c->dev);
	fuse_set_signal_handlers(se);
	notify_parent(notify_fd, 0, true);
	if (!o->foreground)
		chdir("/");
	ret = serve(w, se);
	if (ret > 0) {
		/* the loop ended on SIGTERM/SIGINT/SIGHUP: a clean shutdown */
		fprintf(stderr, "wbcfs: %s: signal %d, writing back and unmounting\n",
			c->dev, ret);
		ret = 0;
	}
	fuse_remove_signal_handlers(se);
	wbfs_fuse_io_stop(w);
	/*
	 * Before the unmount: the rings' commands hold the device open, and
	 * fuse_session_unmount relies on closing it to end the connection
	 * before umount2 (else a fuseblk umount sends DESTROY and waits for a
	 * reply nobody will give).
	 */
	wbfs_fuse_io_transport_stop(w);
	fuse_session_unmount(se);
	wbfs_inval_stop(w);
	log_stats(w, c->dev);
out_close:
	if (!w->destroyed) {
		w->destroyed = true;
		w->close_ret = wbfs_close(w);
	}
	/* data lost or metadata unwritten at unmount: a non-zero exit */
	if (w->close_ret && !ret)
		ret = w->close_ret;
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
out_free:
	devlog_close();		/* every thread that writes has stopped */
	free(w);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct wbcfs_options o;
	struct cmdline c = {0};
	int notify_fd = -1;

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
	if (!o.foreground)
		notify_fd = daemonize_early();
	return run(&c, &o, notify_fd);
}
