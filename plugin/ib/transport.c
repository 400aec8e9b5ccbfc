/* The verbs transport's one table, and finalize, which needs every other
 * part: discovery.c and gdr.c find the devices, connect.c sets up
 * connections, reg.c registers memory, p2p.c is the data path; the verbs
 * wrappers are in ibvwrap.c, the registration cache in mr_cache.c. */
#include "railnet/log.h"
#include "ib.h"

static void rn_ib_fini(void) {
  /* Comms left open (abort, unload) hold QPs, CQs and MRs on the devices:
   * free them first, never waiting on a peer. */
  int n = rn_ib_close_all();
  if (n > 0) RN_INFO(NCCL_INIT | NCCL_NET, "closed %d comm(s) left open at finalize", n);
  n = rn_ib_mh_free_all();
  if (n > 0) RN_INFO(NCCL_INIT | NCCL_NET, "released %d registration(s) left at finalize", n);
  rn_ib_devices_close();
}

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
