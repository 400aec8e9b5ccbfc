/* multirail-xfer: verified data over one comm on one (fused) device, the
 * receiver and the sender each in a network namespace of their own (the
 * testbed scripts/railbed/railbed.sh makes), with
 *  - a throughput time series on the receiving side (payload of completed
 *    messages, and each rail's bytes from the netdev counters of the
 *    receiver's namespace: measured outside the plugin, headers included);
 *  - commands run at given times after the first message was posted (cut
 *    a rail, change its rate), from the caller's namespace;
 *  - one outcome per side: every byte verified, an error returned by the
 *    plugin (and when), or still waiting at the bound (a hang).
 * Both processes load the plugin as NCCL does (tests/common/pair.c).
 * Exit status: 0 both sides verified every byte; 1 both sides ended and
 * at least one got an error from the plugin; 2 wrong data or sizes, or a
 * crash; 3 a side still waiting at the bound (hang, killed); 4 set-up
 * failed (namespace, plugin, device, connection); 64 bad usage. */
#include "../common/rn_test.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XFER_MAX_RAILS 16
#define XFER_MAX_EVENTS 16
#define XFER_MAX_WINDOW 64

enum xfer_exit {
  XFER_OK = 0,
  XFER_ERROR = 1,
  XFER_CORRUPT = 2,
  XFER_HANG = 3,
  XFER_SETUP = 4,
  XFER_USAGE = 64
};

/* How one side ended. */
enum xfer_outcome {
  XO_NONE = 0, /* no word from it (still running, or died) */
  XO_DONE,     /* every message completed (and verified, receiving) */
  XO_ERROR,    /* the plugin returned an error */
  XO_CORRUPT,  /* wrong bytes or size */
  XO_SETUP,    /* never got to move data */
};

/* Child -> parent records on the runner's parent pipe; both children
 * write whole records of under 1 KiB, which a stream socket does not
 * interleave. */
enum xfer_rec_kind { XR_DEVICE = 1, XR_START, XR_SAMPLE, XR_END };
struct xfer_rec {
  int kind;
  int side; /* enum rn_role */
  int outcome;
  int nrails;
  double t; /* CLOCK_MONOTONIC seconds */
  uint64_t bytes;
  uint64_t rail[XFER_MAX_RAILS]; /* rx (receiver) or tx (sender) counters */
  char text[400];
};

struct xfer_event {
  double at;
  const char *cmd;
  int started;
  pid_t pid;      /* running, not yet reaped */
  double t_start; /* CLOCK_MONOTONIC */
};

/* Options, shared read-only by both children.  Owner: main. */
struct xfer_opts {
  const char *vdev; /* "a,b": devices fused with makeVDevice (v11) */
  const char *dev_name;
  int dev;
  int expect_rails;
  uint64_t bytes;
  size_t msg;
  int window;
  int verify;
  double seconds; /* > 0: time mode, bytes is only the cap */
  double timeout;
  double interval;
  long idle_us; /* sleep after a pass that completed nothing; 0 = poll */
  int nevents;
  struct xfer_event ev[XFER_MAX_EVENTS];
  const char *rails_override;
  /* [1] receiver, [0] sender: no plugin call before start s, nor from
   * pause[0] to pause[1] s (checked after posting) */
  double start[2], pause[2][2];
  /* non-NULL: a first comm pair connects and closes at once (its control
   * connection kept for reuse), the sender runs this (sh -c; "" none),
   * and the comm of the transfer connects on the kept connection */
  const char *reuse;
};

/* Parent-side state while the pair runs.  Owner: main. */
struct xfer_watch {
  struct xfer_opts *o;
  int fd;
  char buf[sizeof(struct xfer_rec) * 8];
  size_t have;
  double t0;
  int nrails;
  char rail_name[XFER_MAX_RAILS][32];
  char dev_name[256];
  struct xfer_rec last_sample;
  int have_sample;
  double t_progress; /* when the completed payload last grew */
  struct xfer_rec end[2];
  int have_end[2];
  uint64_t rail_start[XFER_MAX_RAILS];
  int have_rail_start;
};

/* ---- per-rail counters from /proc/net/dev (this process's namespace) -- */

/* Fills rx or tx bytes of each named netdev; 0 ok, -1 when one is
 * missing. */
static int read_counters(char names[][32], int n, int tx, uint64_t *out) {
  FILE *f = fopen("/proc/net/dev", "r");
  if (f == NULL) return -1;
  char line[512];
  int found = 0;
  for (int i = 0; i < n; i++) out[i] = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    char *colon = strchr(line, ':');
    if (colon == NULL) continue;
    *colon = '\0';
    char *name = line;
    while (*name == ' ') name++;
    for (int i = 0; i < n; i++) {
      if (strcmp(name, names[i]) != 0) continue;
      unsigned long long v[16] = {0};
      int k = sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                     &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]);
      if (k == 9) {
        out[i] = tx ? v[8] : v[0];
        found++;
      }
    }
  }
  fclose(f);
  return found == n ? 0 : -1;
}

