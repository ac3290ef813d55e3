/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The least-recently-used lists of daemon/stacks: the symbolizer's objects and processes, the
 * unwinder's sessions. Intrusive: the listed object embeds a struct lru_node named lru.
 */
#ifndef MEMPROFD_LRU_H
#define MEMPROFD_LRU_H

#include <stddef.h>

/* An intrusive list in least-recently-used order: most recent at the head. */
struct lru_node {
	struct lru_node *prev, *next;
};

struct lru_list {
	struct lru_node *head, *tail;
};

/* The object holding @n (NULL-safe). */
#define lru_entry(n, type) ((n) ? (type *)((char *)(n) - offsetof(type, lru)) : (type *)NULL)

static inline void lru_unlink(struct lru_list *l, struct lru_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

static inline void lru_push(struct lru_list *l, struct lru_node *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	if (!l->tail)
		l->tail = n;
}

/* @n was just used: move it to the head. */
static inline void lru_touch(struct lru_list *l, struct lru_node *n)
{
	if (l->head != n) {
		lru_unlink(l, n);
		lru_push(l, n);
	}
}

#endif
