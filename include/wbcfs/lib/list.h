/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Intrusive doubly linked lists, in the kernel's shape. Header-only; no
 * locking here: every list says at its head which lock protects it.
 */
#ifndef WBCFS_LIST_H
#define WBCFS_LIST_H

#include <stddef.h>
#include <stdbool.h>

struct list_head {
	struct list_head *next, *prev;
};

#define LIST_HEAD_INIT(name) { &(name), &(name) }
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(head, type, member) list_entry((head)->next, type, member)
#define list_last_entry(head, type, member) list_entry((head)->prev, type, member)

static inline void list_init(struct list_head *h) { h->next = h->prev = h; }
static inline bool list_empty(const struct list_head *h) { return h->next == h; }

static inline void __list_add(struct list_head *n, struct list_head *prev,
			      struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

/* Insert at the head (newest first, as b_dirty keeps it). */
static inline void list_add(struct list_head *n, struct list_head *h)
{
	__list_add(n, h, h->next);
}

static inline void list_add_tail(struct list_head *n, struct list_head *h)
{
	__list_add(n, h->prev, h);
}

static inline void list_del_init(struct list_head *e)
{
	e->next->prev = e->prev;
	e->prev->next = e->next;
	list_init(e);
}

static inline void list_move(struct list_head *e, struct list_head *h)
{
	list_del_init(e);
	list_add(e, h);
}

static inline void list_move_tail(struct list_head *e, struct list_head *h)
{
	list_del_init(e);
	list_add_tail(e, h);
}

/* Move all of @list to the front of @h; @list is left empty. */
static inline void list_splice_init(struct list_head *list, struct list_head *h)
{
	if (list_empty(list))
		return;
	struct list_head *first = list->next, *last = list->prev, *at = h->next;
	first->prev = h;
	h->next = first;
	last->next = at;
	at->prev = last;
	list_init(list);
}

#define list_for_each_entry(pos, head, member)				\
	for (pos = list_entry((head)->next, __typeof__(*pos), member);	\
	     &pos->member != (head);					\
	     pos = list_entry(pos->member.next, __typeof__(*pos), member))

#define list_for_each_entry_safe(pos, n, head, member)			\
	for (pos = list_entry((head)->next, __typeof__(*pos), member),	\
	     n = list_entry(pos->member.next, __typeof__(*pos), member);\
	     &pos->member != (head);					\
	     pos = n, n = list_entry(n->member.next, __typeof__(*n), member))

#endif
