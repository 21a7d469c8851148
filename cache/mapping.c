// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Per-file page index: a radix tree of 64-way nodes with per-node tag
 * bitmaps (DIRTY, WRITEBACK, TOWRITE) propagated upward, so dirty and
 * writeback pages are found in index order without visiting clean ones.
 * Page state transitions live in page.c; page allocation in zone.c.
 *
 * Lock ordering:
 *   page lock (PG_locked, sleeping bit)      mapping_truncate, mapping_grab_page
 *     mapping->lock                          every tree walk and update
 *       zone->lock                           mapping_unlink_locked -> cache_lru_del
 *   cache->wait_lock and the page wait-queue bucket locks are leaves: nothing
 *   is taken under them. mapping->lock is never taken with a zone->lock held
 *   (reclaim drops the zone lock before mapping_try_remove_page), and no
 *   page reference is dropped under mapping->lock (the last put takes the
 *   zone lock and wait_lock).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"
#include "cache_i.h"

LOCK_CLASS(lc_mapping_lock, "mapping_lock")

#define RADIX_SHIFT 6
#define RADIX_SLOTS (1U << RADIX_SHIFT)
#define RADIX_MASK (RADIX_SLOTS - 1)
#define RADIX_MAX_HEIGHT 11	/* 66 bits >= 64 */

struct radix_node {
	void *slots[RADIX_SLOTS];
	uint64_t tags[NR_TAGS];		/* bit i: slot i (or its subtree) carries the tag */
	unsigned count;			/* non-NULL slots */
};

static uint64_t radix_max_index(unsigned height)
{
	if (height == 0)
		return 0;
	if (height * RADIX_SHIFT >= 64)
		return UINT64_MAX;
	return (1ULL << (height * RADIX_SHIFT)) - 1;
}

static unsigned slot_of(uint64_t index, unsigned level)
{
	unsigned shift = level * RADIX_SHIFT;

	return shift >= 64 ? 0 : (unsigned)((index >> shift) & RADIX_MASK);
}

void mapping_init(struct mapping *m, struct cache *c, const struct mapping_ops *ops, void *host)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->lock, NULL);
	m->cache = c;
	m->ops = ops;
	m->host = host;
}

static void radix_free(struct radix_node *n, unsigned height)
{
	unsigned i;

	if (!n)
		return;
	if (height > 1)
		for (i = 0; i < RADIX_SLOTS; i++)
			radix_free(n->slots[i], height - 1);
	free(n);
}

void mapping_destroy(struct mapping *m)
{
	radix_free(m->root, m->height);
	m->root = NULL;
	m->height = 0;
	pthread_mutex_destroy(&m->lock);
}

/* Grow the tree until @index fits. Context: m->lock. */
static int radix_extend(struct mapping *m, uint64_t index)
{
	while (index > radix_max_index(m->height)) {
		struct radix_node *n;
		unsigned t;

		if (!m->root) {
			m->height++;
			continue;
		}
		n = calloc(1, sizeof(*n));
		if (!n)
			return -ENOMEM;
		n->slots[0] = m->root;
		n->count = 1;
		for (t = 0; t < NR_TAGS; t++)
			if (m->root && ((struct radix_node *)m->root)->tags[t])
				n->tags[t] = 1;
		m->root = n;
		m->height++;
	}
	if (m->height == 0)
		m->height = 1;
	return 0;
}

static struct page *radix_lookup(struct mapping *m, uint64_t index)
{
	struct radix_node *n = m->root;
	unsigned level;

	if (!n || index > radix_max_index(m->height))
		return NULL;
	for (level = m->height - 1; level > 0; level--) {
		n = n->slots[slot_of(index, level)];
		if (!n)
			return NULL;
	}
	return n->slots[slot_of(index, 0)];
}