/* The rails of a device are its name's '+'-separated parts. */
static int split_rails(const char *name, char out[][32]) {
  int n = 0;
  const char *s = name;
  while (*s != '\0' && n < XFER_MAX_RAILS) {
    size_t len = strcspn(s, "+,");
    snprintf(out[n++], 32, "%.*s", (int)(len < 31 ? len : 31), s);
    s += len;
    if (*s != '\0') s++;
  }
  return n;
}

/* ---- children ------------------------------------------------------------ */

static void send_rec(struct rn_peer *p, struct xfer_rec *r) {
  r->side = p->role;
  if (p->to_parent >= 0) peer_to_parent(p, r, sizeof *r);
}

static int end_side(struct rn_peer *p, enum xfer_outcome oc, double t, uint64_t bytes,
                    const uint64_t *rail, int nrails, const char *fmt, ...) RN_ATTR_PRINTF(7, 8);
static int end_side(struct rn_peer *p, enum xfer_outcome oc, double t, uint64_t bytes,
                    const uint64_t *rail, int nrails, const char *fmt, ...) {
  struct xfer_rec r;
  memset(&r, 0, sizeof r);
  r.kind = XR_END;
  r.outcome = oc;
  r.t = t;
  r.bytes = bytes;
  r.nrails = nrails;
  for (int i = 0; i < nrails && rail != NULL; i++) r.rail[i] = rail[i];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.text, sizeof r.text, fmt, ap);
  va_end(ap);
  send_rec(p, &r);
  if (oc != XO_DONE) snprintf(p->why, sizeof p->why, "%.200s", r.text);
  return oc == XO_DONE ? 0 : 1;
}

/* Pick the device (by name or index) and check its rail count. */
static int pick_device(struct rn_peer *p, const struct xfer_opts *o, char rails[][32],
                       int *nrails) {
  if (o->vdev != NULL) {
    /* one side's own list (through RN_CONF_RECV_ENV / RN_CONF_SEND_ENV):
     * two hosts whose devices list their NICs differently */
    const char *vdev = getenv("RN_XFER_VDEV") && *getenv("RN_XFER_VDEV") ? getenv("RN_XFER_VDEV")
                                                                         : o->vdev;
    ncclNetVDeviceProps_t vp;
    memset(&vp, 0, sizeof vp);
    for (const char *s = vdev; *s && vp.ndevs < NCCL_NET_MAX_DEVS_PER_NIC;) {
      vp.devs[vp.ndevs++] = atoi(s);
      if ((s = strchr(s, ',')) == NULL) break;
      s++;
    }
    int d = -1;
    ncclResult_t r = p->net.t.v11->makeVDevice(&d, &vp);
    if (r == ncclSuccess) r = rn_net_props(&p->net, d, &p->props);
    if (r != ncclSuccess)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "makeVDevice(%s): %s", vdev,
                      rn_result_str(r));
    p->dev = d;
  } else if (o->dev_name != NULL) {
    int found = -1;
    for (int d = 0; d < p->ndev && found < 0; d++) {
      struct rn_props pr;
      ncclResult_t r = rn_net_props(&p->net, d, &pr);
      if (r != ncclSuccess)
        return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "getProperties(%d): %s", d,
                        rn_result_str(r));
      if (pr.name != NULL && strcmp(pr.name, o->dev_name) == 0) {
        found = d;
        p->props = pr;
      }
    }
    if (found < 0)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "no device named %s among %d", o->dev_name,
                      p->ndev);
    p->dev = found;
  } else if (o->dev != p->dev) {
    if (o->dev >= p->ndev)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "no device %d (%d devices)", o->dev,
                      p->ndev);
    p->dev = o->dev;
    ncclResult_t r = rn_net_props(&p->net, p->dev, &p->props);
    if (r != ncclSuccess)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "getProperties(%d): %s", p->dev,
                      rn_result_str(r));
  }
  const char *name = p->props.name ? p->props.name : "?";
  int dev_rails = split_rails(name, rails);
  if (o->expect_rails > 0 && dev_rails != o->expect_rails)
    return end_side(p, XO_SETUP, now_s(), 0, NULL, 0,
                    "device %d is %s: %d rail(s), expected %d (is the topology file set?)", p->dev,
                    name, dev_rails, o->expect_rails);
  *nrails = o->rails_override != NULL ? split_rails(o->rails_override, rails) : dev_rails;
  struct xfer_rec r;
  memset(&r, 0, sizeof r);
  r.kind = XR_DEVICE;
  r.nrails = dev_rails;
  r.t = now_s();
  r.bytes = (uint64_t)p->props.speed;
  snprintf(r.text, sizeof r.text, "%d %s", p->dev, name);
  send_rec(p, &r);
  return 0;
}

/* One side's messages over its comm: FIFO, up to `window` in flight, the
 * oldest tested first (as NCCL's proxy does). */
