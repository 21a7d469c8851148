/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse/ internals. What the daemon sees is in include/wbcfs/fuse.h.
 *
 * FUSE over io_uring (kernel 6.14+): the transport of fuse_uring.c, and the
 * pieces of its ABI that the installed <linux/fuse.h> (protocol 7.38) lacks,
 * written from the kernel's Documentation/filesystems/fuse/fuse-io-uring.rst
 * and include/uapi/linux/fuse.h (protocol 7.42).
 *
 * A ring entry is two buffers the daemon registers once: a header buffer
 * (struct furing_req_header) and a payload buffer of at least the
 * connection's largest request (max_write, max_pages). A request arrives as
 * its fuse_in_header in in_out, its first argument (the per-op header,
 * e.g. fuse_write_in; empty for ops without one) in op_in, and every other
 * argument in the payload; the reply goes back as the fuse_out_header in
 * in_out and all of its arguments in the payload, with payload_sz set.
 */
#ifndef WBCFS_FUSE_FUSE_I_H
#define WBCFS_FUSE_FUSE_I_H

#include "wbcfs/fuse.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fuse_session;
struct furing;

#define FURING_OVER_IO_URING_FLAGS2 (1u << 9)	/* FUSE_OVER_IO_URING (1ULL << 41) */
#define FURING_IN_OUT_HEADER_SZ 128		/* FUSE_URING_IN_OUT_HEADER_SZ */
#define FURING_OP_IN_OUT_SZ 128			/* FUSE_URING_OP_IN_OUT_SZ */
#define FURING_CMD_REGISTER 1			/* FUSE_IO_URING_CMD_REGISTER */
#define FURING_CMD_COMMIT_AND_FETCH 2		/* FUSE_IO_URING_CMD_COMMIT_AND_FETCH */

/* struct fuse_uring_ent_in_out */
struct furing_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;	/* the request's unique: echoed in the commit */
	uint32_t payload_sz;	/* bytes used in the payload buffer */
	uint32_t padding;
	uint64_t reserved;
};

/* struct fuse_uring_req_header: the header buffer of a ring entry */
struct furing_req_header {
	char in_out[FURING_IN_OUT_HEADER_SZ];	/* fuse_in_header / fuse_out_header */
	char op_in[FURING_OP_IN_OUT_SZ];	/* the request's per-op header */
	struct furing_ent_in_out ring_ent_in_out;
};

/* struct fuse_uring_cmd_req: the command area of a 128-byte SQE */
struct furing_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

/*
 * Room kept in front of each payload buffer: a request is handed to
 * libfuse as one flat message, its fuse_in_header and op header written
 * just before the payload, so a WRITE's data is used where the kernel put
 * it. A page keeps the payload page-aligned.
 */
#define FURING_HEADROOM PAGE_SIZE

/**
 * Rebuild the flat message libfuse expects (fuse_in_header, op header,
 * payload) from a ring entry whose payload buffer has FURING_HEADROOM
 * bytes in front of it. Returns the message (inside that headroom) and
 * its length in @len, or NULL when the header is malformed.
 */
void *furing_req_flatten(const struct furing_req_header *h, char *payload, size_t payload_size,
			 size_t *len);

/**
 * Route a reply as libfuse writes it (fuse_out_header, then arguments, in
 * @iov) into a ring entry's header and payload buffers. Returns the
 * reply's length, or -EINVAL (too short) or -E2BIG (larger than the
 * payload buffer; an error reply -EIO is put there instead).
 */
ssize_t furing_reply_fill(struct furing_req_header *h, char *payload, size_t payload_size,
			  const struct iovec *iov, int count);

/**
 * Start the io_uring transport of one FUSE connection: @rings_per_queue
 * ring threads per possible CPU (the kernel's queues), each registering
 * @nr_ents entries with payload buffers of @payload_size bytes on the
 * connection's device @fd (after the INIT reply went out), busy-polling up
 * to @poll_us after a reply. Requests are served through
 * fuse_session_process_buf on @se, after @take(@take_arg, ...) (fuse_io.c's
 * pre-processing: true when it served the request itself);
 * @before_copy(@take_arg) (may be NULL), on the ring thread, just before
 * it lets the kernel copy requests into its entries, where the kernel
 * copies them only then (see furing_ring_setup). On success the
 * transport is stored in *@out, which must be NULL before.
 * Returns 0 when every ring registered, or -errno (EALREADY: *@out is
 * set; EINVAL, ENOMEM, or the kernel's refusal; the kernel keeps using
 * /dev/fuse).
 */
int furing_start(struct furing **out, struct fuse_session *se, int fd, size_t payload_size,
		 unsigned rings_per_queue, unsigned nr_ents, unsigned poll_us,
		 bool (*take)(void *arg, int fd, void *buf, size_t *len),
		 void (*before_copy)(void *arg), void *take_arg);
