/* The core: lifecycle (init, v11 contexts, finalize, unload), argument
 * checking, handles, connect progress, and dispatch to the transport the
 * registry chose.  Only the device table (built by devices.c) and the
 * pending-connect list are global, both under rn_core.lock. */
#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/check.h"
#include "railnet/core.h"
#include "railnet/param.h"
#include "railnet/registry.h"
#include "railnet/rendezvous.h"
#include "railnet/version.h"

#define RN_CTX_MAGIC 0x726e6378u /* "rncx" */
#define RN_MAX_PENDING_CONNECTS 1024
#define RN_PENDING_HASH 2048 /* slots of the index: a power of two, at most half full */

/* v11 context: one per communicator.  Owner: NCCL, between init and finalize. */
struct rn_ctx {
  uint32_t magic;
  int traffic_class; /* NCCL's, for this communicator's connects */
};

struct rn_pending_connect {
  const void *handle; /* NCCL passes the same pointer on every call */
  uint64_t nonce;
  void *state;
};

static struct {
  pthread_mutex_t lock;
  int ready;                            /* device table built */
  int legacy;                           /* a v8-v10 init happened: never torn down before unload */
  int nctx;                             /* live v11 contexts */
  int transport_index;                  /* its registry index */
  const struct rn_transport *transport; /* chosen at setup */
  int nvdevs;
  struct rn_vdev vdevs[RN_MAX_VDEVS];
  /* makeVDevice's requests, kept from one build of the table to the next:
   * NCCL counts the devices, and merges them, once per load of the
   * library, so a table rebuilt for a later context (the last one
   * finalized, then a new init) holds them again at the same indices. */
  int nmade, made_base;
  struct rn_vprops made[RN_MAX_VDEVS];
  int npending;
  struct rn_pending_connect pending[RN_MAX_PENDING_CONNECTS];
  /* pending[] by (handle, nonce): open addressing with linear probing,
   * each slot 1 + an index into pending[], 0 when empty, so that a
   * connect call finds its state in O(1) with 1,024 in progress. */
  int16_t index[RN_PENDING_HASH];
} rn_core = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A table built again: NCCL's merged devices made again after the
 * planner's, where NCCL still counts them (rn_core.made). */
static void rn_core_remake(void) {
  if (rn_core.nmade == 0) return;
  if (rn_core.nvdevs != rn_core.made_base) {
    RN_WARN("the device table was built again with %d devices where it had %d when NCCL merged "
            "%d of them; NCCL counts devices once per load of the library, so its merged devices "
            "%d..%d are not made again and using them fails",
            rn_core.nvdevs, rn_core.made_base, rn_core.nmade, rn_core.made_base,
            rn_core.made_base + rn_core.nmade - 1);
    rn_core.nmade = 0;
    return;
  }
  for (int i = 0; i < rn_core.nmade; i++) {
    int d = -1;
    if (rn_devices_merge(rn_core.vdevs, &rn_core.nvdevs, &rn_core.made[i], &d) != ncclSuccess) {
      RN_WARN("NCCL's merged device %d could not be made again (above); it and those after it "
              "fail when used", rn_core.made_base + i);
      rn_core.nmade = i;
      return;
    }
  }
  RN_INFO(NCCL_INIT | NCCL_NET,
          "devices %d..%d: NCCL's merged devices made again with the table (NCCL counts devices "
          "once per load of the library)",
          rn_core.made_base, rn_core.made_base + rn_core.nmade - 1);
}

/* Pick the transport (RAILNET_TRANSPORT, see registry.h) and build the
 * device table from its NICs. */
