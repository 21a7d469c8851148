// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Cache domains (daemon_i.h). The daemon of a domain owns the cache; each
 * device in it is a struct wbfs with its own bdi, FUSE session and serving
 * thread. A mount ends on its own (umount of its mountpoint: its thread
 * writes it back and frees it) or with the daemon (a signal stops every
 * mount). The daemon exits after its last mount.
 *
 * Joining: a named domain listens on /run/wbcfs/NAME.sock (SOCK_SEQPACKET,
 * root or the daemon's own user only). A joiner sends one message,
 * "wbcfs-join\0DEV\0MNT\0OPT\0OPT...\0", with its standard error attached
 * (SCM_RIGHTS): what the daemon prints while mounting the device goes
 * there too, so a refusal reads as it would for a mount of its own. The
 * answer is one byte: 0 when the mount is up, 1 refused, 2 when the
 * daemon is ending (the joiner then waits for it to go and starts the
 * domain anew). /run/wbcfs/NAME.lock, held
 * by the daemon for its whole life (flock), decides who starts a domain
 * when several mounts race, and lets a stale socket left by a killed
 * daemon be recognised and replaced; the daemon removes it as it ends
 * (still holding it), and whoever locks a removed file tries again.
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

#include "wbcfs/blkdev.h"
#include "wbcfs/lib/list.h"
#include "wbcfs/cache/pressure.h"
#include "daemon_i.h"

LOCK_CLASS(lc_domain_lock, "domain_lock")
LOCK_CLASS(lc_bdis_lock_r, "bdis_lock(r)")
LOCK_CLASS(lc_bdis_lock_w, "bdis_lock(w)")

/* ---- the cache and the devices' bdis ------------------------------------ */

/* cache_ops.wakeup_flusher: reclaim and global background kicks reach every device. */
static void domain_wakeup_flusher(void *owner, long nr_pages, enum wb_reason why)
{
	struct wbfs_domain *d = owner;
	unsigned i;

	ls_rwlock_rdlock(&d->bdis_lock, &lc_bdis_lock_r);
	for (i = 0; i < d->nr_bdis; i++)
		bdi_wakeup(d->bdis[i]->bdi, nr_pages, why);
	ls_rwlock_unlock(&d->bdis_lock);
}

/* ---- memory pressure ------------------------------------------------------ */

/*
 * The watcher's hands on the cache: cache_set_target() reclaims clean
 * pages and gives them back to the kernel, writing dirty ones back first.
 */
static void domain_mem_set_target(void *arg, size_t pages, const char *reason, long pressure)
{
	cache_set_target(arg, pages, reason, pressure);
}

static size_t domain_mem_resident(void *arg)
{
	return cache_resident_pages(arg);
}

/* cache_min and cache_size, as /.wbcfs/ may have changed them */
static void domain_mem_bounds(void *arg, size_t *floor_pages, size_t *ceiling_pages)
{
	*floor_pages = cache_floor_pages(arg);
	*ceiling_pages = cache_ceiling_pages(arg);
}

static size_t domain_mem_dirty(void *arg)
{
	long n = atomic_load(&((struct cache *)arg)->stats.nr_dirty);

	return n > 0 ? (size_t)n : 0;
}

/*
 * The watcher of the domain's cache: its floor and ceiling are the cache's
 * (cache_min, cache_size); one line on the mount's standard error says
 * which signals this machine gives. Context: d->lock held.
 */
static void domain_memwatch_start(struct wbfs_domain *d, const struct wbcfs_options *o,
				  const char *dev)
{
	static const struct memwatch_ops ops = {
		.set_target = domain_mem_set_target,
		.resident_pages = domain_mem_resident,
		.dirty_pages = domain_mem_dirty,
		.bounds = domain_mem_bounds,
	};
	struct memwatch_config cfg;
	size_t floor, ceiling;
	int ret;

	floor = cache_floor_pages(d->cache);
	ceiling = cache_ceiling_pages(d->cache);
	if (!o->mem_watch)
		return;
	memwatch_config_default(&cfg);
	memctl_config_default(&cfg.ctl, PAGE_SIZE, floor, ceiling);
	cfg.ops = &ops;
	cfg.arg = d->cache;
	cfg.msg = msg_stream();
	ret = memwatch_start(&d->memwatch, &cfg);
	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: memory: cannot start the watcher: %s\n", dev,
			strerror(-ret));
}