struct xfer_side {
  struct rn_peer *p;
  const struct xfer_opts *o;
  void *comm;
  void *mh;
  unsigned char *arena;
  size_t slot;
  void *req[XFER_MAX_WINDOW];
  uint64_t posted, done;
  uint64_t total; /* messages, may shrink in time mode */
  uint64_t nreal; /* messages carrying data; later ones are 0-byte padding */
  uint64_t bytes_done;
  uint64_t last_bytes; /* size of the last real message */
};

static size_t msg_size(const struct xfer_side *x, uint64_t seq) {
  if (seq >= x->nreal) return 0;
  return seq + 1 == x->nreal ? x->last_bytes : x->o->msg;
}

static int post_some(struct xfer_side *x, char *err, size_t errlen) {
  struct rn_peer *p = x->p;
  while (x->posted < x->total && x->posted - x->done < (uint64_t)x->o->window) {
    uint64_t seq = x->posted;
    int slot = (int)(seq % (uint64_t)x->o->window);
    unsigned char *buf = x->arena + (size_t)slot * x->slot;
    size_t sz = msg_size(x, seq);
    int tag = 0x100 + (int)(seq & 0xff);
    void *req = NULL;
    ncclResult_t r;
    if (p->role == RN_SENDER) {
      if (x->o->verify) pattern_fill(buf, sz, pattern_key(p->seed, seq, sz));
      r = rn_net_isend(&p->net, x->comm, buf, sz, tag, x->mh, &req);
    } else {
      size_t posted = x->o->msg;
      void *data = buf;
      r = rn_net_irecv(&p->net, x->comm, 1, &data, &posted, &tag, &x->mh, &req);
    }
    if (r != ncclSuccess) {
      snprintf(err, errlen, "%s(message %" PRIu64 "): %s", p->role == RN_SENDER ? "isend" : "irecv",
               seq, rn_result_str(r));
      return -1;
    }
    if (req == NULL) break; /* retry later */
    x->req[slot] = req;
    x->posted++;
  }
  return 0;
}

/* 0 progress, -1 plugin error, -2 wrong data; err says which. */
static int test_oldest(struct xfer_side *x, char *err, size_t errlen) {
  struct rn_peer *p = x->p;
  while (x->done < x->posted) {
    uint64_t seq = x->done;
    int slot = (int)(seq % (uint64_t)x->o->window);
    int done = 0, got = -1;
    ncclResult_t r = rn_net_test(&p->net, x->req[slot], &done, &got);
    if (r != ncclSuccess) {
      snprintf(err, errlen, "test(%s message %" PRIu64 "): %s",
               p->role == RN_SENDER ? "send" : "recv", seq, rn_result_str(r));
      return -1;
    }
    if (!done) return 0;
    size_t sz = msg_size(x, seq);
    if (p->role == RN_RECEIVER) {
      if (got < 0 || (size_t)got != sz) {
        snprintf(err, errlen, "message %" PRIu64 ": test() reported %d bytes, %zu were sent", seq,
                 got, sz);
        return -2;
      }
      const unsigned char *buf = x->arena + (size_t)slot * x->slot;
      size_t bad =
          x->o->verify ? pattern_check(buf, sz, pattern_key(p->seed, seq, sz)) : (size_t)-1;
      if (bad != (size_t)-1) {
        snprintf(err, errlen, "message %" PRIu64 " (%zu B): byte %zu differs", seq, sz, bad);
        return -2;
      }
    }
    x->req[slot] = NULL;
    x->bytes_done += sz;
    x->done++;
  }
  return 0;
}

/* Time mode, both ends of the stop: the sender stops posting and tells the
 * receiver how many messages it sent; the receiver answers with how many
 * it has posted (at least that many); the sender pads with 0-byte
 * messages so no receive stays open. */
static int peer_poll_u64(struct rn_peer *p, uint64_t *v) {
  struct pollfd pfd = {p->from_peer, POLLIN, 0};
  if (poll(&pfd, 1, 0) <= 0) return 0;
  return peer_read(p, v, sizeof *v, 5.0) == 0 ? 1 : -1;
}