static ncclResult_t rn_core_setup(void) {
  const struct rn_nic *nics = NULL;
  int nnics = 0, index;
  static int said; /* under rn_core.lock: the version once per process */
  if (!said++)
    RN_INFO(NCCL_INIT | NCCL_NET, "railnet %s, wire version %d", RAILNET_VERSION, RN_WIRE_VERSION);
  rn_core.transport = NULL;
  RN_CHECK(rn_registry_select(rn_params()->transport, &index, &nics, &nnics));
  if (index < 0) {
    rn_core.nvdevs = 0;
    return ncclSuccess;
  }
  rn_core.transport = rn_registry_get(index);
  rn_core.transport_index = index;
  ncclResult_t res = rn_devices_build(nics, nnics, rn_core.vdevs, &rn_core.nvdevs);
  if (res != ncclSuccess) {
    rn_core.transport->fini();
    return res;
  }
  if (rn_core.nvdevs == 0)
    RN_INFO(NCCL_INIT | NCCL_NET, "no usable device; reporting 0 devices (NCCL falls back)");
  rn_devices_log(rn_core.vdevs, rn_core.nvdevs, rn_core.transport->name);
  rn_core_remake();
  rn_core.ready = 1;
  return ncclSuccess;
}

static void rn_core_teardown(void) {
  for (int i = 0; i < rn_core.npending; i++)
    rn_core.transport->connect_abort(rn_core.pending[i].state);
  rn_core.npending = 0;
  memset(rn_core.index, 0, sizeof(rn_core.index));
  if (rn_core.transport != NULL) rn_core.transport->fini();
  rn_core.transport = NULL;
  rn_core.nvdevs = 0;
  rn_core.ready = 0;
}

/* Build the device table if needed and take a reference (*ref += 1) in
 * the same critical section, so a concurrent finalize cannot tear the
 * table down between the two. */
static ncclResult_t rn_core_ensure(ncclDebugLogger_t logger, int *ref) {
  ncclResult_t res = ncclSuccess;
  rn_log_set(logger);
  pthread_mutex_lock(&rn_core.lock);
  if (!rn_core.ready) {
    if (rn_core.nctx == 0 && !rn_core.legacy) rn_params_reload();
    res = rn_core_setup();
  }
  if (res == ncclSuccess) (*ref)++;
  pthread_mutex_unlock(&rn_core.lock);
  return res;
}

ncclResult_t rn_core_init(ncclDebugLogger_t logger) {
  return rn_core_ensure(logger, &rn_core.legacy);
}

/* NCCL's traffic class: undefined or a TOS byte.  Checked only where it
 * is used (RAILNET_TRAFFIC_CLASS_NCCL): NCCL passes a communicator's
 * configured value on unchecked, and one railnet ignores must not turn
 * railnet off for the process (a failed v11 init) or fail a connect. */
static ncclResult_t rn_core_check_tc(int tc, const char *call) {
  if (!rn_params()->traffic_class_nccl || tc == RN_TRAFFIC_CLASS_UNDEF || (tc >= 0 && tc <= 255))
    return ncclSuccess;
  RN_WARN("%s: traffic class %d is neither %d (undefined) nor 0..255 (an IP TOS byte)", call, tc,
          RN_TRAFFIC_CLASS_UNDEF);
  return ncclInvalidArgument;
}

/* The class a new send comm gets: NCCL's when RAILNET_TRAFFIC_CLASS_NCCL
 * allows and it gives one, else RAILNET_TRAFFIC_CLASS; -1 for none. */
static int rn_core_traffic_class(int nccl_tc) {
  const struct rn_params *p = rn_params();
  if (p->traffic_class_nccl && nccl_tc != RN_TRAFFIC_CLASS_UNDEF) return nccl_tc;
  return (int)p->traffic_class;
}

/* Drop a context's reference to the device table (the last one of a
 * process that never called the legacy init tears it down) and free it. */
static void rn_core_release_ctx(struct rn_ctx *c) {
  pthread_mutex_lock(&rn_core.lock);
  if (--rn_core.nctx == 0 && !rn_core.legacy && rn_core.ready) rn_core_teardown();
  pthread_mutex_unlock(&rn_core.lock);
  free(c);
}

ncclResult_t rn_core_init_ctx(ncclDebugLogger_t logger, uint64_t comm_id, int traffic_class,
                              void **ctx) {
  RN_CHECK_ARG(ctx != NULL, "init: NULL context pointer");
  *ctx = NULL;
  rn_log_set(logger);
  struct rn_ctx *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    RN_WARN("init: out of memory");
    return ncclSystemError;
  }
  ncclResult_t res = rn_core_ensure(logger, &rn_core.nctx);
  if (res != ncclSuccess) {
    free(c);
    return res;
  }
  /* After the table (and the settings it reads) is set up. */
  if ((res = rn_core_check_tc(traffic_class, "init")) != ncclSuccess) {
    rn_core_release_ctx(c);
    return res;
  }
  c->magic = RN_CTX_MAGIC;
  c->traffic_class = traffic_class;
  RN_INFO(NCCL_INIT | NCCL_NET, "context for comm %016llx created", (unsigned long long)comm_id);
  *ctx = c;
  return ncclSuccess;
}