/*
 * The daemon's OOM protection (README "Memory"): oom_score_adj=N as given,
 * or the default unless whoever started the daemon protected it more
 * already (a service manager's OOMScoreAdjust= wins over a default).
 */
static void domain_oom_protect(const struct wbcfs_options *o, const char *dev)
{
	char buf[16] = "";
	int fd, ret, cur = 0;

	if (!o->oom_score_adj_given) {
		fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0)
			cur = atoi(buf);
		if (fd >= 0)
			close(fd);
		if (cur <= o->oom_score_adj)
			return;
	}
	ret = mem_oom_score_adj_set(o->oom_score_adj);
	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: oom_score_adj=%d: %s%s\n", dev, o->oom_score_adj,
			strerror(-ret), ret == -EACCES ? " (lowering it needs CAP_SYS_RESOURCE)" : "");
}

struct memwatch *domain_memwatch(struct wbfs_domain *d)
{
	return d ? d->memwatch : NULL;
}

/*
 * Address space for the arena: the ceiling can be raised at run time
 * (/.wbcfs/cache_size) up to the machine's RAM, or the mount's cache_size
 * if larger. Reserving costs nothing resident: the arena and the page
 * descriptors (64 bytes a page) are MAP_NORESERVE and touched only for
 * pages in use.
 */
static size_t cache_reserve_bytes(size_t size)
{
	size_t ram = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);

	return ram > size ? ram : size;
}

/*
 * The zones: as the options say; by default one per NUMA node that has
 * memory, each bound to its node, or a single zone on a machine with one
 * node (zones only matter where memory is not uniform; zones=64M:960M
 * imitates a small DMA32 beside a large Normal zone).
 */
static void zones_config(const struct wbcfs_options *o, struct cache_config *cc, size_t *bytes,
			 int *node)
{
	char line[512] = "";
	FILE *f;
	int n;
	unsigned i;

	cc->nr_zones = o->nr_zones ? o->nr_zones : 1;
	if (o->nr_zones && o->zone_bytes[0]) {
		for (i = 0; i < o->nr_zones; i++)
			bytes[i] = (size_t)o->zone_bytes[i];
		cc->zone_bytes = bytes;
	}
	if (o->nr_zones)
		return;
	f = fopen("/sys/devices/system/node/has_memory", "r");
	if (!f)
		return;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	n = options_parse_nodelist(line, node, OPTIONS_ZONES_MAX);
	if (n > 1 && cc->size_bytes / (size_t)n >= OPTIONS_ZONE_MIN_BYTES) {
		cc->nr_zones = (unsigned)n;
		cc->zone_node = node;
	}
}

static int domain_cache(void *host, const struct wbcfs_options *o, const char *dev,
			struct cache **out, struct flusher_pool **pool)
{
	struct wbfs_domain *d = host;
	static const struct cache_ops cops = {
		.wakeup_flusher = domain_wakeup_flusher,
	};
	size_t zone_bytes[OPTIONS_ZONES_MAX];
	int zone_node[OPTIONS_ZONES_MAX];
	struct cache_config cc = {0};
	char err[256];
	int ret = 0;