static int xfer_side_run(struct rn_peer *p) {
  const struct xfer_opts *o = p->arg;
  char rails[XFER_MAX_RAILS][32];
  int nrails = 0;
  if (pick_device(p, o, rails, &nrails) != 0) return 1;
  void *comm = NULL;
  double bound = o->timeout;
  if (o->reuse != NULL) {
    if (peer_connect(p, 1, &comm, NULL, bound) != 0 || peer_close(p, 1, &comm, NULL) != 0 ||
        peer_sync(p, bound) != 0)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "the first comm: %s", p->why);
    if (p->role == RN_SENDER && o->reuse[0] != '\0') {
      int st = system(o->reuse);
      if (st != 0)
        return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "--reuse command exited %d", st);
    }
    if (peer_sync(p, bound) != 0)
      return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "peer gone after the first comm");
  }
  if (peer_connect(p, 1, &comm, NULL, bound) != 0)
    return end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "%s", p->why);

  struct xfer_side x;
  memset(&x, 0, sizeof x);
  x.p = p;
  x.o = o;
  x.comm = comm;
  x.slot = (o->msg + 4095) & ~(size_t)4095;
  if (x.slot == 0) x.slot = 4096;
  x.nreal = (o->bytes + o->msg - 1) / o->msg;
  x.total = x.nreal;
  x.last_bytes = o->bytes - (x.nreal - 1) * o->msg;
  int rc = 1;
  if (posix_memalign((void **)&x.arena, 4096, x.slot * (size_t)o->window) != 0) {
    x.arena = NULL;
    rc = end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "out of memory");
    goto out_close;
  }
  memset(x.arena, 0, x.slot * (size_t)o->window);
  ncclResult_t r =
      rn_net_regmr(&p->net, comm, x.arena, x.slot * (size_t)o->window, NCCL_PTR_HOST, &x.mh);
  if (r != ncclSuccess) {
    rc = end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "regMr: %s", rn_result_str(r));
    goto out_free;
  }
  if (peer_sync(p, bound) != 0) {
    rc = end_side(p, XO_SETUP, now_s(), 0, NULL, 0, "peer gone before the transfer");
    goto out_dereg;
  }
  int is_recv = p->role == RN_RECEIVER;
  uint64_t c0[XFER_MAX_RAILS], c[XFER_MAX_RAILS];
  int counters = read_counters(rails, nrails, !is_recv, c0) == 0;
  double t0 = now_s(), next_sample = t0 + o->interval;
  if (is_recv) {
    struct xfer_rec s;
    memset(&s, 0, sizeof s);
    s.kind = XR_START;
    s.t = t0;
    s.nrails = counters ? nrails : 0;
    for (int i = 0; i < nrails; i++) s.rail[i] = c0[i];
    send_rec(p, &s);
  }
  int stopping = 0;  /* sender: its count sent, waiting for the total */
  int stopped = 0;   /* sender: the total came (padding may still wait for its clear-to-sends) */
  int stop_seen = 0; /* receiver: the sender's count arrived */
  char err[300] = "";
  long spins = 0;
  /* A side with nothing to do (NCCL's proxy calls a comm only for its own
   * operations), or busy elsewhere: what arrives waits in its sockets. */
  const double start = o->start[is_recv], *pause = o->pause[is_recv];
  sleep_until(t0 + start);
  for (;;) {
    double t = now_s();
    uint64_t done_before = x.done, posted_before = x.posted;
    if (o->seconds > 0) {
      uint64_t v;
      if (!is_recv && !stopping && !stopped && t - t0 >= o->seconds && x.posted < x.total) {
        x.total = x.posted; /* post nothing more until the receiver answers */
        if (peer_write(p, &x.posted, sizeof x.posted) != 0) {
          snprintf(err, sizeof err, "time mode: peer pipe closed");
          break;
        }
        stopping = 1;
      }
      int got = ((is_recv && !stop_seen) || stopping) ? peer_poll_u64(p, &v) : 0;
      if (got < 0) {
        snprintf(err, sizeof err, "time mode: peer pipe closed");
        break;
      }
      if (got > 0 && is_recv) {
        /* v real messages come; answer with what is posted, at least v */
        uint64_t total = x.posted > v ? x.posted : v;
        x.nreal = v;
        x.last_bytes = o->msg;
        x.total = total;
        stop_seen = 1;
        if (peer_write(p, &total, sizeof total) != 0) {
          snprintf(err, sizeof err, "time mode: peer pipe closed");
          break;
        }
      } else if (got > 0) {
        x.nreal = x.total;
        x.last_bytes = o->msg;
        x.total = v;
        stopping = 0;
        stopped = 1;
      }
    }
    if (!stopping && post_some(&x, err, sizeof err) != 0) {
      rc = end_side(p, XO_ERROR, now_s(), x.bytes_done, NULL, 0, "%s", err);
      goto out_dereg;
    }
    if (t - t0 >= pause[0] && t - t0 < pause[1]) sleep_until(t0 + pause[1]);
    int tr = test_oldest(&x, err, sizeof err);
    if (tr != 0) {
      rc = end_side(p, tr == -1 ? XO_ERROR : XO_CORRUPT, now_s(), x.bytes_done, NULL, 0, "%s", err);
      goto out_dereg;
    }
    if (x.done == x.total && !stopping) break;
    if (is_recv && o->interval > 0 && t >= next_sample) {
      struct xfer_rec s;
      memset(&s, 0, sizeof s);
      s.kind = XR_SAMPLE;
      s.t = t;
      s.bytes = x.bytes_done;
      s.nrails = counters && read_counters(rails, nrails, 0, s.rail) == 0 ? nrails : 0;
      send_rec(p, &s);
      next_sample += o->interval;
      if (next_sample < t) next_sample = t + o->interval;
    }
    if (t - t0 > bound) {
      /* the runner kills us at the bound too; this only ends the loop */
      rc = end_side(p, XO_NONE, t, x.bytes_done, NULL, 0, "still waiting after %.0f s", bound);
      goto out_dereg;
    }
    if (o->idle_us > 0 && x.done == done_before && x.posted == posted_before)
      sleep_us(o->idle_us);
    else if (o->idle_us == 0 && ++spins % 256 == 0)
      sleep_us(20);
  }
  if (err[0] != '\0') {
    rc = end_side(p, XO_SETUP, now_s(), x.bytes_done, NULL, 0, "%s", err);
    goto out_dereg;
  }
  double t_end = now_s();
  if (counters && read_counters(rails, nrails, !is_recv, c) == 0) {
    for (int i = 0; i < nrails; i++) c[i] -= c0[i];
  } else {
    nrails = 0;
  }
  rc = end_side(p, XO_DONE, t_end, x.bytes_done, c, nrails, "%" PRIu64 " messages", x.done);
