/* A circular doubly linked list threaded through its members: each member
 * embeds a struct rn_list, the head is one of its own.  No locking: whoever
 * owns the head locks around every call. */
#ifndef RN_LIST_H
#define RN_LIST_H

#include <pthread.h>
#include <stddef.h>

struct rn_list {
  struct rn_list *prev, *next;
};

/* An empty head: static struct rn_list h = RN_LIST_HEAD_INIT(h); */
#define RN_LIST_HEAD_INIT(head) \
  { &(head), &(head) }
/* The member that embeds node: RN_LIST_ENTRY(node, struct rn_x, link). */
#define RN_LIST_ENTRY(node, type, field) ((type *)((char *)(node)-offsetof(type, field)))
#define RN_LIST_FOR_EACH(node, head) \
  for ((node) = (head)->next; (node) != (head); (node) = (node)->next)

static inline int rn_list_empty(const struct rn_list *head) { return head->next == head; }

static inline void rn_list_insert(struct rn_list *node, struct rn_list *prev,
                                  struct rn_list *next) {
  node->prev = prev;
  node->next = next;
  prev->next = node;
  next->prev = node;
}

/* Insert as the first member. */
static inline void rn_list_add(struct rn_list *head, struct rn_list *node) {
  rn_list_insert(node, head, head->next);
}

/* Insert as the last member. */
static inline void rn_list_add_tail(struct rn_list *head, struct rn_list *node) {
  rn_list_insert(node, head->prev, head);
}

/* Unlink node.  A node never inserted (zeroed) or already removed is left
 * alone, so teardown paths need not know whether it was inserted. */
static inline void rn_list_del(struct rn_list *node) {
  if (node->next == NULL) return;
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->next = node->prev = NULL;
}

/* A list several threads share, with the lock that guards it: the
 * transports' lists of open comms and registrations, which finalize
 * closes.  Iterating takes the lock by hand. */
struct rn_shared_list {
  pthread_mutex_t lock;
  struct rn_list head;
};

#define RN_SHARED_LIST_INIT(list) \
  { PTHREAD_MUTEX_INITIALIZER, RN_LIST_HEAD_INIT((list).head) }

static inline void rn_shared_list_add(struct rn_shared_list *l, struct rn_list *node) {
  pthread_mutex_lock(&l->lock);
  rn_list_add(&l->head, node);
  pthread_mutex_unlock(&l->lock);
}

static inline void rn_shared_list_add_tail(struct rn_shared_list *l, struct rn_list *node) {
  pthread_mutex_lock(&l->lock);
  rn_list_add_tail(&l->head, node);
  pthread_mutex_unlock(&l->lock);
}

static inline void rn_shared_list_del(struct rn_shared_list *l, struct rn_list *node) {
  pthread_mutex_lock(&l->lock);
  rn_list_del(node);
  pthread_mutex_unlock(&l->lock);
}

/* The first member, or NULL when empty; it stays linked (closing it
 * unlinks it), so finalize can close members one by one without holding
 * the lock across the close. */
static inline struct rn_list *rn_shared_list_first(struct rn_shared_list *l) {
  pthread_mutex_lock(&l->lock);
  struct rn_list *first = rn_list_empty(&l->head) ? NULL : l->head.next;
  pthread_mutex_unlock(&l->lock);
  return first;
}

#endif