/**
 * Stop @fr's ring threads and free it (its session has ended); other
 * connections' transports go on. NULL: nothing to do.
 */
void furing_stop(struct furing *fr);
/** Is @fr (NULL: none) serving requests? */
bool furing_active(const struct furing *fr);
/** Queues, entries per queue, requests served so far, when @fr is active. */
void furing_shape(const struct furing *fr, unsigned *nr_queues, unsigned *nr_ents,
		  unsigned long *nr_requests);

/**
 * A reply written on this thread: when it answers the ring entry the
 * thread is serving, it goes into that entry (committed after the
 * handler returns) and true is returned with its length (or -errno) in
 * @ret; false: not a ring request, write it on the device. The thread's
 * entry names its connection: no argument is needed to find it.
 */
bool furing_reply(const struct iovec *iov, int count, ssize_t *ret);
/**
 * As furing_reply, but the entry is committed only by
 * furing_commit_held(): returns the entry, or NULL when the reply is not
 * for a ring entry.
 */
void *furing_hold(const struct iovec *iov, int count);
/** Commit a held entry's reply now (from any thread), on the entry's own connection. */
void furing_commit_held(void *ent);
/**
 * The ring entry of request @unique, which this thread serves, is set
 * aside: the handler returns without a reply, and the entry waits for
 * furing_reply_parked. Returns the entry, or NULL when the request did not
 * come through a ring (/dev/fuse: its reply is written there).
 */
void *furing_park(uint64_t unique);
/** The reply of a parked entry, from any thread: into the entry, then committed. */
ssize_t furing_reply_parked(void *ent, const struct iovec *iov, int count);

/*
 * The busy-poll gate of both transports (poll_us). Spinning after a reply
 * pays for a single synchronous client (dd, one fio job): its next request
 * comes a few microseconds later, to a thread still awake. With several
 * clients it costs a CPU they need: on 2 CPUs dbench 8 lost 15% to it, as
 * the spinner ran in every short gap between their requests. So a request
 * that arrives while another is being served closes the gate, and it
 * opens again only after SPIN_GATE_HOLD requests in a row were served
 * alone. @busy_before: requests being served when this one began.
 */
#define SPIN_GATE_HOLD 1024

static inline void spin_gate_note(_Atomic int *gate, int busy_before)
{
	if (busy_before > 0) {
		if (atomic_load_explicit(gate, memory_order_relaxed) != SPIN_GATE_HOLD)
			atomic_store_explicit(gate, SPIN_GATE_HOLD, memory_order_relaxed);
	} else if (atomic_load_explicit(gate, memory_order_relaxed) > 0) {
		atomic_fetch_sub_explicit(gate, 1, memory_order_relaxed);
	}
}

static inline bool spin_gate_open(_Atomic int *gate)
{
	return atomic_load_explicit(gate, memory_order_relaxed) <= 0;
}

/* ---- parked requests (fuse_io.c, park.c) ------------------------------ */

/*
 * The request this thread serves will be answered later, by another
 * thread (the ordinary fuse_reply_* on its fuse_req_t): its reply is then
 * routed to its ring entry or /dev/fuse by its unique. True when parked;
 * false: answer it here, as always (no hooks, or the connection is
 * stopping).
 */
bool fuse_io_park(struct wbfs *w);
/** The connection's syncers (NULL: none; handlers then sync in place). */
struct fpark *fuse_io_parker(struct wbfs *w);

struct fpark;
/** Start @w's syncer threads; NULL when they cannot start. */
struct fpark *park_start(struct wbfs *w);
/** Answer every request given to @k, then stop its threads and free it. NULL: nothing. */
void park_stop(struct fpark *k);
/*
 * Hand a request to the syncers, which answer it when it is durable:
 * fsync (fdatasync: @datasync) of @f; fsyncdir (@f NULL); a synchronous
 * write of @written bytes at pages [@first, @last] of @f. False: not
 * parked, the caller syncs and replies as before.
 */
bool park_fsync(struct wbfs *w, fuse_req_t req, struct wfile *f, bool datasync);
bool park_fsyncdir(struct wbfs *w, fuse_req_t req);
bool park_sync_write(struct wbfs *w, fuse_req_t req, struct wfile *f, uint64_t first,
		     uint64_t last, bool datasync, size_t written);
/* A writeback error of @f's file not yet reported to @f (errseq), once (ops_file.c). */
int ops_file_check_error(struct wfile *f);

/* ---- protocol extensions libfuse 3.14 does not parse (fuse_ext.c) ---- */

/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse_ext.c: FUSE_TMPFILE and FUSE_STATX, which libfuse 3.14 does not
 * know, for the channel hooks of fuse_io.c.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#define FEXT_TMPFILE 51		/* protocol 7.37 */
#define FEXT_STATX 52		/* protocol 7.39 */

struct wbfs;
struct fuse_attr_out;

/* A STATX request's birth time, looked up when the request arrives. */
struct fext_btime {
	struct timespec ts;
	bool valid;		/* the inode has i_crtime */
};