/* Insert @p at a free @index, growing the tree as needed. Context: m->lock. */
static int radix_insert(struct mapping *m, uint64_t index, struct page *p)
{
	struct radix_node *n;
	unsigned level;
	int ret = radix_extend(m, index);

	if (ret)
		return ret;
	if (!m->root) {
		m->root = calloc(1, sizeof(struct radix_node));
		if (!m->root)
			return -ENOMEM;
	}
	n = m->root;
	for (level = m->height - 1; level > 0; level--) {
		void **slot = &n->slots[slot_of(index, level)];

		if (!*slot) {
			*slot = calloc(1, sizeof(struct radix_node));
			if (!*slot)
				return -ENOMEM;	/* empty nodes left stay until destroy */
			n->count++;
		}
		n = *slot;
	}
	n->slots[slot_of(index, 0)] = p;
	n->count++;
	return 0;
}

/* Path of nodes from root to leaf for @index; returns depth filled or 0. */
static unsigned radix_path(struct mapping *m, uint64_t index, struct radix_node **path)
{
	struct radix_node *n = m->root;
	unsigned level, d = 0;

	if (!n || index > radix_max_index(m->height))
		return 0;
	for (level = m->height; level > 0; level--) {
		path[d++] = n;
		if (level == 1)
			break;
		n = n->slots[slot_of(index, level - 1)];
		if (!n)
			return 0;
	}
	return d;
}

static void radix_tag_set(struct mapping *m, uint64_t index, enum mapping_tag tag)
{
	struct radix_node *path[RADIX_MAX_HEIGHT + 1];
	unsigned d = radix_path(m, index, path), i;

	for (i = 0; i < d; i++)
		path[i]->tags[tag] |= 1ULL << slot_of(index, m->height - 1 - i);
}

static void radix_tag_clear(struct mapping *m, uint64_t index, enum mapping_tag tag)
{
	struct radix_node *path[RADIX_MAX_HEIGHT + 1];
	unsigned d = radix_path(m, index, path);

	while (d-- > 0) {
		path[d]->tags[tag] &= ~(1ULL << slot_of(index, m->height - 1 - d));
		if (path[d]->tags[tag])
			break;
	}
}

/* Drop root levels whose only child is in slot 0. Context: m->lock. */
static void radix_shrink(struct mapping *m)
{
	while (m->height > 1 && m->root) {
		struct radix_node *r = m->root;

		if (r->count != 1 || !r->slots[0])
			return;
		m->root = r->slots[0];	/* child's tag bitmaps are already exact */
		m->height--;
		free(r);
	}
}

/* Remove @index; frees emptied nodes and shrinks the height. Context: m->lock. */
static void radix_delete(struct mapping *m, uint64_t index)
{
	struct radix_node *path[RADIX_MAX_HEIGHT + 1];
	unsigned d = radix_path(m, index, path), t;

	if (!d || !path[d - 1]->slots[slot_of(index, 0)])
		return;
	for (t = 0; t < NR_TAGS; t++)
		radix_tag_clear(m, index, (enum mapping_tag)t);
	while (d-- > 0) {
		unsigned s = slot_of(index, m->height - 1 - d);

		path[d]->slots[s] = NULL;
		if (--path[d]->count)
			break;
		if (d == 0) {
			free(path[0]);
			m->root = NULL;
			m->height = 0;
			return;
		}
		free(path[d]);
	}
	radix_shrink(m);
}

/*
 * Walk present entries with index in [*start, end] in order, optionally only
 * those carrying @tag (tag < 0: all). Fills up to @nr pages with references.
 */