out_dereg:
  if (x.mh != NULL) {
    r = rn_net_deregmr(&p->net, comm, x.mh);
    if (r != ncclSuccess && rc == 0)
      rc = end_side(p, XO_ERROR, now_s(), x.bytes_done, NULL, 0, "deregMr: %s", rn_result_str(r));
  }
out_free:
  free(x.arena);
out_close:
  /* after an error this is NCCL's abort: close never waits for the peer */
  if (peer_close(p, 1, &comm, NULL) != 0 && rc == 0) rc = 1;
  return rc;
}

/* ---- parent: records, events, report ----------------------------------- */

static void print_sample(struct xfer_watch *w, const struct xfer_rec *s) {
  const struct xfer_rec *prev = &w->last_sample;
  double dt = s->t - prev->t;
  if (dt <= 0) return;
  char line[1024];
  int n = snprintf(line, sizeof line, "series t=%.3f Mbps=%.1f", s->t - w->t0,
                   (double)(s->bytes - prev->bytes) * 8 / dt / 1e6);
  for (int i = 0; i < s->nrails && i < w->nrails && n < (int)sizeof line - 64; i++)
    n += snprintf(line + n, sizeof line - (size_t)n, " %s=%.1f", w->rail_name[i],
                  (double)(s->rail[i] - prev->rail[i]) * 8 / dt / 1e6);
  printf("%s\n", line);
}

static void handle_rec(struct xfer_watch *w, const struct xfer_rec *r) {
  const char *side = r->side == RN_RECEIVER ? "receiver" : "sender";
  switch (r->kind) {
    case XR_DEVICE: {
      char name[256];
      int dev = -1;
      if (sscanf(r->text, "%d %255s", &dev, name) != 2) break;
      if (r->side == RN_RECEIVER) {
        snprintf(w->dev_name, sizeof w->dev_name, "%s", name);
        w->nrails = split_rails(w->o->rails_override ? w->o->rails_override : name, w->rail_name);
      }
      printf("device side=%s dev=%d name=%s rails=%d speed=%" PRIu64 "\n", side, dev, name,
             r->nrails, r->bytes);
      break;
    }
    case XR_START:
      w->t0 = r->t;
      w->last_sample = *r;
      w->last_sample.bytes = 0;
      w->have_sample = 1;
      for (int i = 0; i < r->nrails; i++) w->rail_start[i] = r->rail[i];
      w->have_rail_start = r->nrails > 0;
      printf("start side=receiver\n");
      break;
    case XR_SAMPLE:
      if (w->have_sample) print_sample(w, r);
      if (r->bytes > w->last_sample.bytes) w->t_progress = r->t;
      w->last_sample = *r;
      w->have_sample = 1;
      break;
    case XR_END:
      w->end[r->side] = *r;
      w->have_end[r->side] = 1;
      if (r->outcome != XO_DONE)
        printf("end side=%s t=%.3f outcome=%s bytes=%" PRIu64 " what=\"%s\"\n", side,
               w->t0 > 0 ? r->t - w->t0 : 0.0,
               r->outcome == XO_ERROR     ? "error"
               : r->outcome == XO_CORRUPT ? "corrupt"
               : r->outcome == XO_SETUP   ? "setup"
                                          : "none",
               r->bytes, r->text);
      break;
    default:
      break;
  }
  fflush(stdout);
}

/* Events run in the background, so the transfer's samples keep flowing
 * while a command takes its time; each is reported when it ends. */
static void start_event(struct xfer_event *e) {
  fflush(stdout);
  e->started = 1;
  e->t_start = now_s();
  e->pid = fork();
  if (e->pid == 0) {
    execl("/bin/sh", "sh", "-c", e->cmd, (char *)NULL);
    _exit(127);
  }
}