ncclResult_t rn_core_finalize(void *ctx) {
  struct rn_ctx *c = ctx;
  /* NCCL 2.28.9 calls finalize even when init failed: NULL is fine. */
  if (c == NULL) return ncclSuccess;
  if (c->magic != RN_CTX_MAGIC) {
    RN_WARN("finalize: %p is not a railnet context", ctx);
    return ncclInvalidArgument;
  }
  c->magic = 0;
  rn_core_release_ctx(c);
  return ncclSuccess;
}

/* Unload without finalize (v8-v10 have none): release transport state.
 * Comms own and join their threads at close, so none run here. */
__attribute__((destructor)) static void rn_core_unload(void) {
  pthread_mutex_lock(&rn_core.lock);
  if (rn_core.ready) rn_core_teardown();
  pthread_mutex_unlock(&rn_core.lock);
}

static ncclResult_t rn_core_vdev(int dev, const char *what, struct rn_vdev **out) {
  pthread_mutex_lock(&rn_core.lock);
  int ready = rn_core.ready;
  int ok = ready && dev >= 0 && dev < rn_core.nvdevs;
  int n = ready ? rn_core.nvdevs : 0;
  struct rn_vdev *v = ok ? &rn_core.vdevs[dev] : NULL;
  pthread_mutex_unlock(&rn_core.lock);
  if (!ok) {
    RN_WARN("%s: device %d out of range (%d devices%s)", what, dev, n,
            ready ? "" : ", plugin not initialized");
    return ready ? ncclInvalidArgument : ncclInvalidUsage;
  }
  *out = v;
  return ncclSuccess;
}

ncclResult_t rn_core_devices(int *ndev) {
  RN_CHECK_ARG(ndev != NULL, "devices: NULL count pointer");
  pthread_mutex_lock(&rn_core.lock);
  *ndev = rn_core.ready ? rn_core.nvdevs : 0;
  pthread_mutex_unlock(&rn_core.lock);
  return ncclSuccess;
}

ncclResult_t rn_core_get_properties(int dev, struct rn_props *p) {
  struct rn_vdev *v;
  RN_CHECK_ARG(p != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_vdev(dev, "getProperties", &v));
  memset(p, 0, sizeof(*p));
  p->name = v->name;
  p->pci_path = v->pci_path[0] ? v->pci_path : NULL;
  p->guid = v->guid;
  p->ptr_support = v->ptr_support;
  p->reg_is_global = v->reg_is_global; /* the transport's discovery decides */
  p->force_flush = v->force_flush;
  p->speed = v->speed;
  p->port = v->port;
  p->latency = 0;
  p->max_comms = v->max_comms;
  p->max_recvs = RN_MAX_RECVS;
  p->vprops = v->vprops;
  p->max_p2p_bytes = (size_t)1 << 30;
  p->max_coll_bytes = (size_t)1 << 30;
  p->max_multi_request_size = 1;
  p->rail_id = v->rail_id;
  p->plane_id = v->plane_id;
  return ncclSuccess;
}

ncclResult_t rn_core_make_vdevice(int *d, const struct rn_vprops *props) {
  RN_CHECK_ARG(d != NULL && props != NULL, "makeVDevice: NULL argument");
  RN_CHECK_ARG(props->ndevs >= 1 && props->ndevs <= RN_MAX_VDEV_PARTS,
               "makeVDevice: %d devices requested, must be 1..%d", props->ndevs, RN_MAX_VDEV_PARTS);
  ncclResult_t res = ncclInvalidUsage;
  pthread_mutex_lock(&rn_core.lock);
  if (rn_core.ready) {
    res = rn_devices_merge(rn_core.vdevs, &rn_core.nvdevs, props, d);
    if (res == ncclSuccess) {
      if (rn_core.nmade == 0) rn_core.made_base = *d;
      rn_core.made[rn_core.nmade++] = *props; /* fits: *d < RN_MAX_VDEVS */
    }
  } else
    RN_WARN("makeVDevice: plugin not initialized");
  pthread_mutex_unlock(&rn_core.lock);
  return res;
}