static unsigned radix_gang(struct radix_node *n, unsigned level, uint64_t base,
			   uint64_t *start, uint64_t end, int tag, struct page **out,
			   unsigned nr, unsigned got)
{
	unsigned shift = level * RADIX_SHIFT, i;
	uint64_t span = shift >= 64 ? 0 : 1ULL << shift;	/* entries per slot */

	for (i = slot_of(*start > base ? *start : base, level); i < RADIX_SLOTS && got < nr; i++) {
		uint64_t sbase = base + (uint64_t)i * span;

		if (sbase > end || (i && sbase == 0))
			break;
		if (!n->slots[i] || (tag >= 0 && !(n->tags[tag] & (1ULL << i))))
			continue;
		if (level == 0) {
			if (sbase < *start)
				continue;
			out[got] = n->slots[i];
			page_get(out[got++]);
			*start = sbase + 1;
			if (sbase == UINT64_MAX)
				*start = 0;	/* caller sees wrap via index check */
		} else {
			got = radix_gang(n->slots[i], level - 1, sbase, start, end, tag, out, nr, got);
		}
	}
	return got;
}

static unsigned lookup_common(struct mapping *m, uint64_t *start, uint64_t end, int tag,
			      struct page **pages, unsigned nr)
{
	unsigned got = 0;
	uint64_t s = *start;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	if (m->root && s <= end && s <= radix_max_index(m->height)) {
		got = radix_gang(m->root, m->height - 1, 0, &s, end, tag, pages, nr, 0);
		*start = got ? pages[got - 1]->index + 1 : end + 1;
		if (got && pages[got - 1]->index == UINT64_MAX)
			*start = UINT64_MAX;
	}
	ls_mutex_unlock(&m->lock);
	return got;
}

unsigned mapping_lookup_range(struct mapping *m, uint64_t *start, uint64_t end,
			      struct page **pages, unsigned nr)
{
	return lookup_common(m, start, end, -1, pages, nr);
}

unsigned mapping_lookup_tag(struct mapping *m, uint64_t *start, uint64_t end,
			    enum mapping_tag tag, struct page **pages, unsigned nr)
{
	return lookup_common(m, start, end, (int)tag, pages, nr);
}

struct page *mapping_get_page(struct mapping *m, uint64_t index)
{
	struct page *p;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	p = radix_lookup(m, index);
	if (p)
		page_get(p);
	ls_mutex_unlock(&m->lock);
	return p;
}

/* Insert a fresh, locked page; NULL-safe on the race where another won. */
static struct page *mapping_insert_new(struct mapping *m, uint64_t index, struct page *np)
{
	struct page *p;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	p = radix_lookup(m, index);
	if (p) {
		page_get(p);
		ls_mutex_unlock(&m->lock);
		page_put(np);
		return p;	/* not locked: caller locks and re-checks */
	}
	atomic_store(&np->flags, 1UL << PG_locked);
	page_mapping_set(np, m);
	np->index = index;
	if (radix_insert(m, index, np)) {
		ls_mutex_unlock(&m->lock);
		page_mapping_set(np, NULL);
		page_put(np);
		return NULL;
	}
	page_get(np);			/* the cache's reference */
	m->nrpages++;
	atomic_fetch_add(&m->cache->stats.nr_file_pages, 1);
	ls_mutex_unlock(&m->lock);
	cache_lru_add(np);
	return np;
}

struct page *mapping_grab_page(struct mapping *m, uint64_t index, unsigned alloc_flags)
{
	for (;;) {
		struct page *p = mapping_get_page(m, index);

		if (!p) {
			struct page *np = cache_alloc_page(m->cache, alloc_flags);

			if (!np)
				return NULL;
			p = mapping_insert_new(m, index, np);
			if (!p)
				return NULL;
			if (p == np)
				return p;	/* inserted locked */
		}
		if (alloc_flags & ALLOC_NOWAIT) {
			if (!trylock_page(p)) {
				page_put(p);
				return NULL;
			}
		} else {
			lock_page(p);
		}
		if (p->mapping == m && p->index == index)
			return p;
		unlock_page(p);		/* truncated or reclaimed meanwhile */
		page_put(p);
	}
}

void mapping_tag_set(struct mapping *m, uint64_t index, enum mapping_tag tag)
{
	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	if (radix_lookup(m, index))
		radix_tag_set(m, index, tag);
	ls_mutex_unlock(&m->lock);
}

