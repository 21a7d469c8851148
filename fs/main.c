// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * wbcfs entry point: command line, mount, daemonizing and the FUSE loop.
 * The filesystem is opened and checked before anything is mounted, so a
 * bad device or option fails with a one-line message and writes nothing.
 * The daemon forks before any thread starts (threads do not survive a
 * fork); the parent waits for the child's word that the mount succeeded
 * and exits with its status, as mount.fuse3 and fstab expect.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	char opts[OPTIONS_FUSE_MAX + 512];

	snprintf(opts, sizeof(opts), "fsname=%s,subtype=wbcfs,default_permissions%s%s%s%s%s",
		 dev, w->is_blkdev ? ",blkdev,blksize=4096" : "", w->ro ? ",ro" : "",
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
	fuse_loop_cfg_set_max_threads(cfg, 16);
	fuse_loop_cfg_set_idle_threads(cfg, 8);
	ret = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return ret;
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

static int run(struct cmdline *c, struct wbcfs_options *o, int notify_fd)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct wbfs *w = calloc(1, sizeof(*w));
	struct fuse_session *se = NULL;
	int ret;

	if (!w)
		return 1;
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
		fprintf(stderr, "wbcfs: %s: syncfs hook not installed; sync(2) will not reach wbcfs\n", c->dev);
	fuse_set_signal_handlers(se);
	notify_parent(notify_fd, 0, true);
	if (!o->foreground)
		chdir("/");
	ret = serve(w, se);
	fuse_remove_signal_handlers(se);
	fuse_session_unmount(se);
out_close:
	if (!w->destroyed) {
		w->destroyed = true;
		if (wbfs_close(w) && !ret)
			ret = -EIO;
	}
	if (se)
		fuse_session_destroy(se);
	fuse_opt_free_args(&args);
out_free:
	free(w);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct wbcfs_options o;
	struct cmdline c = {0};
	int notify_fd = -1;

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
	if (!o.foreground)
		notify_fd = daemonize_early();
	return run(&c, &o, notify_fd);
}