static ncclResult_t rn_core_check_ctx(void *ctx, const char *what) {
  const struct rn_ctx *c = ctx;
  if (c != NULL && c->magic != RN_CTX_MAGIC) {
    RN_WARN("%s: %p is not a railnet context", what, ctx);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static void rn_core_stamp(void *comm, enum rn_comm_kind kind, int dev) {
  struct rn_comm_base *b = comm;
  b->magic = RN_COMM_MAGIC;
  b->kind = (uint8_t)kind;
  b->transport = (uint8_t)rn_core.transport_index;
  b->vdev = dev;
}

static uint32_t rn_handle_check(const struct rn_handle *h) {
  const uint8_t *b = (const uint8_t *)h;
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < offsetof(struct rn_handle, check); i++) x = (x ^ b[i]) * 16777619u;
  return x;
}

static_assert(sizeof(struct rn_handle) <= NCCL_NET_HANDLE_MAXSIZE, "a handle fits NCCL's buffer");

ncclResult_t rn_core_listen(void *ctx, int dev, void *handle, void **lcomm) {
  struct rn_vdev *v;
  RN_CHECK(rn_core_check_ctx(ctx, "listen"));
  RN_CHECK_ARG(handle != NULL && lcomm != NULL, "listen: NULL handle or comm pointer");
  *lcomm = NULL;
  RN_CHECK(rn_core_vdev(dev, "listen", &v));
  /* NCCL's handle buffer is bytes, with no alignment promised: the handle
   * is made here and copied out whole (and copied in at connect). */
  struct rn_handle hl, *h = &hl;
  memset(h, 0, sizeof(*h));
  h->magic = RN_HANDLE_MAGIC;
  h->transport = (uint8_t)rn_core.transport_index;
  h->nrails = (uint8_t)v->rails.n;
  h->wire = RN_WIRE_VERSION;
  h->nonce = rn_rdv_random64();
  RN_CHECK(rn_core.transport->listen(&v->rails, h, lcomm));
  h->check = rn_handle_check(h);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, h, sizeof(*h));
  rn_core_stamp(*lcomm, RN_COMM_LISTEN, dev);
  return ncclSuccess;
}

/* The pending-connect table: rn_core.lock held for all of these. */
static_assert(RN_PENDING_HASH >= 2 * RN_MAX_PENDING_CONNECTS, "the index stays half empty");
static_assert((RN_PENDING_HASH & (RN_PENDING_HASH - 1)) == 0, "a power of two");
static_assert(RN_MAX_PENDING_CONNECTS < INT16_MAX, "indices fit the slots");
#define RN_PENDING_MASK (RN_PENDING_HASH - 1)

static int rn_core_pending_home(const void *handle, uint64_t nonce) {
  uint64_t k = ((uint64_t)(uintptr_t)handle ^ nonce) * 0x9e3779b97f4a7c15ull;
  return (int)(k >> 53) & RN_PENDING_MASK;
}

/* The index slot of the entry (handle, nonce), or of the empty slot that
 * ends its probe when it is not there. */
static int rn_core_pending_slot(const void *handle, uint64_t nonce) {
  int h = rn_core_pending_home(handle, nonce);
  for (;; h = (h + 1) & RN_PENDING_MASK) {
    int e = rn_core.index[h] - 1;
    if (e < 0 || (rn_core.pending[e].handle == handle && rn_core.pending[e].nonce == nonce))
      return h;
  }
}

static int rn_core_pending_find(const void *handle, uint64_t nonce) {
  return rn_core.index[rn_core_pending_slot(handle, nonce)] - 1;
}

static void rn_core_pending_add(const void *handle, uint64_t nonce, void *state) {
  int e = rn_core.npending++;
  rn_core.pending[e] =
      (struct rn_pending_connect){.handle = handle, .nonce = nonce, .state = state};
  rn_core.index[rn_core_pending_slot(handle, nonce)] = (int16_t)(e + 1);
}

