/* The two-process runner: a receiver and a sender child, each loading the
 * plugin itself after applying its own environment, connected through
 * pipes for the handle exchange and barriers. */
#include "rn_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int peer_fail(struct rn_peer *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->why, sizeof p->why, fmt, ap);
  va_end(ap);
  return -1;
}

int peer_check(struct rn_peer *p, ncclResult_t r, const char *what) {
  if (r == ncclSuccess) return 0;
  if (p->why[0] == '\0') peer_fail(p, "%s: %s", what, rn_result_str(r));
  return -1;
}

int peer_write(struct rn_peer *p, const void *buf, size_t len) {
  return rn_write_all(p->to_peer, buf, len);
}

int peer_to_parent(struct rn_peer *p, const void *buf, size_t len) {
  return rn_write_all(p->to_parent, buf, len);
}

int peer_read(struct rn_peer *p, void *buf, size_t len, double timeout_s) {
  return rn_read_all(p->from_peer, buf, len, rn_deadline(timeout_s));
}

int peer_sync(struct rn_peer *p, double timeout_s) {
  char c = 's';
  if (peer_write(p, &c, 1) != 0) return -1;
  return peer_read(p, &c, 1, timeout_s);
}

int peer_connect(struct rn_peer *p, int n, void **comms, void **lcomms, double timeout_s) {
  char(*handles)[NCCL_NET_HANDLE_MAXSIZE] = calloc((size_t)n, NCCL_NET_HANDLE_MAXSIZE);
  void **lc = calloc((size_t)n, sizeof(void *));
  int rc = -1;
  if (handles == NULL || lc == NULL) {
    peer_fail(p, "out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++) comms[i] = NULL;
  if (p->role == RN_RECEIVER) {
    for (int i = 0; i < n; i++) {
      ncclResult_t r = rn_net_listen(&p->net, p->dev, handles[i], &lc[i]);
      if (r != ncclSuccess || lc[i] == NULL) {
        peer_fail(p, "listen(dev %d) #%d: %s, listenComm %p", p->dev, i, rn_result_str(r), lc[i]);
        goto out;
      }
    }
    if (peer_write(p, handles, (size_t)n * NCCL_NET_HANDLE_MAXSIZE) != 0) {
      peer_fail(p, "handle pipe write failed");
      goto out;
    }
  } else {
    if (peer_read(p, handles, (size_t)n * NCCL_NET_HANDLE_MAXSIZE, timeout_s) != 0) {
      peer_fail(p, "no handle from the receiver within %.0f s", rn_bound_s(timeout_s));
      goto out;
    }
  }
  if (p->setup_delay_ms > 0) sleep_us(p->setup_delay_ms * 1000L);
  double end = rn_deadline(timeout_s);
  long spins = 0;
  for (;;) {
    int up = 0;
    for (int i = 0; i < n; i++) {
      if (comms[i] != NULL) {
        up++;
        continue;
      }
      ncclResult_t r = p->role == RN_RECEIVER
                           ? rn_net_accept(&p->net, lc[i], &comms[i])
                           : rn_net_connect(&p->net, p->dev, handles[i], &comms[i]);
      if (r != ncclSuccess) {
        peer_fail(p, "%s #%d: %s", p->role == RN_RECEIVER ? "accept" : "connect", i,
                  rn_result_str(r));
        goto out;
      }
      if (comms[i] != NULL) up++;
    }
    if (up == n) break;
    if (now_s() > end) {
      peer_fail(p, "%s: %d of %d comms up after %.0f s",
                p->role == RN_RECEIVER ? "accept" : "connect", up, n, rn_bound_s(timeout_s));
      goto out;
    }
    if (++spins % 64 == 0) sleep_us(50);
  }
  rc = 0;
out:
  if (p->role == RN_RECEIVER && lc != NULL) {
    for (int i = 0; i < n; i++) {
      if (lc[i] == NULL) continue;
      if (lcomms != NULL && rc == 0) {
        lcomms[i] = lc[i];
      } else {
        ncclResult_t r = rn_net_close_listen(&p->net, lc[i]);
        if (r != ncclSuccess && rc == 0) rc = peer_fail(p, "closeListen: %s", rn_result_str(r));
      }
    }
  }
  free(handles);
  free(lc);
  return rc;
}

int peer_close(struct rn_peer *p, int n, void **comms, void **lcomms) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    ncclResult_t r = ncclSuccess;
    if (comms[i] != NULL)
      r = p->role == RN_RECEIVER ? rn_net_close_recv(&p->net, comms[i])
                                 : rn_net_close_send(&p->net, comms[i]);
    if (r != ncclSuccess && rc == 0)
      rc = peer_fail(p, "%s: %s", p->role == RN_RECEIVER ? "closeRecv" : "closeSend",
                     rn_result_str(r));
    comms[i] = NULL;
    if (lcomms != NULL && lcomms[i] != NULL) {
      r = rn_net_close_listen(&p->net, lcomms[i]);
      if (r != ncclSuccess && rc == 0) rc = peer_fail(p, "closeListen: %s", rn_result_str(r));
      lcomms[i] = NULL;
    }
  }
  return rc;
}

