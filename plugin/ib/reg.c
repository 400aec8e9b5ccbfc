/* Verbs registrations: the MR cache's register/deregister callbacks for a
 * device, and regMr/regMrDmaBuf/deregMr, one cache entry per rail of the
 * comm, with the list of live registrations finalize releases. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include "railnet/check.h"
#include "ib.h"

#define RN_IB_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct rn_ib_dmabuf_arg {
  uintptr_t data;  /* the address NCCL gave */
  uint64_t offset; /* its offset inside the dma-buf */
  int fd;
};

ncclResult_t rn_ib_mr_reg_cb(void *owner, uintptr_t addr, size_t len, const void *arg,
                             void **handle) {
  struct rn_ib_device *device = owner;
  const struct rn_ib_dmabuf_arg *d = arg;
  struct ibv_mr *mr;
  if (d) {
    /* The cache may have widened the range down to a page boundary; the
     * dma-buf offset moves with it (the caller made sure it can). */
    uint64_t off = d->offset - (uint64_t)(d->data - addr);
    RN_CHECK(rn_ibv_reg_dmabuf_mr(device->pd, off, len, (uint64_t)addr, d->fd, RN_IB_ACCESS, &mr));
  } else {
    RN_CHECK(rn_ibv_reg_mr(device->pd, (void *)addr, len, RN_IB_ACCESS, &mr));
  }
  RN_TRACE(NCCL_NET, "%s registered [0x%lx, +%zu) lkey 0x%x", device->name, (unsigned long)addr,
           len, mr->lkey);
  *handle = mr;
  return ncclSuccess;
}

void rn_ib_mr_dereg_cb(void *owner, void *handle) {
  (void)owner;
  (void)rn_ibv_dereg_mr(handle);
}

static struct rn_shared_list rn_ib_mh_list = RN_SHARED_LIST_INIT(rn_ib_mh_list);

int rn_ib_mh_free_all(void) {
  int n = 0;
  pthread_mutex_lock(&rn_ib_mh_list.lock);
  while (!rn_list_empty(&rn_ib_mh_list.head)) {
    struct rn_list *first = rn_ib_mh_list.head.next;
    rn_list_del(first);
    free(RN_LIST_ENTRY(first, struct rn_ib_mh, live));
    n++;
  }
  pthread_mutex_unlock(&rn_ib_mh_list.lock);
  return n;
}

static ncclResult_t rn_ib_reg(struct rn_ib_comm *c, void *data, size_t size, int type,
                              const struct rn_ib_dmabuf_arg *d, int flags, void **out) {
  ncclResult_t res = ncclSuccess;
  struct rn_ib_mh *mh = calloc(1, sizeof(*mh));
  if (!mh) {
    RN_WARN("out of memory for a registration");
    return ncclSystemError;
  }
  mh->type = type;
  for (int r = 0; r < c->nrails; r++) {
    mh->device[r] = c->rail[r].port->device;
    RN_CHECK_GOTO(rn_mr_cache_get(mh->device[r]->mr_cache, data, size, flags, d, &mh->ent[r]), res,
                  out_put);
    mh->nrails = r + 1;
  }
  rn_shared_list_add(&rn_ib_mh_list, &mh->live);
  *out = mh;
  return ncclSuccess;
out_put:
  for (int r = mh->nrails - 1; r >= 0; r--) rn_mr_cache_put(mh->device[r]->mr_cache, mh->ent[r]);
  free(mh);
  return res;
}

ncclResult_t rn_ib_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  struct rn_ib_comm *c = comm;
  /* CUDA pointers go through plain ibv_reg_mr only with peermem loaded. */
  for (int r = 0; r < c->nrails && type == NCCL_PTR_CUDA; r++) {
    const struct rn_nic *nic = c->rail[r].port->nic;
    if (!(nic->ptr_support & NCCL_PTR_CUDA)) {
      RN_WARN(
          "regMr of CUDA memory %p (%zu bytes) on %s, which cannot register GPU memory "
          "without nvidia-peermem (use regMrDmaBuf if DMABUF is advertised)",
          data, size, nic->name);
      return ncclInvalidArgument;
    }
  }
  return rn_ib_reg(comm, data, size, type, NULL, 0, mh);
}

ncclResult_t rn_ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mh) {
  /* NCCL closes fd after this call: the MR keeps its own reference. */
  struct rn_ib_dmabuf_arg d = {.data = (uintptr_t)data, .offset = offset, .fd = fd};
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t below = (uint64_t)((uintptr_t)data & (page - 1));
  return rn_ib_reg(comm, data, size, type, &d, offset >= below ? 0 : RN_MR_EXACT, mh);
}

ncclResult_t rn_ib_dereg_mr(void *comm, void *mhp) {
  (void)comm;
  struct rn_ib_mh *mh = mhp;
  rn_shared_list_del(&rn_ib_mh_list, &mh->live);
  for (int r = mh->nrails - 1; r >= 0; r--) rn_mr_cache_put(mh->device[r]->mr_cache, mh->ent[r]);
  free(mh);
  return ncclSuccess;
}
