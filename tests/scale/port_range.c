/* Connecting sockets do not each reserve an ephemeral port, and each
 * comm's connections go to a port of its own: with the namespace's port
 * range cut to 70 ports (tests/scale/port-range.sh), 60 comms, whose 60
 * listeners take 60 ports for themselves, still come up on the remaining
 * 10, since their 360 connecting sockets (a control connection, the
 * rendezvous connection of the streams' opening and 4 data streams each)
 * share ports between destinations; each carries verified data, and no
 * WARN is logged.  When every connecting socket reserved a port at bind,
 * the range ran out at the 10th connect; when the streams of every comm
 * went to the few listening sockets the receiver keeps for reuse, the
 * sender's ports to those few destinations ran out instead (a port serves
 * one connection per destination, and a closed one for a minute more in
 * TIME_WAIT).  The listen comms close once they accepted, as NCCL closes
 * them, and each comm's data streams open on its listener's port. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define NCOMMS 60
#define NSTREAMS 4
#define RN_STR_(x) #x
#define RN_STR(x) RN_STR_(x)

static int side(struct rn_peer *p) {
  void **comms = calloc(NCOMMS, sizeof(void *)), **lcomms = calloc(NCOMMS, sizeof(void *));
  if (comms == NULL || lcomms == NULL) return peer_fail(p, "out of memory");
  int rc = peer_connect(p, NCOMMS, comms, lcomms, 60);
  int is_send = p->role == RN_SENDER;
  /* As NCCL does once a listen comm has accepted: its port stays with the
   * comm's sockets, and its data streams open on it (RAILNET_SOCKET_LAZY). */
  for (int i = 0; i < NCOMMS && rc == 0 && !is_send; i++)
    if (rn_net_close_listen(&p->net, lcomms[i]) != ncclSuccess)
      rc = peer_fail(p, "closeListen %d", i);
  for (int i = 0; i < NCOMMS && rc == 0; i++) rc = rn_stream_check(p, comms[i], is_send);
  if (rc == 0 && peer_sync(p, 60) != 0) rc = peer_fail(p, "peer gone");
  if (rc == 0 && rn_log_warns() != 0) {
    char w[512] = "";
    rn_log_first_warn("", w, sizeof w);
    rc = peer_fail(p, "%d WARN(s), first: %s", rn_log_warns(), w);
  }
  if (peer_close(p, NCOMMS, comms, NULL) != 0 && rc == 0) rc = -1;
  free(comms);
  free(lcomms);
  return rc;
}

/* With all but the range's last 10 ports reserved
 * (net.ipv4.ip_local_reserved_ports, written here: the namespace is this
 * test's own), 8 listen comms open at once each take one of those 10,
 * as the kernel's own choice would. */
static int reserved_ports(char *why, size_t len) {
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_reserved_ports", "w");
  if (f == NULL || fprintf(f, "40000-40059\n") < 0 || fclose(f) != 0)
    return snprintf(why, len, "cannot reserve ports in the namespace"), -1;
  struct rn_net n;
  char err[256] = "";
  int rc = 0, nl = 0;
  void *lc[8] = {0};
  if (rn_net_open(&n, 11, err, sizeof err) != 0 || rn_net_init(&n) != ncclSuccess)
    return snprintf(why, len, "load the plugin: %s", err), -1;
  for (; nl < 8 && rc == 0; nl++) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    if (rn_net_listen(&n, 0, handle, &lc[nl]) != ncclSuccess) {
      snprintf(why, len, "listen %d failed", nl);
      rc = -1;
      break;
    }
    int port = rn_handle_port(handle);
    if (port < 40060 || port > 40069) {
      snprintf(why, len, "listener on port %d", port);
      rc = -1;
    }
  }
  for (int i = 0; i < nl; i++)
    if (lc[i] != NULL && rn_net_close_listen(&n, lc[i]) != ncclSuccess) rc = -1;
  if (rc == 0 && rn_log_warns() != 0) {
    snprintf(why, len, "a WARN");
    rc = -1;
  }
  rn_net_finalize(&n);
  rn_net_close(&n);
  f = fopen("/proc/sys/net/ipv4/ip_local_reserved_ports", "w");
  if (f != NULL) {
    fprintf(f, "\n");
    fclose(f);
  }
  return rc;
}

/* reserved_ports in a child of its own, before the comms run: their
 * connections leave TIME_WAIT sockets on the range's ports for a minute,
 * which would leave too few of the 10 free. */
static int reserved_ports_child(char *why, size_t len) {
  int fd[2];
  if (pipe(fd) != 0) return snprintf(why, len, "pipe"), -1;
  pid_t pid = fork();
  if (pid == 0) {
    char w[512] = "";
    int rc = reserved_ports(w, sizeof w);
    ssize_t k = write(fd[1], w, strlen(w));
    (void)k;
    _exit(rc == 0 ? 0 : 1);
  }
  close(fd[1]);
  ssize_t k = pid > 0 ? read(fd[0], why, len - 1) : -1;
  why[k > 0 ? k : 0] = '\0';
  close(fd[0]);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return snprintf(why, len, "fork"), -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("1..2\n");
  char why[512] = "";
  int rc = reserved_ports_child(why, sizeof why);
  tap_result(rc == 0,
             "listeners take no reserved port: with 60 of the 70 reserved, 8 listen comms "
             "open at once are on the other 10, no WARN%s%s",
             rc ? ": " : "", rc ? why : "");
  struct rn_pair_opts o = {.version = 11,
                           .timeout_s = 120,
                           .init = 1,
                           .seed = 11,
                           .env = "RAILNET_SOCKET_NSTREAMS=" RN_STR(NSTREAMS) ",RAILNET_SOCKET_NTHREADS=0"};
  why[0] = '\0';
  rc = rn_run_pair(side, side, &o, why, sizeof why);
  tap_result(rc == 0,
             "%d comms on %d listeners fit a 70-port range: their %d connecting "
             "sockets share the other 10 ports, every comm carries verified data, no WARN%s%s",
             NCOMMS, NCOMMS, NCOMMS * (2 + NSTREAMS), rc ? ": " : "", rc ? why : "");
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