ncclResult_t peer_wait(struct rn_peer *p, void *req, int *sizes, double timeout_s) {
  double end = rn_deadline(timeout_s);
  long spins = 0;
  for (;;) {
    int done = 0;
    ncclResult_t r = rn_net_test(&p->net, req, &done, sizes);
    if (r != ncclSuccess) return r;
    if (done) return ncclSuccess;
    /* the clock every 64 passes: in the Soft-RoCE VM a read is a system call */
    if (++spins % 64 == 0 && now_s() > end) {
      peer_fail(p, "request %p not done after %.0f s", req, rn_bound_s(timeout_s));
      return ncclInternalError;
    }
    if (spins % 256 == 0) sleep_us(20);
  }
}

int peer_post(struct rn_peer *p, void *comm, void *mh, void *buf, size_t size, int tag,
              void **req) {
  const int send = p->role == RN_SENDER;
  double end = rn_deadline(20);
  *req = NULL;
  while (*req == NULL && now_s() < end) {
    size_t sz = size;
    int t = tag;
    ncclResult_t r = send ? rn_net_isend(&p->net, comm, buf, size, tag, mh, req)
                          : rn_net_irecv(&p->net, comm, 1, &buf, &sz, &t, &mh, req);
    if (peer_check(p, r, send ? "isend" : "irecv")) return -1;
  }
  return *req != NULL ? 0 : peer_fail(p, "tag %d: request not posted", tag);
}

/* ---- the runner -------------------------------------------------------- */
static const char *role_name(enum rn_role r) { return r == RN_RECEIVER ? "receiver" : "sender"; }

/* Move this process into network namespace NAME (/run/netns/NAME, or a
 * path), the way `ip netns exec` does: setns, then a private mount
 * namespace with /sys mounted again, because sysfs shows the netdevs of
 * the namespace that mounted it and the plugin reads /sys/class/net.
 * 0 ok; -1 with the reason in err. */