void mapping_tag_clear(struct mapping *m, uint64_t index, enum mapping_tag tag)
{
	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	radix_tag_clear(m, index, tag);
	ls_mutex_unlock(&m->lock);
}

bool mapping_tagged(struct mapping *m, enum mapping_tag tag)
{
	bool t;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	t = m->root && ((struct radix_node *)m->root)->tags[tag];
	ls_mutex_unlock(&m->lock);
	return t;
}

void mapping_tag_towrite(struct mapping *m, uint64_t start, uint64_t end)
{
	struct page *pages[64];
	uint64_t pos = start;
	unsigned n, i;

	while (pos <= end && (n = mapping_lookup_tag(m, &pos, end, TAG_DIRTY, pages, 64))) {
		ls_mutex_lock(&m->lock, &lc_mapping_lock);
		for (i = 0; i < n; i++)
			if (pages[i]->mapping == m && page_test(pages[i], PG_dirty))
				radix_tag_set(m, pages[i]->index, TAG_TOWRITE);
		ls_mutex_unlock(&m->lock);
		for (i = 0; i < n; i++)
			page_put(pages[i]);
		if (pos == UINT64_MAX || pos == 0)
			break;
	}
}

unsigned mapping_count_cached_before(struct mapping *m, uint64_t index, unsigned max)
{
	unsigned n = 0;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	while (n < max && index > n && radix_lookup(m, index - n - 1))
		n++;
	ls_mutex_unlock(&m->lock);
	return n;
}

/*
 * Unlink @p from the tree and from its zone's LRU. The cache's reference is
 * the caller's to drop, after m->lock is released.
 * Context: m->lock held; takes zone->lock (inner).
 */
static void mapping_unlink_locked(struct mapping *m, struct page *p)
{
	lock_assert_held(&m->lock);

	radix_delete(m, p->index);
	page_mapping_set(p, NULL);	/* before the LRU unlink: reclaim's putback re-checks it */
	m->nrpages--;
	atomic_fetch_sub(&m->cache->stats.nr_file_pages, 1);
	cache_lru_del(p);
}

/* Truncate one page the caller holds a reference on. Context: may sleep. */
static void mapping_truncate_page(struct mapping *m, struct page *p)
{
	lock_page(p);
	wait_on_page_writeback(p);
	if (p->mapping != m) {		/* reclaimed or truncated meanwhile */
		unlock_page(p);
		return;
	}
	cancel_dirty_page(p);		/* no-op when clean */
	page_clear(p, PG_uptodate);
	page_clear(p, PG_reclaim);
	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	mapping_unlink_locked(m, p);
	ls_mutex_unlock(&m->lock);
	unlock_page(p);
	page_put(p);			/* the cache's reference */
}

void mapping_truncate(struct mapping *m, uint64_t start, uint64_t end)
{
	struct page *pages[64];
	uint64_t pos = start;
	unsigned n, i;

	while (pos <= end && (n = mapping_lookup_range(m, &pos, end, pages, 64))) {
		for (i = 0; i < n; i++) {
			mapping_truncate_page(m, pages[i]);
			page_put(pages[i]);	/* the lookup's reference */
		}
		if (pos == UINT64_MAX || pos == 0)
			break;
	}
}

#define PAGE_BUSY_MASK ((1UL << PG_locked) | (1UL << PG_dirty) | (1UL << PG_writeback))

static bool mapping_remove_page_if(struct mapping *m, struct page *p, unsigned long busy)
{
	bool removed = false;

	ls_mutex_lock(&m->lock, &lc_mapping_lock);
	if (p->mapping == m && atomic_load(&p->refcount) == 2 &&
	    !(atomic_load(&p->flags) & busy)) {
		mapping_unlink_locked(m, p);
		removed = true;
	}
	ls_mutex_unlock(&m->lock);
	if (removed)
		page_put(p);	/* the cache's reference; the caller drops its own */
	return removed;
}