/** Is this request a FUSE_TMPFILE? */
bool fext_is_tmpfile(const void *buf, size_t len);
/** Serve a FUSE_TMPFILE and write its reply on @fd. */
void fext_tmpfile(struct wbfs *w, int fd, const void *buf, size_t len, bool dont_mask);
/**
 * Turn a FUSE_STATX request in @buf into the FUSE_GETATTR it begins with
 * and look up its birth time in @bt. Returns the request's new length, or
 * 0 when it is no (well-formed) FUSE_STATX and was left alone.
 */
size_t fext_statx_to_getattr(struct wbfs *w, void *buf, size_t len, struct fext_btime *bt);
/**
 * Write the GETATTR reply in @iov as the STATX reply the kernel waits
 * for (errors unchanged). Returns the length of @iov's message, or -1.
 */
ssize_t fext_statx_reply(int fd, const struct iovec *iov, int count, const struct fext_btime *bt);
/** The fuse_statx_out (at @sxo) for @ao and @bt. */
void fext_attr_to_statx(const struct fuse_attr_out *ao, const struct fext_btime *bt, void *sxo);

/* ---- inval.c ----------------------------------------------------------- */

/* ext4/'s hands on the kernel's caches and on held replies (w->kc) */
extern const struct ext4_kcache_ops fuse_kcache_ops;

/* ---- ops.c ------------------------------------------------------------- */

/* The control directory's hooks: ops_set_ctl's, or a table owning nothing. */
extern const struct ops_ctl_hooks *ops_ctl;

static inline bool ops_ctl_owns(fuse_ino_t ino)
{
	return ops_ctl->owns(ino);
}

/* A request on a control inode (daemon/ctl.c) is answered there. */
#define CTL_ROUTE(ino, op, ...)				\
	do {						\
		if (ops_ctl_owns(ino)) {			\
			ops_ctl->ops->op(__VA_ARGS__);	\
			return;				\
		}					\
	} while (0)

#define ATTR_TIMEOUT 10.0
#define ENTRY_TIMEOUT 10.0

static inline struct wbfs *req_wbfs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline struct wfile *fi_file(struct fuse_file_info *fi)
{
	return (struct wfile *)(uintptr_t)fi->fh;
}

/* Who sent @req: ids and, for an unprivileged caller, its groups. */
void ops_req_cred(fuse_req_t req, struct wbfs_cred *c);
/*
 * ext4's IS_DIRSYNC (ext4_handle_sync in create, mknod, mkdir, symlink,
 * link, unlink, rmdir, rename): a change of the entries of @dir, or of
 * @dir2 too for a rename (0: none), is committed before the reply. The
 * kernel's FUSE commits nothing for a dirsync mount: it is ours. An
 * error of the commit is the request's, as in ext4: the change is made,
 * not durable.
 */
int ops_dir_change_sync(struct wbfs *w, ext2_ino_t dir, ext2_ino_t dir2);
/*
 * A change of @ino's size, attributes, xattrs or flags, committed before
 * the reply when @ino is IS_SYNC (a sync mount, chattr +S) or @sync (the
 * change came through an O_SYNC or O_DSYNC descriptor): ext4 commits its
 * truncate, setxattr and setflags of an IS_SYNC inode (ext4_handle_sync)
 * and fallocate through an O_SYNC one; wbcfs commits its mode, owner and
 * times too, and an ftruncate through an O_SYNC descriptor.
 */
int ops_inode_change_sync(struct wbfs *w, ext2_ino_t ino, bool sync);
/* The control directory and its entries are never created, removed or renamed. */
int ops_check_new_name(struct wbfs *w, fuse_ino_t parent, const char *name);
/* ---- ops_file.c: the handlers of open files (ops_table) ----------------- */

/* Valid replies: fuse_reply_open, fuse_reply_err */
void ops_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Valid replies: fuse_reply_create, fuse_reply_err */
void ops_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		struct fuse_file_info *fi);
/* Valid replies: fuse_reply_iov, fuse_reply_buf, fuse_reply_err */
void ops_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	      struct fuse_file_info *fi);
/* Valid replies: fuse_reply_write, fuse_reply_err */
void ops_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv,
		   off_t off, struct fuse_file_info *fi);
/*
 * close(2): nothing is written here (but for auto_da_alloc, above), and a
 * writeback of the file that failed since it was opened (or since the
 * error was last reported to it, by fsync or an earlier close of a dup)
 * is reported, as EIO.
 * Valid replies: fuse_reply_err
 */
void ops_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Valid replies: fuse_reply_err */
void ops_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Valid replies: fuse_reply_err */
void ops_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
/* Valid replies: fuse_reply_err */
void ops_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		   struct fuse_file_info *fi);
/* Valid replies: fuse_reply_lseek, fuse_reply_err */
void ops_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	       struct fuse_file_info *fi);

#endif
