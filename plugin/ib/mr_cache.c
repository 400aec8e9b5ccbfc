/* Reference-counted interval cache of registrations (see mr_cache.h).
 * Entries live in an array sorted by start address; NCCL registers few,
 * large buffers, so a scan is cheaper than a tree and easy to get right. */
#include <pthread.h>
#include <stdlib.h>
#include "railnet/check.h"
#include "railnet/mr_cache.h"

struct rn_mr_cache {
  pthread_mutex_t lock;
  size_t page;
  int enabled;
  rn_mr_reg_fn reg;
  rn_mr_dereg_fn dereg;
  void *owner;
  struct rn_mr_entry **ent; /* sorted by addr, then len */
  int n, cap;
  uint64_t hits, misses, live;
};

ncclResult_t rn_mr_cache_create(size_t page, int enabled, rn_mr_reg_fn reg, rn_mr_dereg_fn dereg,
                                void *owner, struct rn_mr_cache **out) {
  if (page == 0 || (page & (page - 1)) || !reg || !dereg) {
    RN_WARN("MR cache: bad arguments (page %zu)", page);
    return ncclInternalError;
  }
  struct rn_mr_cache *c = calloc(1, sizeof(*c));
  if (!c) {
    RN_WARN("MR cache: out of memory");
    return ncclSystemError;
  }
  pthread_mutex_init(&c->lock, NULL);
  c->page = page;
  c->enabled = enabled;
  c->reg = reg;
  c->dereg = dereg;
  c->owner = owner;
  *out = c;
  return ncclSuccess;
}

void rn_mr_cache_destroy(struct rn_mr_cache *c) {
  if (!c) return;
  /* Private entries are not tracked: their owners must have put() them. */
  for (int i = 0; i < c->n; i++) {
    RN_INFO(NCCL_NET, "MR cache: deregistering [0x%lx, +%zu) still held by %d reference(s)",
            (unsigned long)c->ent[i]->addr, c->ent[i]->len, c->ent[i]->refs);
    c->dereg(c->owner, c->ent[i]->handle);
    free(c->ent[i]);
  }
  free(c->ent);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static int rn_mr_find(const struct rn_mr_cache *c, uintptr_t lo, uintptr_t hi) {
  /* Entries are sorted by start; the first containing one wins.  Stop at
   * the first entry starting past lo. */
  for (int i = 0; i < c->n && c->ent[i]->addr <= lo; i++)
    if (c->ent[i]->addr + c->ent[i]->len >= hi) return i;
  return -1;
}

static ncclResult_t rn_mr_insert(struct rn_mr_cache *c, struct rn_mr_entry *e) {
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    struct rn_mr_entry **p = realloc(c->ent, (size_t)cap * sizeof(*p));
    if (!p) {
      RN_WARN("MR cache: out of memory");
      return ncclSystemError;
    }
    c->ent = p;
    c->cap = cap;
  }
  int i = c->n;
  while (i > 0 && (c->ent[i - 1]->addr > e->addr ||
                   (c->ent[i - 1]->addr == e->addr && c->ent[i - 1]->len > e->len))) {
    c->ent[i] = c->ent[i - 1];
    i--;
  }
  c->ent[i] = e;
  c->n++;
  return ncclSuccess;
}

ncclResult_t rn_mr_cache_get(struct rn_mr_cache *c, const void *addr, size_t len, int flags,
                             const void *arg, struct rn_mr_entry **out) {
  ncclResult_t res = ncclSuccess;
  uintptr_t a = (uintptr_t)addr;
  int exact = (flags & RN_MR_EXACT) != 0;
  uintptr_t lo = exact ? a : a & ~(uintptr_t)(c->page - 1);
  uintptr_t hi = a + (len ? len : 1);
  if (hi < a) {
    RN_WARN("MR cache: range %p + %zu wraps", addr, len);
    return ncclInvalidArgument;
  }
  if (!exact) hi = (hi + c->page - 1) & ~(uintptr_t)(c->page - 1);
  int shared = c->enabled && !exact;

  pthread_mutex_lock(&c->lock);
  if (shared) {
    int i = rn_mr_find(c, lo, hi);
    if (i >= 0) {
      c->ent[i]->refs++;
      c->hits++;
      *out = c->ent[i];
      goto out_unlock;
    }
  }
  struct rn_mr_entry *e = calloc(1, sizeof(*e));
  if (!e) {
    RN_WARN("MR cache: out of memory");
    res = ncclSystemError;
    goto out_unlock;
  }
  e->addr = lo;
  e->len = hi - lo;
  e->refs = 1;
  e->cached = shared;
  RN_CHECK_GOTO(c->reg(c->owner, e->addr, e->len, arg, &e->handle), res, out_free_entry);
  if (shared) RN_CHECK_GOTO(rn_mr_insert(c, e), res, out_dereg);
  c->misses++;
  c->live++;
  *out = e;
  goto out_unlock;
out_dereg:
  c->dereg(c->owner, e->handle);
out_free_entry:
  free(e);
out_unlock:
  pthread_mutex_unlock(&c->lock);
  return res;
}

void rn_mr_cache_put(struct rn_mr_cache *c, struct rn_mr_entry *e) {
  if (!e) return;
  pthread_mutex_lock(&c->lock);
  if (--e->refs > 0) {
    pthread_mutex_unlock(&c->lock);
    return;
  }
  if (e->cached) {
    for (int i = 0; i < c->n; i++) {
      if (c->ent[i] != e) continue;
      for (int j = i + 1; j < c->n; j++) c->ent[j - 1] = c->ent[j];
      c->n--;
      break;
    }
  }
  c->live--;
  c->dereg(c->owner, e->handle);
  pthread_mutex_unlock(&c->lock);
  free(e);
}

void rn_mr_cache_stats(struct rn_mr_cache *c, struct rn_mr_stats *s) {
  pthread_mutex_lock(&c->lock);
  s->hits = c->hits;
  s->misses = c->misses;
  s->live = c->live;
  pthread_mutex_unlock(&c->lock);
}