static void reap_event(struct xfer_watch *w, struct xfer_event *e, int block) {
  int st = 0;
  if (e->pid <= 0) {
    if (e->pid < 0) printf("event t=%.3f rc=-1 cmd=\"%s\" (fork failed)\n", 0.0, e->cmd);
    e->pid = 0;
    return;
  }
  pid_t r;
  while ((r = waitpid(e->pid, &st, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0) return;
  printf("event t=%.3f took=%.3f rc=%d cmd=\"%s\"\n", e->t_start - w->t0, now_s() - e->t_start,
         r > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, e->cmd);
  fflush(stdout);
  e->pid = 0;
}

static void drain(struct xfer_watch *w) {
  for (;;) {
    struct pollfd pfd = {w->fd, POLLIN, 0};
    if (w->fd < 0 || poll(&pfd, 1, 0) <= 0) break;
    ssize_t n = read(w->fd, w->buf + w->have, sizeof w->buf - w->have);
    if (n <= 0) {
      close(w->fd);
      w->fd = -1;
      break;
    }
    w->have += (size_t)n;
    while (w->have >= sizeof(struct xfer_rec)) {
      struct xfer_rec r;
      memcpy(&r, w->buf, sizeof r);
      memmove(w->buf, w->buf + sizeof r, w->have - sizeof r);
      w->have -= sizeof r;
      handle_rec(w, &r);
    }
  }
}

static void watch_tick(void *arg) {
  struct xfer_watch *w = arg;
  drain(w);
  if (w->t0 <= 0) return;
  for (int i = 0; i < w->o->nevents; i++) {
    struct xfer_event *e = &w->o->ev[i];
    if (!e->started && now_s() >= w->t0 + e->at) start_event(e);
    if (e->started && e->pid != 0) reap_event(w, e, 0);
  }
}

static const char *outcome_str(const struct xfer_watch *w, int side) {
  if (!w->have_end[side]) return "hang";
  switch (w->end[side].outcome) {
    case XO_DONE:
      return "ok";
    case XO_ERROR:
      return "error";
    case XO_CORRUPT:
      return "corrupt";
    case XO_SETUP:
      return "setup";
    default:
      return "hang";
  }
}

static int report(struct xfer_watch *w, int timed_out, const int *status) {
  const struct xfer_rec *rv = &w->end[RN_RECEIVER], *sd = &w->end[RN_SENDER];
  int ok[2], verdict = XFER_OK;
  for (int s = 0; s < 2; s++) {
    int oc = w->have_end[s] ? w->end[s].outcome : XO_NONE;
    ok[s] = oc == XO_DONE;
    int v = oc == XO_DONE      ? XFER_OK
            : oc == XO_ERROR   ? XFER_ERROR
            : oc == XO_CORRUPT ? XFER_CORRUPT
            : oc == XO_SETUP   ? XFER_SETUP
                               : XFER_HANG;
    /* a side that died of a signal without a word crashed */
    if (oc == XO_NONE && !timed_out && WIFSIGNALED(status[s])) v = XFER_CORRUPT;
    /* the worst wins: corrupt > setup > hang > error > ok */
    static const int rank[] = {
        [XFER_OK] = 0, [XFER_ERROR] = 1, [XFER_HANG] = 2, [XFER_SETUP] = 3, [XFER_CORRUPT] = 4};
    if (rank[v] > rank[verdict]) verdict = v;
  }
  if (ok[RN_RECEIVER] && rv->nrails > 0) {
    uint64_t sum = 0;
    for (int i = 0; i < rv->nrails; i++) sum += rv->rail[i];
    char line[1024];
    int n = snprintf(line, sizeof line, "rails side=receiver counter=rx_bytes");
    for (int i = 0; i < rv->nrails && i < w->nrails && n < (int)sizeof line - 80; i++)
      n += snprintf(line + n, sizeof line - (size_t)n, " %s=%" PRIu64 "(%.1f%%)", w->rail_name[i],
                    rv->rail[i], sum ? 100.0 * (double)rv->rail[i] / (double)sum : 0.0);
    printf("%s\n", line);
  }
  if (ok[RN_SENDER] && sd->nrails > 0) {
    char line[1024];
    int n = snprintf(line, sizeof line, "rails side=sender counter=tx_bytes");
    for (int i = 0; i < sd->nrails && i < w->nrails && n < (int)sizeof line - 80; i++)
      n +=
          snprintf(line + n, sizeof line - (size_t)n, " %s=%" PRIu64, w->rail_name[i], sd->rail[i]);
    printf("%s\n", line);
  }
  double secs = ok[RN_RECEIVER] && w->t0 > 0 ? rv->t - w->t0 : 0;
  static const char *const names[] = {[XFER_OK] = "ok",
                                      [XFER_ERROR] = "error",
                                      [XFER_CORRUPT] = "corrupt",
                                      [XFER_HANG] = "hang",
                                      [XFER_SETUP] = "setup"};
  char at[2][32];
  for (int s = 0; s < 2; s++) {
    at[s][0] = '\0';
    if (w->have_end[s] && w->t0 > 0 && w->end[s].outcome != XO_NONE)
      snprintf(at[s], sizeof at[s], "@%.3f", w->end[s].t - w->t0);
  }
  /* the payload the receiver completed: at its end, else at its last sample */
  uint64_t bytes = w->have_end[RN_RECEIVER] ? rv->bytes : w->last_sample.bytes;
  printf("result status=%s receiver=%s%s sender=%s%s bytes=%" PRIu64
         " seconds=%.3f Mbps=%.1f bound=%.0f",
         names[verdict], outcome_str(w, RN_RECEIVER), at[RN_RECEIVER], outcome_str(w, RN_SENDER),
         at[RN_SENDER], bytes, secs, secs > 0 ? (double)rv->bytes * 8 / secs / 1e6 : 0.0,
         w->o->timeout);
  if (verdict != XFER_OK && w->t_progress > 0) printf(" last_progress=%.3f", w->t_progress - w->t0);
  printf("\n");
  fflush(stdout);
  return verdict;
}

/* ---- main ---------------------------------------------------------------- */

static uint64_t parse_bytes(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || v < 0) return 0;
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024;
      end++;
      break;
    case 'm':
    case 'M':
      v *= 1024 * 1024;
      end++;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      end++;
      break;
    default:
      break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  return *end == '\0' ? (uint64_t)v : 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: multirail-xfer [options]\n"
          "  --railbed NAME      receiver in namespace NAME-b, sender in NAME-a\n"
          "  --recv-netns NS, --send-netns NS   each side's network namespace\n"
          "  --env K=V,...       environment of both sides (before the plugin loads)\n"
          "  --recv-env K=V,..., --send-env K=V,...   one side's environment\n"
          "  --dev N | --dev-name NAME   the device (default 0)\n"
          "  --vdev a,b          fuse devices a,b with makeVDevice (v11) and use the result\n"
          "                      (a side whose environment sets RN_XFER_VDEV fuses those)\n"
          "  --expect-rails N    fail (set-up) unless the device fuses N rails\n"
          "  --rails a,b         netdevs to count per rail (default: the device's name)\n"
          "  --bytes B           payload to move (default 256M; K/M/G suffixes)\n"
          "  --seconds S         move data for S seconds instead (--bytes is the cap)\n"
          "  --size B            message size (default 1M)\n"
          "  --window N          messages in flight per side (default 8, max %d)\n"
          "  --no-verify         do not check the bytes\n"
          "  --interval S        time-series period (default 0.1; 0 = none)\n"
          "  --idle-us N         sleep N us after a pass that completed nothing (default 50;\n"
          "                      0 = poll without pause, as NCCL's proxy does: both sides on\n"
          "                      one small host then compete for its CPUs)\n"
          "  --at T:CMD          run CMD (sh -c) T seconds after the first post\n"
          "  --start SIDE:S      SIDE (recv or send) makes no plugin call for S seconds\n"
          "  --pause SIDE:A:B    SIDE makes no plugin call from A to B seconds after the start,\n"
          "                      once it posted what it could (0:B: it posts, then waits)\n"
          "  --timeout S         bound for the whole run; past it, sides still waiting are\n"
          "                      reported as hung and killed (default 60, x RN_TIMEOUT_SCALE)\n"
          "  --api vN            plugin ABI, v8..v12 (default v11)\n"
          "  --reuse CMD         first a comm pair that connects and closes at once (its\n"
          "                      connection kept for reuse); then the sender runs CMD\n"
          "                      (sh -c, \"\" none) and the transfer's comm takes that connection\n"
          "exit: 0 verified, 1 error from the plugin, 2 wrong data or crash, 3 hang, 4 set-up\n",
          XFER_MAX_WINDOW);
  exit(XFER_USAGE);
}

