/* Private to topo/: NIC filters in NCCL_IB_HCA syntax.  Owner: topo/filter.c.
 *   "mlx5_0,mlx5_1"   NICs whose name starts with one of these
 *   "^mlx5_2"          all but those
 *   "=mlx5_1"          exact names only (the '=' covers the whole list)
 *   "mlx5_0:1"         only port 1 of mlx5_0 */
#ifndef RN_TOPO_FILTER_H
#define RN_TOPO_FILTER_H

#include <stddef.h>

struct rn_topo_filter;

/* NULL or "" gives *out = NULL, which matches everything.  0 ok, -1 with
 * err for a malformed filter. */
int rn_topo_filter_parse(const char *spec, struct rn_topo_filter **out, char *err, size_t errlen);
/* 1 when the NIC (RDMA name or netdev name, port) passes the filter. */
int rn_topo_filter_test(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port);
void rn_topo_filter_free(struct rn_topo_filter *f);

#endif