static int enter_netns(const char *name, char *err, size_t errlen) {
  char path[512];
  snprintf(path, sizeof path, "%s%.400s", strchr(name, '/') ? "" : "/run/netns/", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "network namespace %.400s: %s", path, strerror(errno));
    return -1;
  }
  int rc = setns(fd, CLONE_NEWNET);
  int saved = errno;
  close(fd);
  if (rc != 0) {
    snprintf(err, errlen, "setns(%.400s): %s", path, strerror(saved));
    return -1;
  }
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) != 0) {
    snprintf(err, errlen, "private mount namespace for %.400s: %s", path, strerror(errno));
    return -1;
  }
  if (umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL) {
    snprintf(err, errlen, "umount /sys for %.400s: %s", path, strerror(errno));
    return -1;
  }
  if (mount(name, "/sys", "sysfs", 0, NULL) != 0) {
    snprintf(err, errlen, "mount sysfs for %.400s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

static void child_main(enum rn_role role, rn_peer_fn fn, struct rn_pair_opts *o, int to_peer,
                       int from_peer, int to_parent) {
  struct rn_peer p;
  memset(&p, 0, sizeof p);
  p.role = role;
  p.to_peer = to_peer;
  p.from_peer = from_peer;
  p.to_parent = to_parent;
  p.seed = o->seed;
  p.arg = o->arg;
  p.version = o->version;
  alarm((unsigned)rn_bound_s(o->timeout_s) + 5); /* backstop; the runner kills first */
  prctl(PR_SET_PDEATHSIG, SIGKILL);              /* and a killed runner takes us along */
  char err[512];
  int rc = 1;
  rn_apply_env_list(o->env);
  const char *netns = getenv(role == RN_RECEIVER ? "RN_CONF_RECV_NETNS" : "RN_CONF_SEND_NETNS");
  if (netns != NULL && *netns != '\0' && enter_netns(netns, err, sizeof err) != 0) {
    diag("%s: %s", role_name(role), err);
    exit(4);
  }
  rn_apply_env_list(getenv(role == RN_RECEIVER ? "RN_CONF_RECV_ENV" : "RN_CONF_SEND_ENV"));
  rn_default_env();
  /* RN_NETNS=NAME (through RN_CONF_RECV_ENV / RN_CONF_SEND_ENV): the same,
   * for tests that name each side's namespace in its environment list. */
  const char *ns = getenv("RN_NETNS");
  if (ns != NULL && *ns != '\0' && enter_netns(ns, err, sizeof err) != 0) {
    diag("%s: %s", role_name(role), err);
    exit(4);
  }
  p.dev = (int)rn_env_long("RN_CONF_DEV", 0);
  if (rn_net_open(&p.net, o->version, err, sizeof err) != 0) {
    diag("%s: %s", role_name(role), err);
    exit(4);
  }
  if (o->init) {
    ncclResult_t r = rn_net_init(&p.net);
    if (r != ncclSuccess) {
      diag("%s: init: %s%s%s", role_name(role), rn_result_str(r),
           rn_log_warns() ? "; last WARN: " : "", rn_log_warns() ? rn_log_last_warn() : "");
      exit(3);
    }
    r = rn_net_devices(&p.net, &p.ndev);
    if (r != ncclSuccess || p.ndev <= 0) {
      diag("%s: devices: %s, %d devices%s%s", role_name(role), rn_result_str(r), p.ndev,
           rn_log_warns() ? "; last WARN: " : "", rn_log_warns() ? rn_log_last_warn() : "");
      exit(3);
    }
    if (p.dev >= p.ndev) {
      diag("%s: RN_CONF_DEV=%d but only %d devices", role_name(role), p.dev, p.ndev);
      exit(3);
    }
    r = rn_net_props(&p.net, p.dev, &p.props);
    if (r != ncclSuccess) {
      diag("%s: getProperties(%d): %s", role_name(role), p.dev, rn_result_str(r));
      exit(3);
    }
  }
  rc = fn(&p);
  if (rc != 0 && rc != RN_EXIT_SKIP) rc = 1;
  if (rc == 1) {
    /* the plugin's first WARN says why, where the failed call only says
     * what (a flaky failure in CI leaves nothing else behind) */
    char w[320] = "";
    if (rn_log_warns() != 0) rn_log_first_warn("", w, sizeof w);
    diag("%s: %s%s%s", role_name(role), p.why[0] ? p.why : "failed", w[0] ? "; first WARN: " : "",
         w);
  }
  if (rc == RN_EXIT_SKIP && p.why[0]) note("%s: %s", role_name(role), p.why);
  if (p.net.inited) {
    ncclResult_t r = rn_net_finalize(&p.net);
    if (r != ncclSuccess) {
      diag("%s: finalize: %s", role_name(role), rn_result_str(r));
      rc = 1;
    }
  }
  /* NCCL dlcloses the plugin when the last communicator goes: any thread
   * still running inside it crashes here, as it would under NCCL. */
  rn_net_close(&p.net);
  fflush(stdout);
  exit(rc);
}

static void describe_status(const char *who, int st, char *buf, size_t len) {
  if (WIFEXITED(st))
    snprintf(buf, len, "%s exited %d", who, WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(buf, len, "%s killed by signal %d (%s)", who, WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    snprintf(buf, len, "%s status 0x%x", who, st);
}

static int child_ok(int st, int allowed_sig) {
  if (WIFEXITED(st)) return WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == RN_EXIT_SKIP;
  return WIFSIGNALED(st) && allowed_sig != 0 && WTERMSIG(st) == allowed_sig;
}

static int wait_children(pid_t *pid, int n, struct rn_pair_opts *o, char *why, size_t whylen) {
  int st[2] = {0, 0};
  int alive[2] = {n > 0, n > 1};
  double end = rn_deadline(o->timeout_s);
  double grace_end = 0;
  int timed_out = 0;
  while (alive[0] || alive[1]) {
    if (o->tick != NULL) o->tick(o->tick_arg);
    for (int i = 0; i < n; i++) {
      if (!alive[i]) continue;
      pid_t w = waitpid(pid[i], &st[i], WNOHANG);
      if (w == pid[i]) {
        alive[i] = 0;
        if (!child_ok(st[i], o->allow_signal[i]) && grace_end == 0)
          grace_end = rn_deadline(o->grace_s > 0 ? o->grace_s : 3.0);
      }
    }
    if (!alive[0] && !alive[1]) break;
    double t = now_s();
    if (t > end || (grace_end != 0 && t > grace_end)) {
      if (t > end) timed_out = 1;
      for (int i = 0; i < n; i++)
        if (alive[i]) kill(pid[i], SIGKILL);
      for (int i = 0; i < n; i++)
        if (alive[i]) {
          waitpid(pid[i], &st[i], 0);
          alive[i] = 0;
          if (!timed_out) st[i] = -1; /* killed by us after its peer failed */
        }
      break;
    }
    sleep_us(2000);
  }
  for (int i = 0; i < n; i++) o->exit_status[i] = st[i];
  int ok = 1;
  why[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (st[i] == -1) {
      snprintf(why + strlen(why), whylen - strlen(why), "%s%s killed after its peer failed",
               why[0] ? "; " : "", role_name((enum rn_role)i));
      ok = 0;
    } else if (!child_ok(st[i], o->allow_signal[i])) {
      char b[128];
      describe_status(role_name((enum rn_role)i), st[i], b, sizeof b);
      snprintf(why + strlen(why), whylen - strlen(why), "%s%s", why[0] ? "; " : "", b);
      ok = 0;
    }
  }
  if (timed_out) {
    snprintf(why + strlen(why), whylen - strlen(why), "%stimeout after %.0f s (hang)",
             why[0] ? "; " : "", rn_bound_s(o->timeout_s));
    ok = 0;
  }
  return ok ? 0 : -1;
}

int rn_run_pair(rn_peer_fn recv_fn, rn_peer_fn send_fn, struct rn_pair_opts *o, char *why,
                size_t whylen) {
  int a[2], b[2], par[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) != 0) {
    snprintf(why, whylen, "pipe: %s", strerror(errno));
    return -1;
  }
  if (o->want_parent_pipe && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, par) != 0) {
    snprintf(why, whylen, "pipe: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  /* The receiver writes on a and reads b, the sender the other way round;
   * each child closes the other's ends. */
  const rn_peer_fn fn[2] = {[RN_RECEIVER] = recv_fn, [RN_SENDER] = send_fn};
  const int to_peer[2] = {[RN_RECEIVER] = a[1], [RN_SENDER] = b[1]};
  const int from_peer[2] = {[RN_RECEIVER] = b[0], [RN_SENDER] = a[0]};
  pid_t pid[2];
  for (int i = 0; i < 2; i++) {
    pid[i] = fork();
    if (pid[i] != 0) continue;
    close(to_peer[1 - i]);
    close(from_peer[1 - i]);
    if (par[0] >= 0) close(par[0]);
    child_main((enum rn_role)i, fn[i], o, to_peer[i], from_peer[i], par[1]);
  }
  close(a[0]);
  close(a[1]);
  close(b[0]);
  close(b[1]);
  if (par[1] >= 0) close(par[1]);
  if (o->want_parent_pipe && o->parent_fd) *o->parent_fd = par[0];
  if (pid[0] < 0 || pid[1] < 0) {
    snprintf(why, whylen, "fork: %s", strerror(errno));
    if (pid[0] > 0) kill(pid[0], SIGKILL), waitpid(pid[0], NULL, 0);
    if (pid[1] > 0) kill(pid[1], SIGKILL), waitpid(pid[1], NULL, 0);
    return -1;
  }
  return wait_children(pid, 2, o, why, whylen);
}

int rn_run_single(rn_peer_fn fn, struct rn_pair_opts *o, char *why, size_t whylen) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) child_main(RN_RECEIVER, fn, o, -1, -1, -1);
  if (pid < 0) {
    snprintf(why, whylen, "fork: %s", strerror(errno));
    return -1;
  }
  return wait_children(&pid, 1, o, why, whylen);
}

/* Connect to `handle` while accepting on lc, on this one thread, until
 * both comms are up (bounded). */
static int connect_and_accept(struct rn_peer *p, char *handle, void *lc, void **sc, void **rcomm,
                              double timeout_s, const char *what) {
  ncclResult_t r;
  double end = rn_deadline(timeout_s);
  while (*sc == NULL || *rcomm == NULL) {
    if (*sc == NULL && (r = rn_net_connect(&p->net, p->dev, handle, sc)) != ncclSuccess)
      return peer_fail(p, "connect: %s", rn_result_str(r));
    if (*rcomm == NULL && (r = rn_net_accept(&p->net, lc, rcomm)) != ncclSuccess)
      return peer_fail(p, "accept: %s", rn_result_str(r));
    if (now_s() > end)
      return peer_fail(p, "%s: not up after %.0f s (send %p recv %p)", what, rn_bound_s(timeout_s),
                       *sc, *rcomm);
  }
  return 0;
}

int peer_both_ways(struct rn_peer *p, void **lc, void **sc, void **rcomm, double timeout_s) {
  char mine[NCCL_NET_HANDLE_MAXSIZE], theirs[NCCL_NET_HANDLE_MAXSIZE];
  memset(mine, 0, sizeof mine);
  *lc = *sc = *rcomm = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, mine, lc);
  if (r != ncclSuccess || *lc == NULL) return peer_fail(p, "listen: %s", rn_result_str(r));
  if (peer_write(p, mine, sizeof mine) != 0 || peer_read(p, theirs, sizeof theirs, timeout_s) != 0)
    return peer_fail(p, "handle exchange");
  return connect_and_accept(p, theirs, *lc, sc, rcomm, timeout_s, "comms both ways");
}

void peer_both_ways_close(struct rn_peer *p, void *lc, void *sc, void *rcomm, void *smh,
                          void *rmh) {
  if (smh != NULL) rn_net_deregmr(&p->net, sc, smh);
  if (rmh != NULL) rn_net_deregmr(&p->net, rcomm, rmh);
  if (sc != NULL) rn_net_close_send(&p->net, sc);
  if (rcomm != NULL) rn_net_close_recv(&p->net, rcomm);
  if (lc != NULL) rn_net_close_listen(&p->net, lc);
}

int rn_tap_socket_pair(rn_peer_fn side, uint64_t seed, const char *what) {
  rn_default_env();
  setenv("RAILNET_TRANSPORT", "socket", 1);
  tap_plan(1);
  struct rn_pair_opts o = {
      .version = 12, .timeout_s = 120, .init = 1, .seed = seed, .env = "RAILNET_SOCKET_NTHREADS=0"};
  char why[256] = "";
  int rc = rn_run_pair(side, side, &o, why, sizeof why);
  tap_result(rc == 0, "%s (%s)", what, why);
  return tap_failed() ? 1 : 0;
}

int peer_loopback(struct rn_peer *p, void **lc, void **sc, void **rcomm, double timeout_s) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof handle);
  *lc = *sc = *rcomm = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, lc);
  if (r != ncclSuccess || *lc == NULL) return peer_fail(p, "listen: %s", rn_result_str(r));
  return connect_and_accept(p, handle, *lc, sc, rcomm, timeout_s, "connect/accept on one thread");
}