bool mapping_try_remove_page(struct mapping *m, struct page *p)
{
	return mapping_remove_page_if(m, p, PAGE_BUSY_MASK);
}

/*
 * Our reference holds the page, not its inode: a file deleted meanwhile
 * frees its mapping once truncation has unlinked every page, and
 * truncation locks each page first. So the mapping is read, and used,
 * only under the page lock (shrink_folio_list's trylock); a page locked
 * by someone else is kept, as reclaim never sleeps on one.
 */
bool mapping_reclaim_page(struct page *p, bool *gone)
{
	struct mapping *m;
	bool removed;

	*gone = false;
	if (!trylock_page(p))
		return false;
	m = page_mapping_peek(p);
	removed = m && mapping_remove_page_if(m, p, PAGE_BUSY_MASK & ~(1UL << PG_locked));
	unlock_page(p);
	*gone = !m;
	return removed;
}

void mapping_wait_writeback(struct mapping *m, uint64_t start, uint64_t end)
{
	struct page *pages[64];
	uint64_t pos = start;
	unsigned n, i;

	while (pos <= end && (n = mapping_lookup_tag(m, &pos, end, TAG_WRITEBACK, pages, 64))) {
		for (i = 0; i < n; i++) {
			wait_on_page_writeback(pages[i]);
			page_put(pages[i]);
		}
		if (pos == UINT64_MAX || pos == 0)
			break;
	}
}

/* ---- writeback errors (errseq) ------------------------------------------- */

#define ERRSEQ_ERRNO_MASK 0xfffU		/* -errno, 1..4095 */
#define ERRSEQ_SEEN (1U << 12)			/* reported to at least one cursor */
#define ERRSEQ_CTR_INC (1U << 13)		/* counter: the remaining bits */

/*
 * new = errno | (old's counter, + 1 when old was seen); SEEN cleared.
 * (1) a cursor that saw the old error sees a changed sequence;
 * (2) an error recorded while the last is unseen changes nothing but the
 *     errno, so nobody is told twice of errors nobody has looked at;
 * (3) the counter wraps after 2^19 seen errors: harmless, a cursor that
 *     old is not kept.
 */
void mapping_set_error(struct mapping *m, int err)
{
	errseq_t old = atomic_load(&m->wb_err), new;

	if (err >= 0 || -err > (int)ERRSEQ_ERRNO_MASK)
		err = err ? -EIO : 0;
	if (!err)
		return;
	do {
		new = (old & ~(ERRSEQ_ERRNO_MASK | ERRSEQ_SEEN)) | (errseq_t)-err;
		if (old & ERRSEQ_SEEN)
			new += ERRSEQ_CTR_INC;
		if (new == old)
			return;
	} while (!atomic_compare_exchange_weak(&m->wb_err, &old, new));
}

errseq_t mapping_sample_error(struct mapping *m)
{
	errseq_t cur = atomic_load(&m->wb_err);

	/* an error nobody has seen is reported to new openers too */
	return (cur & ERRSEQ_SEEN) ? cur : 0;
}

int mapping_check_error_since(struct mapping *m, errseq_t since)
{
	errseq_t cur = atomic_load(&m->wb_err);

	return cur == since ? 0 : -(int)(cur & ERRSEQ_ERRNO_MASK);
}

int mapping_check_and_advance(struct mapping *m, errseq_t *since)
{
	errseq_t old = atomic_load(&m->wb_err), new;

	if (old == *since)
		return 0;
	new = old | ERRSEQ_SEEN;
	/* losing the race means someone set SEEN or a newer error: the
	 * newer one stays unseen for this cursor, which is what we want */
	if (new != old)
		atomic_compare_exchange_strong(&m->wb_err, &old, new);
	*since = new;
	return -(int)(new & ERRSEQ_ERRNO_MASK);
}