/* Remove pending[e]: empty its index slot, moving up the entries of its
 * probe run that would no longer be found (backward-shift deletion), and
 * move the last entry into its place. */
static void rn_core_pending_take(int e) {
  const struct rn_pending_connect *p = &rn_core.pending[e];
  int i = rn_core_pending_slot(p->handle, p->nonce);
  for (int j = i;;) {
    rn_core.index[i] = 0;
    int moved = 0;
    while (!moved) {
      j = (j + 1) & RN_PENDING_MASK;
      int f = rn_core.index[j] - 1;
      if (f < 0) break;
      int k = rn_core_pending_home(rn_core.pending[f].handle, rn_core.pending[f].nonce);
      /* It stays when its home lies cyclically in (i, j]. */
      if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
      rn_core.index[i] = rn_core.index[j];
      i = j;
      moved = 1;
    }
    if (!moved) break;
  }
  int last = --rn_core.npending;
  if (last != e) {
    rn_core.pending[e] = rn_core.pending[last];
    const struct rn_pending_connect *q = &rn_core.pending[e];
    rn_core.index[rn_core_pending_slot(q->handle, q->nonce)] = (int16_t)(e + 1);
  }
}

ncclResult_t rn_core_connect(void *ctx, int traffic_class, int dev, void *handle, void **scomm,
                             ncclNetDeviceHandle_t **dev_comm) {
  struct rn_vdev *v;
  RN_CHECK(rn_core_check_ctx(ctx, "connect"));
  if (ctx != NULL) traffic_class = ((const struct rn_ctx *)ctx)->traffic_class;
  RN_CHECK(rn_core_check_tc(traffic_class, "connect"));
  RN_CHECK_ARG(handle != NULL && scomm != NULL, "connect: NULL handle or comm pointer");
  *scomm = NULL;
  if (dev_comm != NULL) *dev_comm = NULL;
  RN_CHECK(rn_core_vdev(dev, "connect", &v));
  struct rn_handle hc; /* an aligned copy (see listen) */
  memcpy(&hc, handle, sizeof(hc));
  const struct rn_handle *h = &hc;
  if (h->magic != RN_HANDLE_MAGIC || h->transport >= rn_registry_count() || h->nrails == 0 ||
      h->nrails > RN_MAX_RAILS) {
    RN_WARN("connect: handle %p is not a railnet handle (magic %08x)", handle, h->magic);
    return ncclInvalidArgument;
  }
  if (h->check != rn_handle_check(h)) {
    RN_WARN("connect: handle %p is corrupted (checksum mismatch); was it copied whole?", handle);
    return ncclInvalidArgument;
  }
  if (h->wire != RN_WIRE_VERSION) {
    RN_WARN(
        "connect: the peer's railnet speaks wire version %u, this one %u; use the same "
        "railnet build on every node",
        h->wire, RN_WIRE_VERSION);
    return ncclInvalidUsage;
  }
  if (h->transport != rn_core.transport_index) {
    RN_WARN(
        "connect: peer uses transport %s, this process uses %s; set RAILNET_TRANSPORT alike "
        "on every node",
        rn_registry_get(h->transport)->name, rn_core.transport->name);
    return ncclInvalidUsage;
  }
  /* connect state is keyed by the handle's address, not stored in it, so
   * garbage handle bytes can never be dereferenced as a pointer. */
  pthread_mutex_lock(&rn_core.lock);
  int slot = rn_core_pending_find(handle, h->nonce);
  if (slot < 0 && rn_core.npending == RN_MAX_PENDING_CONNECTS) {
    /* Back-pressure, not an error: NCCL calls connect again until it gets
     * a comm, and by then some of the others have completed.  Nothing is
     * dialed meanwhile. */
    static int said; /* under rn_core.lock */
    int say = !said++;
    pthread_mutex_unlock(&rn_core.lock);
    if (say)
      RN_INFO(NCCL_INIT | NCCL_NET,
              "connect: %d connections already in progress; further ones wait their turn",
              RN_MAX_PENDING_CONNECTS);
    return ncclSuccess;
  }
  void *state = slot >= 0 ? rn_core.pending[slot].state : NULL;
  if (slot >= 0) rn_core_pending_take(slot);
  pthread_mutex_unlock(&rn_core.lock);

  ncclResult_t res =
      rn_core.transport->connect(&v->rails, h, rn_core_traffic_class(traffic_class), &state, scomm);
  if (res != ncclSuccess) return res;
  if (*scomm != NULL) {
    rn_core_stamp(*scomm, RN_COMM_SEND, dev);
    return ncclSuccess;
  }
  if (state == NULL) return ncclSuccess;
  pthread_mutex_lock(&rn_core.lock);
  if (rn_core.npending == RN_MAX_PENDING_CONNECTS) {
    /* Only when other threads filled the table meanwhile: start over on
     * NCCL's next call. */
    pthread_mutex_unlock(&rn_core.lock);
    rn_core.transport->connect_abort(state);
    return ncclSuccess;
  }
  rn_core_pending_add(handle, h->nonce, state);
  pthread_mutex_unlock(&rn_core.lock);
  return ncclSuccess;
}

