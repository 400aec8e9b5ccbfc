/* libibverbs, dlopened once and wrapped as rn_ibv_*.  Transports never call
 * ibv_* directly: every wrapper maps the verbs return convention to
 * ncclResult_t and WARNs naming the call (except where noted as a probe).
 * The library is optional at run time: rn_ibv_load() fails cleanly, saying
 * why, when libibverbs.so.1 is absent. */
#ifndef RN_IBVWRAP_H
#define RN_IBVWRAP_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include "nccl/net_common.h"

/* ncclSuccess when the library and its required symbols are loaded; else
 * why says what is missing.  Safe to call repeatedly and from several
 * threads. */
ncclResult_t rn_ibv_load(char *why, size_t whylen);
/* Optional entry points: 1 when the loaded library provides them. */
int rn_ibv_has_dmabuf(void);

/* No RDMA subsystem (ENOSYS, ENODEV, ENOENT) fails without a WARN: errno
 * says which. */
ncclResult_t rn_ibv_get_device_list(struct ibv_device ***list, int *n);
void rn_ibv_free_device_list(struct ibv_device **list);
const char *rn_ibv_get_device_name(struct ibv_device *dev);
ncclResult_t rn_ibv_open_device(struct ibv_device *dev, struct ibv_context **context);
ncclResult_t rn_ibv_close_device(struct ibv_context *context);
ncclResult_t rn_ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr);
ncclResult_t rn_ibv_query_port(struct ibv_context *context, uint8_t port,
                               struct ibv_port_attr *attr);
ncclResult_t rn_ibv_query_gid(struct ibv_context *context, uint8_t port, int index,
                              union ibv_gid *gid);
/* Probe: returns 0 or an errno value, never WARNs (unused GID slots fail). */
int rn_ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry);
ncclResult_t rn_ibv_alloc_pd(struct ibv_context *context, struct ibv_pd **pd);
ncclResult_t rn_ibv_dealloc_pd(struct ibv_pd *pd);
ncclResult_t rn_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access,
                           struct ibv_mr **mr);
ncclResult_t rn_ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                  int fd, int access, struct ibv_mr **mr);
/* Probe form: returns 0 or an errno value (EOPNOTSUPP when the symbol is
 * absent), never WARNs. */
int rn_ibv_reg_dmabuf_mr_probe(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                               int fd, int access, struct ibv_mr **mr);
ncclResult_t rn_ibv_dereg_mr(struct ibv_mr *mr);
ncclResult_t rn_ibv_create_cq(struct ibv_context *context, int cqe, struct ibv_cq **cq);
ncclResult_t rn_ibv_destroy_cq(struct ibv_cq *cq);
ncclResult_t rn_ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, struct ibv_qp **qp);
/* Probe form: returns 0 or an errno value, never WARNs. */
int rn_ibv_create_qp_probe(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, struct ibv_qp **qp);
ncclResult_t rn_ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
ncclResult_t rn_ibv_destroy_qp(struct ibv_qp *qp);
ncclResult_t rn_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr);
ncclResult_t rn_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr);
/* *got completions (0..n) written to wc. */
ncclResult_t rn_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, int *got);
const char *rn_ibv_wc_status_str(enum ibv_wc_status status);

#endif
