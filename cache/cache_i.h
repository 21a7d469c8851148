/* SPDX-License-Identifier: GPL-2.0-or-later */
/* cache/ internals shared by page.c, mapping.c, zone.c and reclaim.c. */
#ifndef WBCFS_CACHE_I_H
#define WBCFS_CACHE_I_H

#include "wbcfs/cache.h"

/* Take @p off its zone's LRU list (if on one). Takes zone->lock. */
void cache_lru_del(struct page *p);
/* Return a page with no references to its zone's free list. */
void zone_free_page(struct page *p);
/* Writeback of a PG_reclaim page ended: free it now if clean and unused,
 * else move it to the inactive tail so reclaim meets it first. */
void cache_reclaim_now(struct page *p);
/* Second touch: move to the active list. */
void cache_lru_activate(struct page *p);
/* Wake kswapd if any zone is below its low watermark. */
void cache_kswapd_kick(struct cache *c);
/* Start/stop the reclaim thread. */
int reclaim_start(struct cache *c);
void reclaim_stop(struct cache *c);

#endif
