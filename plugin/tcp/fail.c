/* Failing a TCP comm: the sticky error every later test() returns (later
 * isend/irecv hand out requests that fail there, p2p.c), one WARN
 * with the reason, and the sockets shut down so the peer learns at once.
 * Called from the caller's thread and from helper threads alike.  The
 * descriptors change (a control connection moved back, a stream dialled
 * again) and close only under the comm's lock, so a helper thread shuts
 * them down only if it gets that lock at once, else leaves it to the
 * caller's next call. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include "tcp.h"

_Thread_local int rn_tcp_on_helper;

void rn_tcp_shut(struct rn_tcp_comm *c) {
  if (!atomic_exchange(&c->shut_due, 0)) return;
  shutdown(c->ctrl_fd, SHUT_RDWR);
  for (int i = 0; i < c->nstreams; i++) shutdown(c->stream[i].fd, SHUT_RDWR);
}

ncclResult_t rn_tcp_fail(struct rn_tcp_comm *c, ncclResult_t res, const char *fmt, ...) {
  int expected = ncclSuccess;
  if (!atomic_compare_exchange_strong(&c->error, &expected, (int)res)) return res;
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  RN_WARN("%s comm to %s failed (error %d): %s", c->is_recv ? "receive" : "send", c->peer, (int)res,
          why);
  /* A usage error leaves the connection sound; anything else means the
   * peer or the path is broken: stop talking, so the peer's next call
   * fails too.  The fds stay open until close. */
  if (res == ncclInvalidUsage) return res;
  atomic_store(&c->shut_due, 1);
  if (!rn_tcp_on_helper) {
    rn_tcp_shut(c);
  } else if (pthread_mutex_trylock(&c->lock) == 0) { /* never waits: the holder may wait on us */
    rn_tcp_shut(c);
    pthread_mutex_unlock(&c->lock);
  }
  return res;
}

ncclResult_t rn_tcp_failed(struct rn_tcp_comm *c, const char *call) {
  int e = atomic_load(&c->error);
  if (e != ncclSuccess)
    RN_WARN("%s on a comm to %s that already failed (error %d)", call, c->peer, e);
  return (ncclResult_t)e;
}