	ls_mutex_lock(&d->lock, &lc_domain_lock);
	if (d->cache)
		goto out;
	/* the domain's first device: its options become the domain's */
	ret = options_check(o, err, sizeof(err));
	if (ret) {
		fprintf(msg_stream(), "wbcfs: %s\n", err);
		goto out;
	}
	cc.size_bytes = o->cache_size ? o->cache_size : mem_default_cache_size();
	cc.reserve_bytes = cache_reserve_bytes(cc.size_bytes);
	cc.min_bytes = o->cache_min ? o->cache_min : OPTIONS_CACHE_MIN_DEFAULT;
	if (cc.min_bytes > cc.size_bytes)
		cc.min_bytes = cc.size_bytes;	/* the default floor of a small cache */
	zones_config(o, &cc, zone_bytes, zone_node);
	cc.fair_zone_alloc = o->fair_zone_alloc;
	cc.zone_dirty = o->zone_dirty;
	cc.tunables = o->dirty;
	cc.ops = &cops;
	cc.owner = d;
	cc.start_kswapd = true;
	ret = cache_create(&d->cache, &cc);
	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: cannot create a cache of %zu bytes in %u zones: "
			"%s\n", dev, cc.size_bytes, cc.nr_zones, strerror(-ret));
	else {
		atomic_store(&d->cache->throttle.mode, (int)o->throttle);
		atomic_store(&d->cache->throttle.max_pause_ms, o->max_pause_ms);
	}
	if (!ret && o->flusher_model == FLUSHER_MODEL_PDFLUSH) {
		/* one pool for every device of the domain, as pdflush served all disks */
		struct flusher_pool_config pc = {
			.cache = d->cache, .name = d->name[0] ? d->name : dev,
			.engine = o->io_engine, .queue_depth = o->queue_depth,
			.min_threads = o->pdflush_min, .max_threads = o->pdflush_max,
		};

		ret = flusher_pool_create(&d->pool, &pc);
		if (ret) {
			fprintf(msg_stream(), "wbcfs: %s: cannot start the pdflush threads: %s\n",
				dev, strerror(-ret));
			cache_destroy(d->cache);
			d->cache = NULL;
		}
	}
out:
	*out = d->cache;
	*pool = d->pool;
	ls_mutex_unlock(&d->lock);
	return ret;
}

static void domain_attach(void *host, struct wbfs *w)
{
	struct wbfs_domain *d = host;
	struct wbfs **n;

	ls_rwlock_wrlock(&d->bdis_lock, &lc_bdis_lock_w);
	if (d->nr_bdis == d->cap_bdis) {
		n = realloc(d->bdis, (d->cap_bdis + 4) * sizeof(*n));
		if (!n) {
			/* its own kicks still reach it; only cache-wide ones miss it */
			ls_rwlock_unlock(&d->bdis_lock);
			return;
		}
		d->bdis = n;
		d->cap_bdis += 4;
	}
	d->bdis[d->nr_bdis++] = w;
	ls_rwlock_unlock(&d->bdis_lock);
}

static void domain_detach(void *host, struct wbfs *w)
{
	struct wbfs_domain *d = host;
	unsigned i;

	ls_rwlock_wrlock(&d->bdis_lock, &lc_bdis_lock_w);
	for (i = 0; i < d->nr_bdis; i++) {
		if (d->bdis[i] == w) {
			d->bdis[i] = d->bdis[--d->nr_bdis];
			break;
		}
	}
	ls_rwlock_unlock(&d->bdis_lock);
}

/* ext4/ asks the domain for its cache and tells it of the bdi through these */
static const struct ext4_host_ops domain_host_ops = {
	.get_cache = domain_cache,
	.attach = domain_attach,
	.detach = domain_detach,
};

/* ---- mounts --------------------------------------------------------------- */

