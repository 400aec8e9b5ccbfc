/* libibverbs loaded with dlopen at run time (never linked), each entry point
 * wrapped once.  Versioned lookups first (IBVERBS_1.1 is the ABI every
 * rdma-core since 2016 exports), plain dlsym as the fallback. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "railnet/check.h"
#include "ibvwrap.h"

struct rn_ibv_syms {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  const char *(*get_device_name)(struct ibv_device *);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
  int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  int (*query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
                      size_t);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  const char *(*wc_status_str)(enum ibv_wc_status);
};

static struct rn_ibv_syms syms;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static ncclResult_t load_result = ncclSystemError;
static char load_why[256]; /* why loading failed; written once, in load_once */

static void *rn_ibv_sym(void *lib, const char *name, const char *version) {
  void *p = version ? dlvsym(lib, name, version) : NULL;
  return p ? p : dlsym(lib, name);
}

static void rn_ibv_load_once(void) {
  void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(load_why, sizeof(load_why), "libibverbs.so.1 not loadable: %s", dlerror());
    return;
  }
#define RN_IBV_REQ(field, name, ver)                                          \
  do {                                                                        \
    *(void **)&syms.field = rn_ibv_sym(lib, name, ver);                       \
    if (!syms.field) {                                                        \
      snprintf(load_why, sizeof(load_why), "libibverbs.so.1 lacks %s", name); \
      dlclose(lib);                                                           \
      memset(&syms, 0, sizeof(syms));                                         \
      return;                                                                 \
    }                                                                         \
  } while (0)
  RN_IBV_REQ(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
  RN_IBV_REQ(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
  RN_IBV_REQ(get_device_name, "ibv_get_device_name", "IBVERBS_1.1");
  RN_IBV_REQ(open_device, "ibv_open_device", "IBVERBS_1.1");
  RN_IBV_REQ(close_device, "ibv_close_device", "IBVERBS_1.1");
  RN_IBV_REQ(query_device, "ibv_query_device", "IBVERBS_1.1");
  RN_IBV_REQ(query_port, "ibv_query_port", "IBVERBS_1.1");
  RN_IBV_REQ(query_gid, "ibv_query_gid", "IBVERBS_1.1");
  RN_IBV_REQ(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
  RN_IBV_REQ(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
  RN_IBV_REQ(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
  RN_IBV_REQ(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
  RN_IBV_REQ(create_cq, "ibv_create_cq", "IBVERBS_1.1");
  RN_IBV_REQ(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1");
  RN_IBV_REQ(create_qp, "ibv_create_qp", "IBVERBS_1.1");
  RN_IBV_REQ(modify_qp, "ibv_modify_qp", "IBVERBS_1.1");
  RN_IBV_REQ(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
  RN_IBV_REQ(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1");
#undef RN_IBV_REQ
  /* Optional: absent in older rdma-core. */
  *(void **)&syms.query_gid_ex = rn_ibv_sym(lib, "_ibv_query_gid_ex", "IBVERBS_1.11");
  *(void **)&syms.reg_dmabuf_mr = rn_ibv_sym(lib, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
  load_result = ncclSuccess; /* the handle stays open for the process lifetime */
}

ncclResult_t rn_ibv_load(char *why, size_t whylen) {
  pthread_once(&load_once, rn_ibv_load_once);
  if (load_result != ncclSuccess) snprintf(why, whylen, "%s", load_why);
  return load_result;
}

int rn_ibv_has_dmabuf(void) { return syms.reg_dmabuf_mr != NULL; }

/* Constructors return NULL and set errno (sometimes 0: report EIO then). */
static int rn_ibv_errno(void) { return errno ? errno : EIO; }

/* An int-returning call: 0 is success, a negative result leaves the
 * reason in errno, a positive one is the errno value. */
static ncclResult_t rn_ibv_rc(const char *name, int rc) {
  if (rc == 0) return ncclSuccess;
  RN_WARN("%s failed: %s", name, strerror(rc < 0 ? rn_ibv_errno() : rc));
  return ncclSystemError;
}

/* A constructor's result (the caller cleared errno before the call). */
static ncclResult_t rn_ibv_made(const char *name, const void *made) {
  if (made != NULL) return ncclSuccess;
  RN_WARN("%s failed: %s", name, strerror(rn_ibv_errno()));
  return ncclSystemError;
}

ncclResult_t rn_ibv_get_device_list(struct ibv_device ***list, int *n) {
  errno = 0;
  *list = syms.get_device_list(n);
  if (*list == NULL && (errno == ENOSYS || errno == ENODEV || errno == ENOENT)) {
    /* No RDMA subsystem on this host (no /sys/class/infiniband): an
     * expected condition, not an error; the caller says so once. */
    return ncclSystemError;
  }
  const int err = errno;
  ncclResult_t res = rn_ibv_made("ibv_get_device_list", *list);
  errno = err; /* the caller names the cause too */
  return res;
}

void rn_ibv_free_device_list(struct ibv_device **list) { syms.free_device_list(list); }

const char *rn_ibv_get_device_name(struct ibv_device *dev) {
  const char *name = syms.get_device_name(dev);
  return name ? name : "?";
}

ncclResult_t rn_ibv_open_device(struct ibv_device *dev, struct ibv_context **context) {
  errno = 0;
  *context = syms.open_device(dev);
  return rn_ibv_made("ibv_open_device", *context);
}

ncclResult_t rn_ibv_close_device(struct ibv_context *context) {
  return rn_ibv_rc("ibv_close_device", syms.close_device(context));
}

ncclResult_t rn_ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
  return rn_ibv_rc("ibv_query_device", syms.query_device(context, attr));
}

ncclResult_t rn_ibv_query_port(struct ibv_context *context, uint8_t port,
                               struct ibv_port_attr *attr) {
  /* As verbs.h's inline does: the extended op when the provider has it,
   * else the exported symbol filling the compat layout (a prefix). */
  struct verbs_context *vctx = verbs_get_ctx_op(context, query_port);
  int rc;
  memset(attr, 0, sizeof(*attr));
  if (vctx)
    rc = vctx->query_port(context, port, attr, sizeof(*attr));
  else
    rc = syms.query_port(context, port, (struct _compat_ibv_port_attr *)attr);
  return rn_ibv_rc("ibv_query_port", rc);
}

ncclResult_t rn_ibv_query_gid(struct ibv_context *context, uint8_t port, int index,
                              union ibv_gid *gid) {
  return rn_ibv_rc("ibv_query_gid", syms.query_gid(context, port, index, gid));
}

int rn_ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry) {
  if (!syms.query_gid_ex) return EOPNOTSUPP;
  return syms.query_gid_ex(context, port, index, entry, 0, sizeof(*entry));
}

ncclResult_t rn_ibv_alloc_pd(struct ibv_context *context, struct ibv_pd **pd) {
  errno = 0;
  *pd = syms.alloc_pd(context);
  return rn_ibv_made("ibv_alloc_pd", *pd);
}

ncclResult_t rn_ibv_dealloc_pd(struct ibv_pd *pd) {
  return rn_ibv_rc("ibv_dealloc_pd", syms.dealloc_pd(pd));
}

ncclResult_t rn_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access,
                           struct ibv_mr **mr) {
  errno = 0;
  *mr = syms.reg_mr(pd, addr, len, access);
  if (!*mr) {
    int err = rn_ibv_errno();
    RN_WARN("ibv_reg_mr(%p, %zu bytes, access 0x%x) failed: %s", addr, len, access, strerror(err));
    return ncclSystemError;
  }
  return ncclSuccess;
}

int rn_ibv_reg_dmabuf_mr_probe(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                               int fd, int access, struct ibv_mr **mr) {
  *mr = NULL;
  if (!syms.reg_dmabuf_mr) return EOPNOTSUPP;
  errno = 0;
  *mr = syms.reg_dmabuf_mr(pd, offset, len, iova, fd, access);
  return *mr ? 0 : rn_ibv_errno();
}

ncclResult_t rn_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                  int fd, int access, struct ibv_mr **mr) {
  int err = rn_ibv_reg_dmabuf_mr_probe(pd, offset, len, iova, fd, access, mr);
  if (err) {
    RN_WARN("ibv_reg_dmabuf_mr(fd %d, offset %llu, %zu bytes, iova 0x%llx) failed: %s", fd,
            (unsigned long long)offset, len, (unsigned long long)iova, strerror(err));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_ibv_dereg_mr(struct ibv_mr *mr) {
  return rn_ibv_rc("ibv_dereg_mr", syms.dereg_mr(mr));
}

ncclResult_t rn_ibv_create_cq(struct ibv_context *context, int cqe, struct ibv_cq **cq) {
  errno = 0;
  *cq = syms.create_cq(context, cqe, NULL, NULL, 0);
  return rn_ibv_made("ibv_create_cq", *cq);
}

ncclResult_t rn_ibv_destroy_cq(struct ibv_cq *cq) {
  return rn_ibv_rc("ibv_destroy_cq", syms.destroy_cq(cq));
}

ncclResult_t rn_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr,
                              struct ibv_qp **qp) {
  errno = 0;
  *qp = syms.create_qp(pd, attr);
  return rn_ibv_made("ibv_create_qp", *qp);
}

int rn_ibv_create_qp_probe(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, struct ibv_qp **qp) {
  errno = 0;
  *qp = syms.create_qp(pd, attr);
  return *qp ? 0 : rn_ibv_errno();
}

ncclResult_t rn_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  int rc = syms.modify_qp(qp, attr, mask);
  if (rc) {
    RN_WARN("ibv_modify_qp(QP %u, state %d, mask 0x%x) failed: %s", qp->qp_num, (int)attr->qp_state,
            mask, strerror(rc < 0 ? rn_ibv_errno() : rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_ibv_destroy_qp(struct ibv_qp *qp) {
  return rn_ibv_rc("ibv_destroy_qp", syms.destroy_qp(qp));
}

/* The data-path calls are inline in verbs.h (they dispatch through the
 * context's ops table), so they need no symbol. */
ncclResult_t rn_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(qp, wr, &bad);
  if (rc) {
    RN_WARN("ibv_post_send(QP %u, opcode %d) failed: %s", qp->qp_num, bad ? (int)bad->opcode : -1,
            strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr) {
  struct ibv_recv_wr *bad = NULL;
  int rc = ibv_post_recv(qp, wr, &bad);
  if (rc) {
    RN_WARN("ibv_post_recv(QP %u) failed: %s", qp->qp_num, strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, int *got) {
  int rc = ibv_poll_cq(cq, n, wc);
  if (rc < 0) {
    RN_WARN("ibv_poll_cq failed (%d)", rc);
    *got = 0;
    return ncclSystemError;
  }
  *got = rc;
  return ncclSuccess;
}

const char *rn_ibv_wc_status_str(enum ibv_wc_status status) {
  const char *s = syms.wc_status_str ? syms.wc_status_str(status) : NULL;
  return s ? s : "unknown status";
}
