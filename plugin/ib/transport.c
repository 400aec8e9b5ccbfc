/* The verbs transport's one table.  Discovery in ib_init.c/ib_gdr.c,
 * connection setup in ib_connect.c, the data path in ib_p2p.c, the verbs
 * wrappers in ibvwrap.c, the registration cache in mr_cache.c. */
#include "ib.h"

const struct rn_transport rn_transport_ib = {
    .name = "ib",
    .init = rn_ib_init,
    .fini = rn_ib_fini,
    .listen = rn_ib_listen,
    .connect = rn_ib_connect,
    .connect_abort = rn_ib_connect_abort,
    .accept = rn_ib_accept,
    .reg_mr = rn_ib_reg_mr,
    .reg_mr_dmabuf = rn_ib_reg_mr_dmabuf,
    .dereg_mr = rn_ib_dereg_mr,
    .isend = rn_ib_isend,
    .irecv = rn_ib_irecv,
    .iflush = rn_ib_iflush,
    .test = rn_ib_test,
    .close_send = rn_ib_close_send,
    .close_recv = rn_ib_close_recv,
    .close_listen = rn_ib_close_listen,
};