/* The mount options libfuse sees: ours first, then the user's pass-through. */
static int fuse_args_build(struct fuse_args *args, const struct wbfs *w, const char *dev)
{
	char fsname[2 * PATH_MAX], opts[OPTIONS_FUSE_MAX + sizeof(fsname) + 256];
	size_t n = 0;

	/* fsname is split at commas by libfuse: escape them */
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

/*
 * Before anything is opened: with transport=auto or uring, a root daemon
 * on a kernel whose FUSE io_uring switch is off turns it on (one line
 * says so), as the switch alone keeps a stock kernel on /dev/fuse, which
 * serves dbench at half the rate. transport=uring is a promise: refuse
 * to mount when the switch stays off; auto then just asks in INIT and
 * gets /dev/fuse. transport=dev leaves the switch alone.
 */
static int transport_check(const char *dev, const struct wbcfs_options *o)
{
	int on, err = -EPERM;

	if (o->transport == TRANSPORT_DEV)
		return 0;
	on = furing_kernel_enabled();
	if (on == 0 && geteuid() == 0) {
		err = furing_kernel_enable();
		if (!err) {
			fprintf(msg_stream(), "wbcfs: %s: FUSE over io_uring turned on in the "
				"kernel (/sys/module/fuse/parameters/enable_uring was N)\n", dev);
			on = 1;
		}
	}
	if (on > 0 || o->transport != TRANSPORT_URING)
		return 0;
	if (on == 0)
		fprintf(msg_stream(), "wbcfs: %s: transport=uring: FUSE over io_uring is off in "
			"this kernel and cannot be turned on here (%s; as root: echo Y > "
			"/sys/module/fuse/parameters/enable_uring)\n", dev, strerror(-err));
	else
		fprintf(msg_stream(), "wbcfs: %s: transport=uring: this kernel has no FUSE over "
			"io_uring (6.14+ with CONFIG_FUSE_IO_URING)\n", dev);
	return -EOPNOTSUPP;
}

/* What the device is, to refuse mounting it twice in one domain. */
static int dev_identity(const char *dev, dev_t *id_dev, ino_t *id_ino)
{
	struct stat st;

	if (nbdev_is_uri(dev) || rbdev_is_spec(dev)) {
		/* an export (an image) is its URI (FNV-1a); no file has st_dev 0 */
		uint64_t h = 0xcbf29ce484222325ull;

		for (; *dev; dev++)
			h = (h ^ (unsigned char)*dev) * 0x100000001b3ull;
		*id_dev = 0;
		*id_ino = (ino_t)h;
		return 0;
	}
	if (stat(dev, &st) < 0)
		return -errno;
	if (S_ISBLK(st.st_mode)) {
		*id_dev = st.st_rdev;
		*id_ino = 0;
	} else {
		*id_dev = st.st_dev;
		*id_ino = st.st_ino;
	}
	return 0;
}

static void sigusr2_nop(int sig)
{
	(void)sig;
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

/* The write-path counters of /.wbcfs/vmstat, also in the daemon's log (-f). */
static void log_stats(struct wbfs *w, const char *dev)
{
	fprintf(stderr, "wbcfs: %s: nr_parallel_writes_max %ld nr_inval_sent %ld "
		"nr_store_sent %ld nr_store_kept %ld nr_store_unordered %ld\n", dev,
		atomic_load(&w->stats.nr_parallel_writes_max),
		atomic_load(&w->stats.nr_inval_sent), atomic_load(&w->stats.nr_store_sent),
		atomic_load(&w->stats.nr_store_kept), atomic_load(&w->stats.nr_store_unordered));
}

/* Write back and close a mount whose loop has ended; 0 or -errno. */
static int mount_end(struct dmount *m, bool mounted)
{
	struct wbfs *w = m->w;
	int ret = 0;

	if (mounted) {
		fuse_io_stop(w);
		/*
		 * Before the unmount: the rings' commands hold the device
		 * open, and fuse_session_unmount relies on closing it to end
		 * the connection before umount2 (else a fuseblk umount sends
		 * DESTROY and waits for a reply nobody will give).
		 */
		fuse_io_transport_stop(w);
		fuse_session_unmount(m->se);
		inval_stop(w);
		log_stats(w, m->dev);
	}
	if (!w->destroyed) {
		w->destroyed = true;
		w->close_ret = ext4_close(w);
	}
	ret = w->close_ret;
	if (m->se)
		fuse_session_destroy(m->se);
	fuse_opt_free_args(&m->args);
	return ret;
}

/* Remove @m from the domain: the last one out wakes domain_run. */
static void mount_put(struct dmount *m, int ret)
{
	struct wbfs_domain *d = m->d;

	ls_mutex_lock(&d->lock, &lc_domain_lock);
	if (!list_empty(&m->link))
		list_del_init(&m->link);
	if (ret)
		d->status = 1;
	if (--d->nr_mounts == 0)
		pthread_cond_broadcast(&d->cond);
	ls_mutex_unlock(&d->lock);
	free(m->w);
	free(m);
}

static void *mount_thread(void *arg)
{
	struct dmount *m = arg;
	sigset_t set;
	int ret;

	/* the signal thread nudges a stopping loop out of its wait with SIGUSR2 */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	ret = serve(m->w, m->se);
	ls_mutex_lock(&m->d->lock, &lc_domain_lock);
	if (m->stopping)
		fprintf(stderr, "wbcfs: %s: writing back and unmounting\n", m->dev);
	ls_mutex_unlock(&m->d->lock);
	(void)ret;
	mount_put(m, mount_end(m, true));
	return NULL;
}

/*
 * Take @m's place in the domain: refused while the domain ends, for a
 * device it already has, or on a mountpoint it already serves. Counted in
 * nr_mounts from here, so domain_run waits for it. 0 or -errno.
 */
static int mount_claim(struct wbfs_domain *d, struct dmount *m)
{
	struct dmount *o_m;
	int ret = 0;

	ls_mutex_lock(&d->lock, &lc_domain_lock);
	if (d->stopping || d->closing) {
		ret = -ESHUTDOWN;
		fprintf(msg_stream(), "wbcfs: %s: domain %s is shutting down\n", m->dev, d->name);
	}
	list_for_each_entry(o_m, &d->mounts, link) {
		if (ret)
			break;
		if (o_m->id_dev == m->id_dev && o_m->id_ino == m->id_ino) {
			fprintf(msg_stream(), "wbcfs: %s: already in domain %s (mounted on %s)\n",
				m->dev, d->name, o_m->mnt);
			ret = -EBUSY;
		} else if (!strcmp(o_m->mnt, m->mnt)) {
			fprintf(msg_stream(), "wbcfs: %s: domain %s already serves %s on %s\n",
				m->dev, d->name, o_m->dev, m->mnt);
			ret = -EBUSY;
		}
	}
	if (!ret) {
		list_add_tail(&m->link, &d->mounts);
		d->nr_mounts++;
	}
	ls_mutex_unlock(&d->lock);
	return ret;
}

int domain_mount(struct wbfs_domain *d, const char *dev, const char *mnt,
		 const struct wbcfs_options *o)
{
	struct dmount *m = calloc(1, sizeof(*m));
	struct wbfs *w = calloc(1, sizeof(*w));
	bool mounted = false;
	int ret;

	if (!m || !w || strlen(dev) >= sizeof(m->dev) || strlen(mnt) >= sizeof(m->mnt)) {
		free(m);
		free(w);
		return -ENOMEM;
	}
	list_init(&m->link);
	m->d = d;
	m->w = w;
	w->host_ops = &domain_host_ops;
	w->host = d;
	strcpy(m->dev, dev);
	strcpy(m->mnt, mnt);
	/* a joiner's strings live in its request: the mount keeps its own */
	dev = m->dev;
	mnt = m->mnt;
	ret = dev_identity(dev, &m->id_dev, &m->id_ino);
	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: %s\n", dev, strerror(-ret));
	else
		ret = mount_claim(d, m);
	if (ret) {
		free(m);
		free(w);
		return ret;
	}

	ret = transport_check(dev, o);
	/* before ext4_open: the mount's own libext2fs work is counted too */
	if (!ret && o->lockstat)
		lockstat_enable(true);
	if (!ret)
		ret = ext4_open(w, dev, o);
	if (ret) {
		w->destroyed = true;	/* nothing to close */
		goto fail;
	}
	ctl_mount_check(w);
	ret = fuse_args_build(&m->args, w, dev);
	if (!ret) {
		m->se = fuse_session_new(&m->args, &ops_table, sizeof(ops_table), w);
		ret = m->se ? 0 : -EINVAL;
	}
	if (!ret && fuse_session_mount(m->se, mnt)) {
		fprintf(msg_stream(), "wbcfs: %s: cannot mount on %s\n", dev, mnt);
		ret = -EIO;
	}
	if (ret)
		goto fail;
	mounted = true;
	w->se = m->se;
	if (fuse_io_install(w, m->se))
		fprintf(msg_stream(), "wbcfs: %s: FUSE channel hooks not installed: no syncfs, "
			"no shared mmap, no parallel writes\n", dev);
	if (inval_start(w))
		fprintf(msg_stream(), "wbcfs: %s: no memory for page cache notifications: "
			"shared mmaps may see stale data\n", dev);
	if (fuse_io_start(w))
		fprintf(msg_stream(), "wbcfs: %s: no timer for throttled replies: throttled "
			"writers hold a FUSE worker while they pause\n", dev);
	ret = -pthread_create(&m->thread, NULL, mount_thread, m);
	if (ret) {
		fprintf(msg_stream(), "wbcfs: %s: cannot start serving: %s\n", dev, strerror(-ret));
		goto fail;
	}
	ls_mutex_lock(&d->lock, &lc_domain_lock);
	m->serving = true;
	/* once the first mount is up: a refused one prints its one line only */
	if (!d->mem_started) {
		d->mem_started = true;
		domain_oom_protect(&d->opts, dev);
		domain_memwatch_start(d, &d->opts, dev);
	}
	ls_mutex_unlock(&d->lock);
	return 0;
fail:
	mount_end(m, mounted);
	mount_put(m, 0);	/* a refused mount loses nothing: not an error status */
	return ret;
}

/* ---- the domain's life ----------------------------------------------------- */

struct wbfs_domain *domain_create(const struct wbcfs_options *o, int lock_fd)
{
	struct wbfs_domain *d = calloc(1, sizeof(*d));
	struct sigaction sa = { .sa_handler = sigusr2_nop };
	sigset_t set;
	int ret;

	if (!d) {
		fprintf(stderr, "wbcfs: out of memory\n");
		return NULL;
	}
	/* the control directory is served beside every mount of the domain */
	ops_set_ctl(&ctl_hooks);
	strcpy(d->name, o->domain);
	d->opts = *o;
	d->lock_fd = lock_fd;
	d->listen_fd = -1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	pthread_rwlock_init(&d->bdis_lock, NULL);
	list_init(&d->mounts);
	if (d->name[0]) {
		ret = domain_listen_on(d);
		if (ret) {
			fprintf(stderr, "wbcfs: domain %s: cannot listen on %s: %s\n", d->name,
				d->sock_path, strerror(-ret));
			free(d);
			return NULL;
		}
	}
	/*
	 * Every thread started from here on (flushers, FUSE workers, rings)
	 * inherits these blocked: the signal thread alone takes them.
	 */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	sigaction(SIGUSR2, &sa, NULL);	/* no SA_RESTART: it interrupts the loop's wait */
	signal(SIGPIPE, SIG_IGN);
	return d;
}

void domain_run(struct wbfs_domain *d)
{
	d->have_sig_thread = pthread_create(&d->sig_thread, NULL, domain_sig_thread, d) == 0;
	if (d->listen_fd >= 0)
		d->have_server = pthread_create(&d->server, NULL, domain_server_thread, d) == 0;
	ls_mutex_lock(&d->lock, &lc_domain_lock);
	while (d->nr_mounts)
		lockstat_cond_wait(&d->cond, &d->lock);
	d->closing = true;
	ls_mutex_unlock(&d->lock);
	if (d->have_server) {
		shutdown(d->listen_fd, SHUT_RDWR);
		pthread_join(d->server, NULL);
	}
	if (d->have_sig_thread) {
		pthread_kill(d->sig_thread, SIGTERM);
		pthread_join(d->sig_thread, NULL);
	}
}

int domain_destroy(struct wbfs_domain *d)
{
	int status = d->status;

	if (d->listen_fd >= 0) {
		/* before the lock goes: a joiner that finds no socket starts anew */
		unlink(d->sock_path);
		close(d->listen_fd);
	}
	/* every member bdi is gone: the watcher, the pool, then the cache */
	memwatch_stop(d->memwatch);
	if (d->pool)
		flusher_pool_destroy(d->pool);
	if (d->cache)
		cache_destroy(d->cache);
	devlog_close();		/* every thread that writes has stopped */
	if (d->lock_fd >= 0) {
		char lock[PATH_MAX];

		/* removed while held: a joiner that locks the old file sees it gone */
		if (!domain_sock_path(d->name, "lock", lock, sizeof(lock)))
			unlink(lock);
		close(d->lock_fd);
	}
	free(d->bdis);
	pthread_rwlock_destroy(&d->bdis_lock);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
	return status;
}

int domain_show(struct wbfs_domain *d, char *buf, size_t size)
{
	struct dmount *m;
	size_t n;
	int r;

	ls_mutex_lock(&d->lock, &lc_domain_lock);
	r = snprintf(buf, size, "name %s\nmounts %u\n", d->name[0] ? d->name : "-",
		     d->nr_mounts);
	n = r > 0 ? (size_t)r : 0;
	list_for_each_entry(m, &d->mounts, link) {
		if (n >= size)
			break;
		r = snprintf(buf + n, size - n, "%s %s\n", m->dev, m->mnt);
		n += r > 0 ? (size_t)r : 0;
	}
	ls_mutex_unlock(&d->lock);
	return n < size ? (int)n : (int)size - 1;
}
