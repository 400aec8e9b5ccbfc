/* A reference-counted interval cache of memory registrations, generic over
 * a register/deregister callback pair so it runs (and is tested) without
 * RDMA hardware.  One cache per protection domain.
 *
 * get() returns an entry covering [addr, addr+len): an existing one that
 * contains the page-aligned range (a hit, refcount+1), or a new registration
 * of that range (a miss).  Overlapping entries may coexist: a range that is
 * not fully inside an existing entry gets its own registration, so handles
 * already given out never change.  put() drops a reference; the entry is
 * deregistered when its last reference goes, in whatever order callers
 * release them.  Thread-safe: one mutex, held across the callbacks so a
 * range is never registered twice concurrently.  Owner: the device that
 * created it; destroy() deregisters anything left. */
#ifndef RN_MR_CACHE_H
#define RN_MR_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "nccl/net_common.h"

/* Register [addr, addr+len) (already aligned unless RN_MR_EXACT); arg is
 * get()'s, passed through; owner is create()'s.  *handle on success. */
typedef ncclResult_t (*rn_mr_reg_fn)(void *owner, uintptr_t addr, size_t len, const void *arg,
                                     void **handle);
typedef void (*rn_mr_dereg_fn)(void *owner, void *handle);

struct rn_mr_entry {
  uintptr_t addr; /* registered range, immutable */
  size_t len;
  void *handle; /* what reg returned */
  int refs;     /* guarded by the cache lock */
  int cached;   /* 0: private entry (cache disabled or exact) */
};

struct rn_mr_stats {
  uint64_t hits, misses;
  uint64_t live; /* entries currently registered */
};

#define RN_MR_EXACT 1 /* register exactly the range, no sharing */

struct rn_mr_cache;
/* enabled=0 turns every get() into a private registration. */
ncclResult_t rn_mr_cache_create(size_t page, int enabled, rn_mr_reg_fn reg, rn_mr_dereg_fn dereg,
                                void *owner, struct rn_mr_cache **out);
void rn_mr_cache_destroy(struct rn_mr_cache *c);
ncclResult_t rn_mr_cache_get(struct rn_mr_cache *c, const void *addr, size_t len, int flags,
                             const void *arg, struct rn_mr_entry **e);
void rn_mr_cache_put(struct rn_mr_cache *c, struct rn_mr_entry *e);
void rn_mr_cache_stats(struct rn_mr_cache *c, struct rn_mr_stats *s);

#endif