static void append_env(const char *var, const char *list) {
  const char *old = getenv(var);
  char buf[8192];
  snprintf(buf, sizeof buf, "%s%s%s", old && *old ? old : "", old && *old ? "," : "", list);
  setenv(var, buf, 1);
}

int main(int argc, char **argv) {
  static struct xfer_opts o = {.dev = 0,
                               .bytes = 256ull << 20,
                               .msg = 1 << 20,
                               .window = 8,
                               .verify = 1,
                               .timeout = 60,
                               .interval = 0.1,
                               .idle_us = 50};
  int version = 11;
  static const struct option lo[] = {{"railbed", 1, 0, 'R'},      {"recv-netns", 1, 0, 'r'},
                                     {"send-netns", 1, 0, 's'},   {"env", 1, 0, 'e'},
                                     {"recv-env", 1, 0, 'E'},     {"send-env", 1, 0, 'S'},
                                     {"dev", 1, 0, 'd'},          {"dev-name", 1, 0, 'D'},
                                     {"expect-rails", 1, 0, 'x'}, {"rails", 1, 0, 'L'},
                                     {"bytes", 1, 0, 'b'},        {"seconds", 1, 0, 'T'},
                                     {"size", 1, 0, 'z'},         {"window", 1, 0, 'w'},
                                     {"no-verify", 0, 0, 'V'},    {"interval", 1, 0, 'i'},
                                     {"idle-us", 1, 0, 'I'},      {"at", 1, 0, 'a'},
                                     {"timeout", 1, 0, 't'},      {"api", 1, 0, 'A'},
                                     {"vdev", 1, 0, 'v'},          {"pause", 1, 0, 'P'},
                                     {"start", 1, 0, 'B'},        {"reuse", 1, 0, 'U'},
                                     {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
  char nsbuf[2][300];
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
      case 'R':
        snprintf(nsbuf[0], sizeof nsbuf[0], "%s-b", optarg);
        snprintf(nsbuf[1], sizeof nsbuf[1], "%s-a", optarg);
        setenv("RN_CONF_RECV_NETNS", nsbuf[0], 1);
        setenv("RN_CONF_SEND_NETNS", nsbuf[1], 1);
        break;
      case 'r':
        setenv("RN_CONF_RECV_NETNS", optarg, 1);
        break;
      case 's':
        setenv("RN_CONF_SEND_NETNS", optarg, 1);
        break;
      case 'e':
        append_env("RN_CONF_RECV_ENV", optarg);
        append_env("RN_CONF_SEND_ENV", optarg);
        break;
      case 'E':
        append_env("RN_CONF_RECV_ENV", optarg);
        break;
      case 'S':
        append_env("RN_CONF_SEND_ENV", optarg);
        break;
      case 'd':
        o.dev = atoi(optarg);
        break;
      case 'D':
        o.dev_name = optarg;
        break;
      case 'v':
        o.vdev = optarg;
        break;
      case 'U':
        o.reuse = optarg;
        break;
      case 'P':
      case 'B': {
        char side[8];
        double a = 0, b;
        int ok = c == 'P' ? sscanf(optarg, "%7[a-z]:%lf:%lf", side, &a, &b) == 3
                          : sscanf(optarg, "%7[a-z]:%lf", side, &b) == 2;
        if (!ok || a < 0 || b < a || (strcmp(side, "recv") != 0 && strcmp(side, "send") != 0))
          usage();
        int is_recv = strcmp(side, "recv") == 0;
        if (c == 'B') {
          o.start[is_recv] = b;
        } else {
          o.pause[is_recv][0] = a;
          o.pause[is_recv][1] = b;
        }
        break;
      }
      case 'x':
        o.expect_rails = atoi(optarg);
        break;
      case 'L':
        o.rails_override = optarg;
        break;
      case 'b':
        if ((o.bytes = parse_bytes(optarg)) == 0) usage();
        break;
      case 'T':
        o.seconds = atof(optarg);
        break;
      case 'z':
        if ((o.msg = (size_t)parse_bytes(optarg)) == 0 || o.msg > (1u << 30)) usage();
        break;
      case 'w':
        o.window = atoi(optarg);
        break;
      case 'V':
        o.verify = 0;
        break;
      case 'I':
        o.idle_us = atol(optarg);
        break;
      case 'i':
        o.interval = atof(optarg);
        break;
      case 'a': {
        char *colon = strchr(optarg, ':');
        if (colon == NULL || o.nevents == XFER_MAX_EVENTS) usage();
        *colon = '\0';
        o.ev[o.nevents].at = atof(optarg);
        o.ev[o.nevents].cmd = colon + 1;
        o.nevents++;
        break;
      }
      case 't':
        o.timeout = atof(optarg);
        break;
      case 'A':
        if ((version = rn_parse_version(optarg)) == 0) usage();
        break;
      default:
        usage();
    }
  }
  if (optind != argc || o.window < 1 || o.window > XFER_MAX_WINDOW || o.timeout <= 0 ||
      o.interval < 0 || o.seconds < 0)
    usage();
  if (o.seconds > 0 && o.bytes == 256ull << 20) o.bytes = 64ull << 30; /* the cap */
  o.timeout *= rn_timeout_scale();
  setenv("RAILNET_TRANSPORT", "socket", 0);

  struct xfer_watch w;
  memset(&w, 0, sizeof w);
  w.o = &o;
  w.fd = -1;
  if (o.vdev != NULL && version != 11) usage(); /* makeVDevice as v11 declares it */
  struct rn_pair_opts po = {.version = version,
                            .timeout_s = (int)(o.timeout + 0.999),
                            .init = 1,
                            .seed = 0x7261696c62656400ull ^ (uint64_t)getpid(),
                            .arg = &o,
                            .want_parent_pipe = 1,
                            .parent_fd = &w.fd,
                            .grace_s = o.timeout,
                            .tick = watch_tick,
                            .tick_arg = &w};
  printf("multirail-xfer receiver=%s sender=%s bytes=%" PRIu64
         " seconds=%.1f size=%zu window=%d "
         "verify=%s api=v%d\n",
         getenv("RN_CONF_RECV_NETNS") ? getenv("RN_CONF_RECV_NETNS") : "-",
         getenv("RN_CONF_SEND_NETNS") ? getenv("RN_CONF_SEND_NETNS") : "-", o.bytes, o.seconds,
         o.msg, o.window, o.verify ? "on" : "off", version);
  fflush(stdout);
  char why[512];
  rn_run_pair(xfer_side_run, xfer_side_run, &po, why, sizeof why);
  drain(&w);
  if (w.fd >= 0) close(w.fd);
  for (int i = 0; i < o.nevents; i++) {
    if (o.ev[i].started && o.ev[i].pid != 0) reap_event(&w, &o.ev[i], 1);
    if (!o.ev[i].started) printf("event at=%.3f not run: the transfer ended first\n", o.ev[i].at);
  }
  int timed_out = strstr(why, "hang") != NULL;
  if (why[0] != '\0') printf("runner %s\n", why);
  return report(&w, timed_out, po.exit_status);
}