static ncclResult_t rn_core_comm(void *comm, int kind_mask, const char *what) {
  const struct rn_comm_base *b = comm;
  if (b == NULL) {
    RN_WARN("%s: NULL comm", what);
    return ncclInvalidArgument;
  }
  if (b->magic != RN_COMM_MAGIC || !((1 << b->kind) & kind_mask) ||
      b->transport != rn_core.transport_index) {
    RN_WARN("%s: %p is not a railnet comm of the right kind", what, comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

#define RN_K_LISTEN (1 << RN_COMM_LISTEN)
#define RN_K_SEND (1 << RN_COMM_SEND)
#define RN_K_RECV (1 << RN_COMM_RECV)

ncclResult_t rn_core_accept(void *lcomm, void **rcomm, ncclNetDeviceHandle_t **dev_comm) {
  RN_CHECK_ARG(rcomm != NULL, "accept: NULL comm pointer");
  *rcomm = NULL;
  if (dev_comm != NULL) *dev_comm = NULL;
  RN_CHECK(rn_core_comm(lcomm, RN_K_LISTEN, "accept"));
  RN_CHECK(rn_core.transport->accept(lcomm, rcomm));
  if (*rcomm != NULL) rn_core_stamp(*rcomm, RN_COMM_RECV, ((struct rn_comm_base *)lcomm)->vdev);
  return ncclSuccess;
}

ncclResult_t rn_core_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  RN_CHECK(rn_core_comm(comm, RN_K_SEND | RN_K_RECV, "regMr"));
  RN_CHECK_ARG(mh != NULL, "regMr: NULL handle pointer");
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    RN_WARN("regMr: unknown memory type %d", type);
    return ncclInvalidArgument;
  }
  return rn_core.transport->reg_mr(comm, data, size, type, mh);
}

ncclResult_t rn_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                   int fd, void **mh) {
  RN_CHECK(rn_core_comm(comm, RN_K_SEND | RN_K_RECV, "regMrDmaBuf"));
  RN_CHECK_ARG(mh != NULL, "regMrDmaBuf: NULL handle pointer");
  return rn_core.transport->reg_mr_dmabuf(comm, data, size, type, offset, fd, mh);
}

ncclResult_t rn_core_dereg_mr(void *comm, void *mh) {
  RN_CHECK(rn_core_comm(comm, RN_K_SEND | RN_K_RECV, "deregMr"));
  if (mh == NULL) return ncclSuccess;
  return rn_core.transport->dereg_mr(comm, mh);
}

ncclResult_t rn_core_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req) {
  RN_CHECK(rn_core_comm(scomm, RN_K_SEND, "isend"));
  RN_CHECK_ARG(req != NULL, "isend: NULL request pointer");
  RN_CHECK_ARG(data != NULL || size == 0, "isend: NULL buffer of %zu bytes", size);
  if (size > INT_MAX) {
    RN_WARN("isend: %zu bytes exceeds the %d-byte limit test() can report", size, INT_MAX);
    return ncclInvalidArgument;
  }
  *req = NULL;
  return rn_core.transport->isend(scomm, data, size, tag, mh, req);
}

