/* Private to topo/: NIC filters in NCCL_IB_HCA syntax.  Owner: topo/filter.c.
 *   "mlx5_0,mlx5_1"    NICs whose device name starts with one of these
 *   "^mlx5_2"          all but those
 *   "=mlx5_1"          exact names only (the '=' covers the whole list)
 *   "mlx5_0:1"         only verbs port 1 of mlx5_0
 *   "mlx5_0:1:3:0"     ... and NCCL 2.30's rail 3, plane 0 for it
 * Names match the RDMA device (or its netdev); the port is the verbs port,
 * never an XML port attribute. */
#ifndef RN_TOPO_FILTER_H
#define RN_TOPO_FILTER_H

#include <stddef.h>

struct rn_topo_filter;

/* NULL or "" gives *out = NULL, which matches everything.  0 ok, -1 with
 * err for a malformed filter. */
int rn_topo_filter_parse(const char *spec, struct rn_topo_filter **out, char *err, size_t errlen);
/* 1 when the NIC (RDMA device name or netdev name, verbs port) passes. */
int rn_topo_filter_test(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port);
/* The rail and plane ids an including entry gives a NIC (-1 when none). */
void rn_topo_filter_ids(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port, int *rail, int *plane);
void rn_topo_filter_free(struct rn_topo_filter *f);

#endif