ncclResult_t rn_core_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                           void **mhs, void **req) {
  RN_CHECK(rn_core_comm(rcomm, RN_K_RECV, "irecv"));
  RN_CHECK_ARG(req != NULL && data != NULL && sizes != NULL && tags != NULL,
               "irecv: NULL array or request pointer");
  if (n < 1 || n > RN_MAX_RECVS) {
    RN_WARN("irecv: %d buffers, must be 1..%d (maxRecvs)", n, RN_MAX_RECVS);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] > INT_MAX) {
      RN_WARN("irecv: buffer %d of %zu bytes exceeds %d", i, sizes[i], INT_MAX);
      return ncclInvalidArgument;
    }
    RN_CHECK_ARG(data[i] != NULL || sizes[i] == 0, "irecv: NULL buffer %d of %zu bytes", i,
                 sizes[i]);
  }
  *req = NULL;
  return rn_core.transport->irecv(rcomm, n, data, sizes, tags, mhs, req);
}

ncclResult_t rn_core_iflush(void *rcomm, int n, void **data, int *sizes, void **mhs, void **req) {
  RN_CHECK(rn_core_comm(rcomm, RN_K_RECV, "iflush"));
  RN_CHECK_ARG(req != NULL, "iflush: NULL request pointer");
  *req = NULL;
  if (n < 1 || n > RN_MAX_RECVS || data == NULL || sizes == NULL) {
    RN_WARN("iflush: bad buffer list (n=%d)", n);
    return ncclInvalidArgument;
  }
  return rn_core.transport->iflush(rcomm, n, data, sizes, mhs, req);
}

ncclResult_t rn_core_test(void *req, int *done, int *sizes) {
  const struct rn_req_base *b = req;
  RN_CHECK_ARG(done != NULL, "test: NULL done pointer");
  *done = 0;
  if (b == NULL || b->magic != RN_REQ_MAGIC || b->transport >= rn_registry_count()) {
    RN_WARN("test: %p is not a live railnet request", req);
    return ncclInvalidArgument;
  }
  size_t sz[RN_MAX_RECVS];
  int nsz = 0;
  ncclResult_t res = rn_registry_get(b->transport)->test(req, done, sz, &nsz);
  if (res != ncclSuccess || !*done || sizes == NULL) return res;
  /* Every size was range-checked against INT_MAX at post time. */
  for (int i = 0; i < nsz && i < RN_MAX_RECVS; i++) sizes[i] = (int)sz[i];
  return ncclSuccess;
}

ncclResult_t rn_core_close_send(void *scomm) {
  if (scomm == NULL) return ncclSuccess;
  RN_CHECK(rn_core_comm(scomm, RN_K_SEND, "closeSend"));
  ((struct rn_comm_base *)scomm)->magic = 0;
  return rn_core.transport->close_send(scomm);
}

ncclResult_t rn_core_close_recv(void *rcomm) {
  if (rcomm == NULL) return ncclSuccess;
  RN_CHECK(rn_core_comm(rcomm, RN_K_RECV, "closeRecv"));
  ((struct rn_comm_base *)rcomm)->magic = 0;
  return rn_core.transport->close_recv(rcomm);
}

ncclResult_t rn_core_close_listen(void *lcomm) {
  if (lcomm == NULL) return ncclSuccess;
  RN_CHECK(rn_core_comm(lcomm, RN_K_LISTEN, "closeListen"));
  ((struct rn_comm_base *)lcomm)->magic = 0;
  return rn_core.transport->close_listen(lcomm);
}

ncclResult_t rn_core_get_device_mr(void *comm, void *mh, void **dptr) {
  (void)comm;
  (void)mh;
  RN_CHECK_ARG(dptr != NULL, "getDeviceMr: NULL output pointer");
  *dptr = NULL; /* host-side plugin: nothing for device code */
  return ncclSuccess;
}

ncclResult_t rn_core_irecv_consumed(void *rcomm, int n, void *req) {
  (void)n;
  (void)req;
  return rn_core_comm(rcomm, RN_K_RECV, "irecvConsumed");
}
