/* Conformance harness: drives the built plugin through the sequence NCCL
 * uses (init, devices, getProperties, listen, connect/accept polling,
 * regMr, isend/irecv/test, deregMr, close), in two processes, and checks
 * every byte.  One TAP test per case and ABI version.
 *
 *   conformance [--api v8|v9|v10|v11|v12|all|LIST] [--seed N] [--only SUBSTR] [--list]
 *
 * Default: the full suite through ncclNetPlugin_v8, _v12, _v11, _v9 and _v10
 * (--smoke: a subset through v9 and v10).  Environment: RN_PLUGIN (the .so),
 * RN_CONF_RECV_ENV / RN_CONF_SEND_ENV ("K=V,K=V" applied in the receiver /
 * sender before it loads the plugin), RN_CONF_DEV (device, default 0),
 * RN_CONF_VERBOSE=1 (plugin log on stderr), RN_CONF_TIMEOUT_SCALE (x1).
 * RAILNET_TRANSPORT passes through; RAILNET_SOCKET_IFNAME defaults to lo. */
#include "../common/rn_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KB ((size_t)1024)
#define MB (KB * 1024)

/* ---- case parameters ---------------------------------------------------- */
struct scfg {
  int nmsg;
  size_t fixed;     /* every message this size ... */
  size_t maxrand;   /* ... or random sizes up to this (fixed ignored) */
  size_t post_size; /* receiver buffer size, 0 = same as the message */
  int window;
  enum rn_order order;
  int null_sizes;
  int post_all_first;
  int ncomms;
  int threads;          /* 1: one thread per comm; 0: one thread for all */
  int want_inflight;    /* receiver must reach this many posted at once */
  int accept_delay_ms;  /* receiver starts polling accept this late */
  int connect_delay_ms; /* sender starts polling connect this late */
  const size_t *list;   /* sizes in this order, again and again (fixed, maxrand ignored) */
  int nlist;
  int recv_delay_ms; /* receiver posts its first receive this late (sends go ahead of it) */
};

static size_t *make_sizes(const struct scfg *c, uint64_t seed, int comm) {
  size_t *s = calloc((size_t)c->nmsg, sizeof *s);
  uint64_t st = seed * 31 + (uint64_t)comm * 1000003u;
  for (int i = 0; s != NULL && i < c->nmsg; i++) {
    if (c->list != NULL) {
      s[i] = c->list[i % c->nlist];
      continue;
    }
    if (c->maxrand == 0) {
      s[i] = c->fixed;
      continue;
    }
    uint64_t r = rng_next(&st);
    if (r % 8 == 0) {
      s[i] = 0;
    } else {
      /* log-uniform up to maxrand */
      int bits = 0;
      while (((size_t)1 << bits) < c->maxrand) bits++;
      size_t lim = (size_t)1 << (rng_next(&st) % (uint64_t)(bits + 1));
      s[i] = (size_t)(rng_next(&st) % (lim + 1));
      if (s[i] > c->maxrand) s[i] = c->maxrand;
    }
  }
  return s;
}

struct thr {
  struct rn_peer p;
  struct rn_stream s;
  int rc;
  double timeout;
};

static void *thr_main(void *a) {
  struct thr *t = a;
  t->s.p = &t->p;
  t->rc = rn_stream_run(&t->s, t->timeout);
  return NULL;
}

/* Both roles: connect ncomms, run one stream per comm, close. */
static int stream_case(struct rn_peer *p) {
  const struct scfg *c = p->arg;
  int n = c->ncomms > 0 ? c->ncomms : 1;
  void *comms[64] = {0}, *lcomms[64] = {0};
  double tmo = 30;
  p->setup_delay_ms = p->role == RN_RECEIVER ? c->accept_delay_ms : c->connect_delay_ms;
  if (peer_connect(p, n, comms, lcomms, tmo) != 0) return -1;
  int rc = 0;
  struct thr *t = calloc((size_t)n, sizeof *t);
  size_t *post[64] = {0};
  for (int i = 0; i < n; i++) {
    t[i].p = *p;
    t[i].timeout = 60;
    struct rn_stream *s = &t[i].s;
    s->comm = comms[i];
    s->is_send = p->role == RN_SENDER;
    s->nmsg = c->nmsg;
    s->sizes = make_sizes(c, p->seed, i);
    if (c->post_size) {
      post[i] = calloc((size_t)c->nmsg, sizeof(size_t));
      for (int k = 0; k < c->nmsg; k++)
        post[i][k] = c->post_size > s->sizes[k] ? c->post_size : s->sizes[k];
      s->post_sizes = post[i];
    }
    s->window = c->window;
    s->order = c->order;
    s->null_sizes = c->null_sizes;
    s->verify = 1;
    s->post_all_first = c->post_all_first;
    s->seed = p->seed + (uint64_t)i * 7919;
  }
  if (c->threads && n > 1) {
    pthread_t tid[64];
    for (int i = 0; i < n; i++) pthread_create(&tid[i], NULL, thr_main, &t[i]);
    for (int i = 0; i < n; i++) {
      pthread_join(tid[i], NULL);
      if (t[i].rc != 0 && rc == 0) rc = peer_fail(p, "comm %d: %s", i, t[i].p.why);
    }
  } else {
    /* one thread drives every comm, like NCCL's proxy progress thread */
    for (int i = 0; i < n; i++) {
      t[i].s.p = &t[i].p;
      if (rn_stream_setup(&t[i].s) != 0) {
        rc = peer_fail(p, "comm %d: %s", i, t[i].p.why);
        n = i;
        break;
      }
    }
    if (rc == 0 && p->role == RN_RECEIVER && c->recv_delay_ms > 0)
      usleep((useconds_t)c->recv_delay_ms * 1000);
    double end = rn_deadline(60);
    int left = rc == 0 ? n : 0;
    int state[64] = {0};
    long spins = 0;
    while (left > 0) {
      for (int i = 0; i < n; i++) {
        if (state[i]) continue;
        int r = rn_stream_step(&t[i].s);
        if (r < 0) {
          rc = peer_fail(p, "comm %d: %s", i, t[i].p.why);
          left = 0;
          break;
        }
        if (r == 1) state[i] = 1, left--;
      }
      if (left > 0 && (spins + 1) % 64 == 0 && now_s() > end) {
        rc = peer_fail(p, "streams not done after %.0f s", rn_bound_s(60));
        break;
      }
      if (++spins % 1024 == 0) sleep_us(10);
    }
    for (int i = 0; i < n; i++)
      if (rn_stream_teardown(&t[i].s) != 0 && rc == 0) rc = peer_fail(p, "%s", t[i].p.why);
  }
  if (rc == 0 && c->want_inflight && p->role == RN_RECEIVER) {
    for (int i = 0; i < n; i++)
      if (t[i].s.max_inflight < c->want_inflight)
        rc = peer_fail(p,
                       "only %d receives in flight at once, want %d (irecv returned NULL %d times)",
                       t[i].s.max_inflight, c->want_inflight, t[i].s.null_posts);
  }
  if (rc == 0 && c->want_inflight && p->role == RN_SENDER)
    note("sender: %d sends in flight at most (isend returned NULL %d times)", t[0].s.max_inflight,
         t[0].s.null_posts);
  if (peer_sync(p, tmo) != 0 && rc == 0) rc = peer_fail(p, "peer gone before close");
  if (peer_close(p, c->ncomms > 0 ? c->ncomms : 1, comms, lcomms) != 0 && rc == 0) rc = -1;
  for (int i = 0; i < (c->ncomms > 0 ? c->ncomms : 1); i++) {
    free((void *)t[i].s.sizes);
    free(post[i]);
  }
  free(t);
  return rc;
}

/* ---- single-process helpers --------------------------------------------- */
/* listen + connect + accept interleaved on one thread (connect and accept
 * must not block waiting for each other), then a verified stream. */
static int loopback_once_at(struct rn_peer *p, int nmsg, size_t maxsz, int offset) {
  /* NCCL's handle buffers are bytes: nothing promises their alignment. */
  _Alignas(16) char raw[NCCL_NET_HANDLE_MAXSIZE + 16];
  char *handle = raw + offset;
  void *lc = NULL, *sc = NULL, *rc_ = NULL;
  memset(raw, 0, sizeof raw);
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess || lc == NULL) return peer_fail(p, "listen: %s", rn_result_str(r));
  double end = rn_deadline(20);
  while (sc == NULL || rc_ == NULL) {
    if (sc == NULL && (r = rn_net_connect(&p->net, p->dev, handle, &sc)) != ncclSuccess)
      return peer_fail(p, "connect: %s", rn_result_str(r));
    if (rc_ == NULL && (r = rn_net_accept(&p->net, lc, &rc_)) != ncclSuccess)
      return peer_fail(p, "accept: %s", rn_result_str(r));
    if (now_s() > end)
      return peer_fail(p, "connect/accept on one thread: not up after %.0f s (send %p recv %p)",
                       rn_bound_s(20), sc, rc_);
  }
  struct scfg c = {.nmsg = nmsg, .maxrand = maxsz, .window = 4};
  size_t *sizes = make_sizes(&c, p->seed, 0);
  struct rn_stream s = {.p = p,
                        .comm = sc,
                        .is_send = 1,
                        .nmsg = nmsg,
                        .sizes = sizes,
                        .window = 4,
                        .verify = 1,
                        .seed = p->seed};
  struct rn_stream q = s;
  q.comm = rc_;
  q.is_send = 0;
  int rc = 0;
  if (rn_stream_setup(&s) != 0) return -1;
  if (rn_stream_setup(&q) != 0) return -1;
  int ds = 0, dq = 0;
  end = rn_deadline(30);
  while (!(ds && dq)) {
    int a = ds ? 1 : rn_stream_step(&s);
    int b = dq ? 1 : rn_stream_step(&q);
    if (a < 0 || b < 0) {
      rc = -1;
      break;
    }
    ds = a, dq = b;
    if (now_s() > end) {
      rc = peer_fail(p, "loopback stream: %d/%d sent, %d/%d received after %.0f s", s.ncomplete,
                     nmsg, q.ncomplete, nmsg, rn_bound_s(30));
      break;
    }
  }
  if (rn_stream_teardown(&s) != 0) rc = -1;
  if (rn_stream_teardown(&q) != 0) rc = -1;
  free(sizes);
  if ((r = rn_net_close_send(&p->net, sc)) != ncclSuccess)
    rc = peer_fail(p, "closeSend: %s", rn_result_str(r));
  if ((r = rn_net_close_recv(&p->net, rc_)) != ncclSuccess)
    rc = peer_fail(p, "closeRecv: %s", rn_result_str(r));
  if ((r = rn_net_close_listen(&p->net, lc)) != ncclSuccess)
    rc = peer_fail(p, "closeListen: %s", rn_result_str(r));
  return rc;
}

/* ---- cases -------------------------------------------------------------- */
/* The first NIC of a device: its name up to the first '+'. */
static size_t first_nic_len(const char *name) { return strcspn(name, "+"); }

static int case_props(struct rn_peer *p) {
  int ndev = p->ndev;
  char *names[64];
  unsigned long long guid[64];
  int port[64];
  int nn = 0;
  for (int d = 0; d < ndev && d < 64; d++) {
    struct rn_props q;
    ncclResult_t r = rn_net_props(&p->net, d, &q);
    if (r != ncclSuccess) return peer_fail(p, "getProperties(%d): %s", d, rn_result_str(r));
    note(
        "dev %d: name %s pciPath %s guid 0x%llx ptrSupport 0x%x regIsGlobal %d speed %d Mbps port "
        "%d "
        "latency %.1f maxComms %d maxRecvs %d type %d vProps %d[%d] maxP2p %zu maxColl %zu "
        "maxMulti %d railId %d planeId %d",
        d, q.name ? q.name : "(null)", q.pci_path ? q.pci_path : "(null)",
        (unsigned long long)q.guid, q.ptr_support, q.reg_is_global, q.speed, q.port,
        (double)q.latency, q.max_comms, q.max_recvs, q.dev_type, q.vndevs, q.vdev0, q.max_p2p_bytes,
        q.max_coll_bytes, q.max_multi_request_size, q.rail_id, q.plane_id);
    if (q.name == NULL || q.name[0] == '\0')
      return peer_fail(p, "dev %d: name is NULL or empty", d);
    for (int i = 0; i < nn; i++)
      if (strcmp(names[i], q.name) == 0)
        return peer_fail(p, "dev %d: name %s not unique", d, q.name);
    /* NCCL's graph search takes devices with one GUID and port for one NIC
     * (one bandwidth, one rail): so are devices whose first NIC is one,
     * and no others. */
    for (int i = 0; i < nn; i++) {
      size_t li = first_nic_len(names[i]), ld = first_nic_len(q.name);
      int same_nic = li == ld && strncmp(names[i], q.name, li) == 0;
      int same_id = guid[i] == (unsigned long long)q.guid && port[i] == q.port;
      if (same_nic != same_id)
        return peer_fail(p, "dev %d (%s) and dev %d (%s): guid/port 0x%llx/%d and 0x%llx/%d, %s",
                         i, names[i], d, q.name, guid[i], port[i], (unsigned long long)q.guid,
                         q.port,
                         same_nic ? "want one pair (their first NIC is one)"
                                  : "want two (NCCL would take them for one NIC)");
    }
    guid[nn] = (unsigned long long)q.guid;
    port[nn] = q.port;
    names[nn++] = (char *)q.name;
    if (q.speed <= 0) return peer_fail(p, "dev %d: speed %d, want > 0", d, q.speed);
    if (!(q.ptr_support & NCCL_PTR_HOST))
      return peer_fail(p, "dev %d: ptrSupport 0x%x lacks HOST", d, q.ptr_support);
    if (q.max_comms <= 0) return peer_fail(p, "dev %d: maxComms %d", d, q.max_comms);
    if (q.max_recvs < 1) return peer_fail(p, "dev %d: maxRecvs %d, want >= 1", d, q.max_recvs);
    if (q.max_recvs < 8)
      note("dev %d: maxRecvs %d (< 8: NCCL's PXN sharing will not group)", d, q.max_recvs);
    if (q.dev_type != NCCL_NET_DEVICE_HOST)
      return peer_fail(p, "dev %d: netDeviceType %d, want HOST", d, q.dev_type);
    if (q.latency < 0) return peer_fail(p, "dev %d: latency %f < 0", d, (double)q.latency);
    /* TCP registrations are stateless tokens: always global.  Verbs ones
     * are cheap to repeat only through the cache (RAILNET_MR_CACHE). */
    const char *tr = getenv("RAILNET_TRANSPORT"), *cache = getenv("RAILNET_MR_CACHE");
    int want_global = -1;
    if (tr != NULL && (!strcmp(tr, "socket") || !strcmp(tr, "tcp"))) want_global = 1;
    if (tr != NULL && !strcmp(tr, "ib")) want_global = !(cache != NULL && !strcmp(cache, "0"));
    if (want_global >= 0 && q.reg_is_global != want_global)
      return peer_fail(p,
                       "dev %d: regIsGlobal %d, want %d (RAILNET_TRANSPORT=%s RAILNET_MR_CACHE=%s)",
                       d, q.reg_is_global, want_global, tr, cache ? cache : "(unset)");
    if (q.pci_path != NULL && strncmp(q.pci_path, "/sys/devices/", 13) != 0)
      return peer_fail(p, "dev %d: pciPath %s is not a /sys/devices path", d, q.pci_path);
    if (p->version >= 9) {
      if (q.vndevs < 1 || q.vndevs > NCCL_NET_MAX_DEVS_PER_NIC)
        return peer_fail(p, "dev %d: vProps.ndevs %d", d, q.vndevs);
      if (q.vndevs == 1 && q.vdev0 != d)
        return peer_fail(p, "dev %d: vProps.devs[0] = %d", d, q.vdev0);
      if (q.max_p2p_bytes == 0 || q.max_coll_bytes == 0)
        return peer_fail(p, "dev %d: maxP2pBytes %zu maxCollBytes %zu", d, q.max_p2p_bytes,
                         q.max_coll_bytes);
    }
    if (p->version >= 11 && q.max_multi_request_size < 1)
      return peer_fail(p, "dev %d: maxMultiRequestSize %d", d, q.max_multi_request_size);
    /* v12 ids: NCCL_NET_ID_UNDEF or an id; a plane with NCCL's virtual
     * bit (1 << 14) only on a fused device (a '+' in its name), which has
     * either that or no plane at all. */
    if (q.rail_id < NCCL_NET_ID_UNDEF || q.plane_id < NCCL_NET_ID_UNDEF)
      return peer_fail(p, "dev %d: railId %d planeId %d", d, q.rail_id, q.plane_id);
    int fused = strchr(q.name, '+') != NULL, virt = q.plane_id >= 0 && (q.plane_id & (1 << 14));
    if (virt != (fused && q.plane_id != NCCL_NET_ID_UNDEF))
      return peer_fail(p, "dev %d (%s): planeId 0x%x, want the virtual bit on fused devices only",
                       d, q.name, (unsigned)q.plane_id);
  }
  /* getProperties must be repeatable and the strings stable */
  struct rn_props a, b;
  ncclResult_t r;
  if ((r = rn_net_props(&p->net, 0, &a)) != ncclSuccess ||
      (r = rn_net_props(&p->net, 0, &b)) != ncclSuccess)
    return peer_fail(p, "getProperties(0) again: %s", rn_result_str(r));
  if (a.name == NULL || b.name == NULL || strcmp(a.name, b.name) != 0)
    return peer_fail(p, "dev 0 name changed between calls: %s vs %s", a.name ? a.name : "(null)",
                     b.name ? b.name : "(null)");
  int nd2 = -1;
  if ((r = rn_net_devices(&p->net, &nd2)) != ncclSuccess)
    return peer_fail(p, "devices() again: %s", rn_result_str(r));
  if (nd2 != ndev) return peer_fail(p, "devices() changed: %d then %d", ndev, nd2);
  return 0;
}

static int loopback_once(struct rn_peer *p, int nmsg, size_t maxsz) {
  return loopback_once_at(p, nmsg, maxsz, 0);
}

static int case_loopback(struct rn_peer *p) { return loopback_once(p, 32, 1 * MB); }
static int case_odd_handle(struct rn_peer *p) { return loopback_once_at(p, 8, 64 * KB, 1); }

/* grouped receives: irecv(n>1) with tags choosing the buffer */
#define GROUP_ROUNDS 12
static int group_k(struct rn_peer *p) {
  int k = p->props.max_recvs;
  if (k > 8) k = 8;
  return k;
}

static size_t group_size(uint64_t seed, int round, int j) {
  uint64_t s = seed ^ ((uint64_t)round << 20) ^ (uint64_t)j;
  uint64_t r = rng_next(&s);
  if (r % 5 == 0) return 0;
  return (size_t)(rng_next(&s) % (256 * KB));
}

/* End a case that registered one buffer on one comm: release them, wait
 * for the peer to be done too, and close; the first failure decides. */
static int case_finish(struct rn_peer *p, int rc, void *comm, void *mh, void *buf, void **lc) {
  if (peer_check(p, rn_net_deregmr(&p->net, comm, mh), "deregMr")) rc = -1;
  free(buf);
  if (peer_sync(p, 30) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  if (peer_close(p, 1, &comm, lc) != 0 && rc == 0) rc = -1;
  return rc;
}

static int case_group_recv(struct rn_peer *p) {
  int k = group_k(p);
  if (k < 2)
    return peer_fail(p, "maxRecvs %d: grouped receives not supported", p->props.max_recvs),
           RN_EXIT_SKIP;
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30) != 0) return -1;
  size_t slot = 512 * KB;
  unsigned char *arena = NULL;
  if (posix_memalign((void **)&arena, 4096, slot * (size_t)k) != 0) return peer_fail(p, "oom");
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, arena, slot * (size_t)k, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  int rc = 0;
  for (int round = 0; round < GROUP_ROUNDS && rc == 0; round++) {
    void *data[8];
    size_t psz[8];
    int tags[8];
    void *mhs[8];
    for (int j = 0; j < k; j++) {
      data[j] = arena + (size_t)j * slot;
      psz[j] = (j % 2) ? slot : group_size(p->seed, round, j); /* some exact, some larger */
      tags[j] = 1000 + j * 7 + round;
      mhs[j] = mh;
      memset(data[j], 0xA5, psz[j] < 64 * KB ? psz[j] : 64 * KB);
    }
    void *req = NULL;
    double end = rn_deadline(10);
    while (req == NULL) {
      r = rn_net_irecv(&p->net, comm, k, data, psz, tags, mhs, &req);
      if (r != ncclSuccess) {
        rc = peer_fail(p, "irecv(n=%d): %s", k, rn_result_str(r));
        break;
      }
      if (req == NULL && now_s() > end) {
        rc = peer_fail(p, "irecv(n=%d) kept returning NULL for 10 s", k);
        break;
      }
    }
    if (rc) break;
    int got[8];
    for (int j = 0; j < 8; j++) got[j] = -1;
    r = peer_wait(p, req, got, 30);
    if (r != ncclSuccess) {
      rc = p->why[0] ? -1 : peer_fail(p, "round %d: test: %s", round, rn_result_str(r));
      break;
    }
    for (int j = 0; j < k && rc == 0; j++) {
      size_t want = group_size(p->seed, round, j);
      if ((size_t)got[j] != want)
        rc = peer_fail(p, "round %d buffer %d (tag %d): test() reported %d bytes, sent %zu", round,
                       j, tags[j], got[j], want);
      else {
        size_t bad =
            pattern_check(data[j], want, pattern_key(p->seed, (uint64_t)(round * 8 + j), want));
        if (bad != (size_t)-1)
          rc = peer_fail(p,
                         "round %d buffer %d (tag %d, %zu B): byte %zu wrong (data landed in the "
                         "wrong buffer?)",
                         round, j, tags[j], want, bad);
      }
    }
  }
  return case_finish(p, rc, comm, mh, arena, &lc);
}

static int case_group_send(struct rn_peer *p) {
  int k = group_k(p);
  if (k < 2) return RN_EXIT_SKIP;
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) return -1;
  size_t slot = 256 * KB;
  unsigned char *arena = NULL;
  if (posix_memalign((void **)&arena, 4096, slot * (size_t)k) != 0) return peer_fail(p, "oom");
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, arena, slot * (size_t)k, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  int rc = 0;
  uint64_t rng = p->seed;
  for (int round = 0; round < GROUP_ROUNDS && rc == 0; round++) {
    int perm[8];
    for (int j = 0; j < k; j++) perm[j] = j;
    if (round % 2 == 0) {
      for (int j = 0; j < k / 2; j++) {
        int t = perm[j];
        perm[j] = perm[k - 1 - j];
        perm[k - 1 - j] = t;
      }
    } else {
      for (int j = k - 1; j > 0; j--) {
        int i = (int)(rng_next(&rng) % (uint64_t)(j + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
      }
    }
    void *reqs[8] = {0};
    for (int x = 0; x < k && rc == 0; x++) {
      int j = perm[x];
      size_t sz = group_size(p->seed, round, j);
      void *buf = arena + (size_t)x * slot;
      pattern_fill(buf, sz, pattern_key(p->seed, (uint64_t)(round * 8 + j), sz));
      double end = rn_deadline(10);
      while (reqs[x] == NULL) {
        r = rn_net_isend(&p->net, comm, buf, sz, 1000 + j * 7 + round, mh, &reqs[x]);
        if (r != ncclSuccess) {
          rc = peer_fail(p, "isend(tag %d): %s", 1000 + j * 7 + round, rn_result_str(r));
          break;
        }
        if (reqs[x] == NULL && now_s() > end) {
          rc = peer_fail(p, "isend kept returning NULL for 10 s");
          break;
        }
      }
    }
    for (int x = 0; x < k && rc == 0; x++) {
      r = peer_wait(p, reqs[x], NULL, 30);
      if (r != ncclSuccess) rc = p->why[0] ? -1 : peer_fail(p, "test(send): %s", rn_result_str(r));
    }
  }
  return case_finish(p, rc, comm, mh, arena, NULL);
}

/* Both processes send and receive at once, each from one thread. */
/* One round on a listen comm that is already open: connect with a fresh
 * copy of the peer's handle (connect may keep state in it) and accept,
 * nmsg random sizes each way at once, every byte checked, then close the
 * send and receive comms. */
static int bidir_round(struct rn_peer *p, void *lc, const char *handle, int nmsg, int round) {
  char theirs[NCCL_NET_HANDLE_MAXSIZE];
  void *sc = NULL, *rcm = NULL;
  ncclResult_t r;
  memcpy(theirs, handle, sizeof theirs);
  double end = rn_deadline(30);
  while (sc == NULL || rcm == NULL) {
    if (sc == NULL && (r = rn_net_connect(&p->net, p->dev, theirs, &sc)) != ncclSuccess)
      return peer_fail(p, "round %d: connect: %s", round, rn_result_str(r));
    if (rcm == NULL && (r = rn_net_accept(&p->net, lc, &rcm)) != ncclSuccess)
      return peer_fail(p, "round %d: accept: %s", round, rn_result_str(r));
    if (now_s() > end) return peer_fail(p, "round %d: setup not done after 30 s", round);
  }
  struct scfg c = {.nmsg = nmsg, .maxrand = 2 * MB};
  /* my sends use my role's seed, my receives the peer's */
  uint64_t sseed = p->seed + (uint64_t)round * 1009 + (uint64_t)p->role * 101,
           rseed = p->seed + (uint64_t)round * 1009 + (uint64_t)(1 - p->role) * 101;
  size_t *ss = make_sizes(&c, sseed, 0), *rs = make_sizes(&c, rseed, 0);
  struct rn_stream s = {.p = p,
                        .comm = sc,
                        .is_send = 1,
                        .nmsg = nmsg,
                        .sizes = ss,
                        .window = 8,
                        .verify = 1,
                        .seed = sseed};
  struct rn_stream q = {.p = p,
                        .comm = rcm,
                        .is_send = 0,
                        .nmsg = nmsg,
                        .sizes = rs,
                        .window = 8,
                        .verify = 1,
                        .seed = rseed,
                        .order = RN_ORDER_RANDOM};
  int rc = 0;
  if (rn_stream_setup(&s) != 0 || rn_stream_setup(&q) != 0) rc = -1;
  int ds = 0, dq = 0;
  end = rn_deadline(60);
  while (!(ds && dq) && rc == 0) {
    int a = ds ? 1 : rn_stream_step(&s);
    int b = dq ? 1 : rn_stream_step(&q);
    if (a < 0 || b < 0) rc = -1;
    ds = a, dq = b;
    if (rc == 0 && now_s() > end)
      rc = peer_fail(p, "round %d: bidirectional streams not done after 60 s", round);
  }
  if (rn_stream_teardown(&s) != 0) rc = -1;
  if (rn_stream_teardown(&q) != 0) rc = -1;
  free(ss);
  free(rs);
  if (peer_sync(p, 30) != 0 && rc == 0) rc = peer_fail(p, "round %d: peer gone", round);
  if ((r = rn_net_close_send(&p->net, sc)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "round %d: closeSend: %s", round, rn_result_str(r));
  if ((r = rn_net_close_recv(&p->net, rcm)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "round %d: closeRecv: %s", round, rn_result_str(r));
  return rc;
}

/* Each side listens once and both connect to each other: `rounds` pairs of
 * comms in turn over the same listen comms and handles. */
static int bidir_rounds(struct rn_peer *p, int rounds, int nmsg) {
  char mine[NCCL_NET_HANDLE_MAXSIZE] = {0}, theirs[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, mine, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  if (peer_write(p, mine, sizeof mine) != 0 || peer_read(p, theirs, sizeof theirs, 30) != 0)
    return peer_fail(p, "handle exchange failed");
  int rc = 0;
  for (int k = 0; k < rounds && rc == 0; k++) rc = bidir_round(p, lc, theirs, nmsg, k);
  if ((r = rn_net_close_listen(&p->net, lc)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "closeListen: %s", rn_result_str(r));
  return rc;
}

static int case_bidir(struct rn_peer *p) { return bidir_rounds(p, 1, 64); }

/* Both processes post eight receives, then eight sends, then test only
 * their sends until all are done, and only then the receives (MPI-style
 * code: Irecv x8, Isend x8, Waitall on the sends first).  A send may need
 * what only the peer's receive comm sends (a clear-to-send, a FIFO
 * slot), while the peer's caller tests its send comm alone: a transport
 * that moves a receive comm's announcements only in that comm's own calls
 * waits for ever here.  Sizes cross the transports' thresholds; every
 * byte is checked; the bound turns a hang into a failure. */
static int case_sends_first(struct rn_peer *p) {
  static const size_t sz[] = {1, 4096, 65537, 524288, 8, 131072, 1048576, 3};
  enum { N = sizeof sz / sizeof sz[0] };
  size_t off[N + 1] = {0};
  for (int i = 0; i < N; i++) off[i + 1] = off[i] + sz[i];
  char *sbuf = malloc(off[N]), *rbuf = calloc(1, off[N]);
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL, *sreq[N] = {0}, *rreq[N] = {0};
  int ret = -1;
  if (sbuf == NULL || rbuf == NULL) {
    peer_fail(p, "out of memory");
    goto out;
  }
  for (int i = 0; i < N; i++)
    pattern_fill(sbuf + off[i], sz[i], pattern_key(p->seed, (uint64_t)(2 * i + p->role), sz[i]));
  if (peer_both_ways(p, &lc, &sc, &rc, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, sc, sbuf, off[N], NCCL_PTR_HOST, &smh), "regMr") ||
      peer_check(p, rn_net_regmr(&p->net, rc, rbuf, off[N], NCCL_PTR_HOST, &rmh), "regMr"))
    goto out;
  double end = rn_deadline(30);
  for (int i = 0; i < N; i++) {
    void *d = rbuf + off[i];
    size_t n = sz[i];
    int tag = 7;
    while (rreq[i] == NULL && now_s() < end)
      if (peer_check(p, rn_net_irecv(&p->net, rc, 1, &d, &n, &tag, &rmh, &rreq[i]), "irecv"))
        goto out;
    if (rreq[i] == NULL) {
      peer_fail(p, "receive %d not posted after 30 s", i);
      goto out;
    }
  }
  /* isend may say "later" until the peer's receive comm announced the
   * receive; the peer is in this same loop, calling only its send comm. */
  for (int i = 0; i < N; i++) {
    while (sreq[i] == NULL && now_s() < end)
      if (peer_check(p, rn_net_isend(&p->net, sc, sbuf + off[i], sz[i], 7, smh, &sreq[i]),
                     "isend"))
        goto out;
    if (sreq[i] == NULL) {
      peer_fail(p, "send %d of %zu B not posted after 30 s, testing only the send comm", i, sz[i]);
      goto out;
    }
  }
  for (int i = 0; i < N; i++)
    if (peer_check(p, peer_wait(p, sreq[i], NULL, 30), "test (sends, before any receive)"))
      goto out;
  for (int i = 0; i < N; i++) {
    int got = -1;
    if (peer_check(p, peer_wait(p, rreq[i], &got, 30), "test (receives, after the sends)"))
      goto out;
    uint64_t key = pattern_key(p->seed, (uint64_t)(2 * i + 1 - p->role), sz[i]);
    if (got != (int)sz[i] || pattern_check(rbuf + off[i], sz[i], key) != (size_t)-1) {
      peer_fail(p, "receive %d: %d bytes of %zu, or wrong bytes", i, got, sz[i]);
      goto out;
    }
  }
  ret = peer_sync(p, 30);
out:
  peer_both_ways_close(p, lc, sc, rc, smh, rmh);
  free(sbuf);
  free(rbuf);
  return ret;
}

/* A listen comm serves more than one accept, and a handle more than one
 * connect (other plugins' test suites check this; NCCL may keep a listen
 * comm for a peer's later connections). */
static int case_reuse_listen(struct rn_peer *p) { return bidir_rounds(p, 5, 8); }

/* Repeated and overlapping registrations of one buffer, deregistered in a
 * different order, each still usable. */
static int case_regmr(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL, 30) != 0) return -1;
  size_t len = 4 * MB;
  unsigned char *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, len) != 0) return peer_fail(p, "oom");
  void *mh[3] = {0};
  ncclResult_t r;
  int rc = 0;
  if ((r = rn_net_regmr(&p->net, comm, buf, len, NCCL_PTR_HOST, &mh[0])) != ncclSuccess ||
      (r = rn_net_regmr(&p->net, comm, buf, len, NCCL_PTR_HOST, &mh[1])) != ncclSuccess ||
      (r = rn_net_regmr(&p->net, comm, buf + 1 * MB, 1 * MB + 3, NCCL_PTR_HOST, &mh[2])) !=
          ncclSuccess)
    return peer_fail(p, "regMr: %s", rn_result_str(r));
  if ((r = rn_net_deregmr(&p->net, comm, mh[0])) != ncclSuccess)
    return peer_fail(p, "deregMr(first of two equal registrations): %s", rn_result_str(r));
  /* message 0 through the sub-range registration, 1 through the second
   * whole-buffer one */
  struct {
    size_t off, len;
    int m;
  } msg[2] = {{1 * MB, 1 * MB + 3, 2}, {0, len, 1}};
  for (int i = 0; i < 2 && rc == 0; i++) {
    unsigned char *d = buf + msg[i].off;
    uint64_t key = pattern_key(p->seed, (uint64_t)i, msg[i].len);
    void *req = NULL;
    double end = rn_deadline(10);
    if (p->role == RN_SENDER)
      pattern_fill(d, msg[i].len, key);
    else
      memset(d, 0, msg[i].len);
    while (req == NULL && rc == 0) {
      if (p->role == RN_SENDER)
        r = rn_net_isend(&p->net, comm, d, msg[i].len, 7, mh[msg[i].m], &req);
      else {
        void *dp = d;
        int tag = 7;
        r = rn_net_irecv(&p->net, comm, 1, &dp, &msg[i].len, &tag, &mh[msg[i].m], &req);
      }
      if (r != ncclSuccess)
        rc = peer_fail(p, "post msg %d: %s", i, rn_result_str(r));
      else if (req == NULL && now_s() > end)
        rc = peer_fail(p, "post msg %d: NULL request for 10 s", i);
    }
    int got = -1;
    if (rc == 0 && (r = peer_wait(p, req, &got, 30)) != ncclSuccess)
      rc = p->why[0] ? -1 : peer_fail(p, "test msg %d: %s", i, rn_result_str(r));
    if (rc == 0 && p->role == RN_RECEIVER) {
      if ((size_t)got != msg[i].len)
        rc = peer_fail(p, "msg %d: %d bytes, want %zu", i, got, msg[i].len);
      else if (pattern_check(d, msg[i].len, key) != (size_t)-1)
        rc = peer_fail(p, "msg %d: data differs", i);
    }
  }
  if ((r = rn_net_deregmr(&p->net, comm, mh[2])) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "deregMr: %s", rn_result_str(r));
  if ((r = rn_net_deregmr(&p->net, comm, mh[1])) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "deregMr: %s", rn_result_str(r));
  free(buf);
  if (peer_sync(p, 30) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  if (peer_close(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL) != 0 && rc == 0) rc = -1;
  return rc;
}

/* v9+: NCCL may pass *request == (void*)0x1 into irecv; a real request
 * must still come back. */
static int case_req_preset_recv(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30) != 0) return -1;
  unsigned char *buf = malloc(64 * KB);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, 64 * KB, NCCL_PTR_HOST, &mh);
  int rc = 0;
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  for (int i = 0; i < 4 && rc == 0; i++) {
    void *req = (void *)0x1;
    size_t sz = 64 * KB;
    void *d = buf;
    int tag = 3;
    double end = rn_deadline(10);
    for (;;) {
      r = rn_net_irecv(&p->net, comm, 1, &d, &sz, &tag, &mh, &req);
      if (r != ncclSuccess) {
        rc = peer_fail(p, "irecv with *request=0x1: %s", rn_result_str(r));
        break;
      }
      if (req == (void *)0x1) {
        rc = peer_fail(p, "irecv left *request == 0x1 (must return a real request or NULL)");
        break;
      }
      if (req != NULL) break;
      req = (void *)0x1;
      if (now_s() > end) {
        rc = peer_fail(p, "irecv NULL for 10 s");
        break;
      }
    }
    int got = -1;
    if (rc == 0 && (r = peer_wait(p, req, &got, 30)) != ncclSuccess)
      rc = p->why[0] ? -1 : peer_fail(p, "test: %s", rn_result_str(r));
    if (rc == 0 && got != 1000 + i)
      rc = peer_fail(p, "msg %d: got %d bytes, want %d", i, got, 1000 + i);
    if (rc == 0 &&
        pattern_check(buf, (size_t)got, pattern_key(p->seed, (uint64_t)i, 1000)) != (size_t)-1)
      rc = peer_fail(p, "msg %d: data differs", i);
  }
  return case_finish(p, rc, comm, mh, buf, &lc);
}

static int case_req_preset_send(struct rn_peer *p) {
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) return -1;
  unsigned char *buf = malloc(64 * KB);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, 64 * KB, NCCL_PTR_HOST, &mh);
  int rc = 0;
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  for (int i = 0; i < 4 && rc == 0; i++) {
    size_t sz = 1000 + (size_t)i;
    pattern_fill(buf, sz, pattern_key(p->seed, (uint64_t)i, 1000));
    void *req = NULL;
    double end = rn_deadline(10);
    while (req == NULL && rc == 0) {
      if ((r = rn_net_isend(&p->net, comm, buf, sz, 3, mh, &req)) != ncclSuccess)
        rc = peer_fail(p, "isend: %s", rn_result_str(r));
      else if (req == NULL && now_s() > end)
        rc = peer_fail(p, "isend NULL for 10 s");
    }
    if (rc == 0 && (r = peer_wait(p, req, NULL, 30)) != ncclSuccess)
      rc = p->why[0] ? -1 : peer_fail(p, "test: %s", rn_result_str(r));
  }
  return case_finish(p, rc, comm, mh, buf, NULL);
}

/* v11 and v12: init/finalize per communicator, repeated and concurrent. */
struct ithr {
  struct rn_net net;
  int iters;
  char why[256];
};

static void *init_thr(void *a) {
  struct ithr *t = a;
  for (int i = 0; i < t->iters; i++) {
    ncclResult_t r = rn_net_init(&t->net);
    if (r != ncclSuccess) {
      snprintf(t->why, sizeof t->why, "init #%d: %s", i, rn_result_str(r));
      return NULL;
    }
    int nd = 0;
    struct rn_props q;
    if ((r = rn_net_devices(&t->net, &nd)) != ncclSuccess || nd <= 0) {
      snprintf(t->why, sizeof t->why, "devices after init #%d: %s, %d", i, rn_result_str(r), nd);
      return NULL;
    }
    if ((r = rn_net_props(&t->net, 0, &q)) != ncclSuccess || q.name == NULL) {
      snprintf(t->why, sizeof t->why, "getProperties after init #%d: %s", i, rn_result_str(r));
      return NULL;
    }
    if ((r = rn_net_finalize(&t->net)) != ncclSuccess) {
      snprintf(t->why, sizeof t->why, "finalize #%d: %s", i, rn_result_str(r));
      return NULL;
    }
  }
  return NULL;
}

static int case_v11_lifecycle(struct rn_peer *p) {
  if (p->version < 11) return peer_fail(p, "finalize exists from v11 on"), RN_EXIT_SKIP;
  /* sequential */
  for (int i = 0; i < 5; i++) {
    struct ithr t = {.net = p->net, .iters = 1};
    init_thr(&t);
    if (t.why[0]) return peer_fail(p, "sequential: %s", t.why);
  }
  /* concurrent, separate contexts */
  struct ithr t[4];
  pthread_t tid[4];
  for (int i = 0; i < 4; i++) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].net = p->net;
    t[i].iters = 8;
    pthread_create(&tid[i], NULL, init_thr, &t[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < 4; i++)
    if (t[i].why[0]) return peer_fail(p, "concurrent thread %d: %s", i, t[i].why);
  /* two live contexts; finalizing one leaves the other working */
  struct rn_net a = p->net, b = p->net;
  ncclResult_t r;
  if ((r = rn_net_init(&a)) != ncclSuccess || (r = rn_net_init(&b)) != ncclSuccess)
    return peer_fail(p, "init of two contexts: %s", rn_result_str(r));
  if (a.ctx == b.ctx && a.ctx != NULL) note("two inits returned the same context %p", a.ctx);
  if ((r = rn_net_finalize(&a)) != ncclSuccess)
    return peer_fail(p, "finalize(A): %s", rn_result_str(r));
  int nd = 0;
  if ((r = rn_net_devices(&b, &nd)) != ncclSuccess || nd <= 0)
    return peer_fail(p, "devices() after finalize(A) with B live: %s, %d", rn_result_str(r), nd);
  struct rn_peer q = *p;
  q.net = b;
  if (loopback_once(&q, 8, 256 * KB) != 0)
    return peer_fail(p, "context B after finalize(A): %s", q.why);
  if ((r = rn_net_finalize(&b)) != ncclSuccess)
    return peer_fail(p, "finalize(B): %s", rn_result_str(r));
  /* and once more from scratch after everything was finalized */
  struct rn_net c = p->net;
  if ((r = rn_net_init(&c)) != ncclSuccess)
    return peer_fail(p, "init after all finalized: %s", rn_result_str(r));
  q.net = c;
  if (loopback_once(&q, 8, 256 * KB) != 0)
    return peer_fail(p, "fresh context after full finalize: %s", q.why);
  if ((r = rn_net_finalize(&c)) != ncclSuccess)
    return peer_fail(p, "finalize(C): %s", rn_result_str(r));
  return 0;
}

/* NCCL 2.28 dlcloses the plugin after the last communicator and may
 * dlopen it again: threads must be gone and state must restart cleanly. */
static int case_reload(struct rn_peer *p) {
  char err0[512];
  rn_net_close(&p->net); /* drop the runner's handle so dlclose really unloads */
  for (int round = 0; round < 3; round++) {
    char err[512];
    struct rn_net n;
    if (rn_net_open(&n, p->version, err, sizeof err) != 0)
      return peer_fail(p, "reopen #%d: %s", round, err);
    ncclResult_t r = rn_net_init(&n);
    if (r != ncclSuccess) return peer_fail(p, "init after reload #%d: %s", round, rn_result_str(r));
    int nd = 0;
    if ((r = rn_net_devices(&n, &nd)) != ncclSuccess || nd <= 0)
      return peer_fail(p, "devices after reload #%d: %s, %d", round, rn_result_str(r), nd);
    struct rn_peer q = *p;
    q.net = n;
    if (loopback_once(&q, 8, 256 * KB) != 0) return peer_fail(p, "reload #%d: %s", round, q.why);
    if ((r = rn_net_finalize(&n)) != ncclSuccess)
      return peer_fail(p, "finalize: %s", rn_result_str(r));
    rn_net_close(&n);
  }
  if (rn_net_open(&p->net, p->version, err0, sizeof err0) != 0)
    return peer_fail(p, "reopen: %s", err0);
  return 0;
}

/* Threads of this process (the plugin's helpers show up here). */
static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (d == NULL) return -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A joined thread's task can outlive pthread_join by a moment; one that
 * was never stopped stays.  The bound only separates the two. */
static int threads_down_to(int want) {
  double end = rn_deadline(5);
  int n;
  while ((n = count_threads()) > want && now_s() < end) sleep_us(1000);
  return n;
}

/* NCCL's abort path: finalize/dlclose with comms still open and a large
 * transfer in flight.  Every thread the plugin started must be gone when
 * finalize returns (v11) and when dlclose returns (all versions): one left
 * running would execute unmapped code. */
static int case_unload_open(struct rn_peer *p) {
  char err[512];
  rn_net_close(&p->net);                     /* the runner's handle would keep the code mapped */
  setenv("RAILNET_SOCKET_NTHREADS", "2", 0); /* TCP: make sure helper threads exist */
  int base = count_threads();
  if (base < 1) return peer_fail(p, "cannot count threads in /proc/self/task");
  struct rn_net n;
  if (rn_net_open(&n, p->version, err, sizeof err) != 0) return peer_fail(p, "open: %s", err);
  ncclResult_t r = rn_net_init(&n);
  int nd = 0;
  if (r != ncclSuccess || (r = rn_net_devices(&n, &nd)) != ncclSuccess || nd <= 0)
    return peer_fail(p, "init/devices: %s, %d devices", rn_result_str(r), nd);
  struct rn_peer q = *p;
  q.net = n;
  void *lc, *sc, *rcm;
  if (peer_loopback(&q, &lc, &sc, &rcm, 20) != 0) return peer_fail(p, "%s", q.why);
  size_t sz = 64 * MB;
  unsigned char *sb = malloc(sz), *rb = malloc(sz);
  if (sb == NULL || rb == NULL) return peer_fail(p, "oom");
  memset(sb, 1, sz);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  if ((r = rn_net_regmr(&n, sc, sb, sz, NCCL_PTR_HOST, &smh)) != ncclSuccess ||
      (r = rn_net_regmr(&n, rcm, rb, sz, NCCL_PTR_HOST, &rmh)) != ncclSuccess)
    return peer_fail(p, "regMr: %s", rn_result_str(r));
  void *d = rb;
  int tag = 1;
  double end = rn_deadline(10);
  while (rreq == NULL && now_s() < end)
    if ((r = rn_net_irecv(&n, rcm, 1, &d, &sz, &tag, &rmh, &rreq)) != ncclSuccess)
      return peer_fail(p, "irecv: %s", rn_result_str(r));
  while (sreq == NULL && now_s() < end)
    if ((r = rn_net_isend(&n, sc, sb, sz, 1, smh, &sreq)) != ncclSuccess)
      return peer_fail(p, "isend: %s", rn_result_str(r));
  if (rreq == NULL || sreq == NULL) return peer_fail(p, "isend/irecv kept returning NULL");
  int done = 0;
  if ((r = rn_net_test(&n, sreq, &done, NULL)) != ncclSuccess)
    return peer_fail(p, "test: %s", rn_result_str(r));
  int during = count_threads();
  note("threads: %d before loading, %d with the transfer in flight", base, during);
  /* abandon everything: no test to completion, no deregMr, no close */
  if ((r = rn_net_finalize(&n)) != ncclSuccess)
    return peer_fail(p, "finalize with comms open: %s", rn_result_str(r));
  if (p->version >= 11) {
    int left = threads_down_to(base);
    if (left != base)
      return peer_fail(p, "%d of the plugin's threads still running after finalize returned",
                       left - base);
  }
  rn_net_close(&n);
  int left = threads_down_to(base);
  free(sb);
  free(rb);
  if (left != base)
    return peer_fail(p, "%d of the plugin's threads still running after dlclose", left - base);
  if (rn_net_open(&p->net, p->version, err, sizeof err) != 0)
    return peer_fail(p, "reopen: %s", err);
  return 0;
}

/* The entry points NCCL calls only in some configurations, through this
 * version's table, on a live comm pair in one process:
 *  - iflush of a completed receive into host memory: ncclSuccess and a NULL
 *    request ("nothing to wait for"; NCCL does not retry it); with no
 *    buffers, or on a send comm: an error and a WARN;
 *  - getDeviceMr of a host registration: ncclSuccess and *dptr == NULL (a
 *    HOST device has nothing for device code); a NULL out pointer: an
 *    error and a WARN;
 *  - irecvConsumed on the receive comm after a receive: ncclSuccess; on a
 *    send comm: an error and a WARN;
 *  - regMrDmaBuf on a device without NCCL_PTR_DMABUF (NCCL never calls it
 *    then): an error and a WARN, no handle;
 * and afterwards the pair still carries a verified message. */
static int expect_refused(struct rn_peer *p, ncclResult_t r, int warns_before, const char *what) {
  if (r == ncclSuccess) return peer_fail(p, "%s returned ncclSuccess, want an error", what);
  if (rn_log_warns() == warns_before)
    return peer_fail(p, "%s returned %s without a WARN", what, rn_result_str(r));
  return 0;
}

static int one_message(struct rn_peer *p, void *sc, void *rcm, size_t len, uint64_t seq) {
  struct scfg c = {.nmsg = 1, .fixed = len, .window = 1};
  size_t *sizes = make_sizes(&c, p->seed, 0);
  struct rn_stream s = {.p = p,
                        .comm = sc,
                        .is_send = 1,
                        .nmsg = 1,
                        .sizes = sizes,
                        .window = 1,
                        .verify = 1,
                        .seed = p->seed + seq};
  struct rn_stream q = s;
  q.comm = rcm;
  q.is_send = 0;
  int rc = 0, ds = 0, dq = 0;
  if (rn_stream_setup(&s) != 0 || rn_stream_setup(&q) != 0) rc = -1;
  double end = rn_deadline(30);
  while (rc == 0 && !(ds && dq)) {
    int a = ds ? 1 : rn_stream_step(&s);
    int b = dq ? 1 : rn_stream_step(&q);
    if (a < 0 || b < 0) rc = -1;
    ds = a, dq = b;
    if (rc == 0 && !(ds && dq) && now_s() > end)
      rc = peer_fail(p, "one %zu B message not through after %.0f s", len, rn_bound_s(30));
  }
  if (rn_stream_teardown(&s) != 0) rc = -1;
  if (rn_stream_teardown(&q) != 0) rc = -1;
  free(sizes);
  return rc;
}

static int case_optional_entry_points(struct rn_peer *p) {
  void *lc = NULL, *sc = NULL, *rcm = NULL;
  if (peer_loopback(p, &lc, &sc, &rcm, 20) != 0) return -1;
  int rc = 0, w;
  ncclResult_t r;
  size_t len = 4096;
  unsigned char *sb = calloc(1, len), *rb = calloc(1, len);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL, *out = NULL;
  if (sb == NULL || rb == NULL) return peer_fail(p, "oom");
  if ((r = rn_net_regmr(&p->net, sc, sb, len, NCCL_PTR_HOST, &smh)) != ncclSuccess ||
      (r = rn_net_regmr(&p->net, rcm, rb, len, NCCL_PTR_HOST, &rmh)) != ncclSuccess)
    return peer_fail(p, "regMr: %s", rn_result_str(r));
  /* one received message to flush and to mark consumed */
  pattern_fill(sb, len, 7);
  void *d = rb;
  int tag = 5, done_s = 0, done_r = 0, got = -1;
  double end = rn_deadline(20);
  while (rc == 0 && !(done_s && done_r)) {
    if (rreq == NULL && (r = rn_net_irecv(&p->net, rcm, 1, &d, &len, &tag, &rmh, &rreq)))
      rc = peer_fail(p, "irecv: %s", rn_result_str(r));
    else if (sreq == NULL && (r = rn_net_isend(&p->net, sc, sb, len, tag, smh, &sreq)))
      rc = peer_fail(p, "isend: %s", rn_result_str(r));
    else if (sreq && !done_s && (r = rn_net_test(&p->net, sreq, &done_s, NULL)))
      rc = peer_fail(p, "test(send): %s", rn_result_str(r));
    else if (rreq && !done_r && (r = rn_net_test(&p->net, rreq, &done_r, &got)))
      rc = peer_fail(p, "test(recv): %s", rn_result_str(r));
    else if (now_s() > end)
      rc = peer_fail(p, "the first message did not complete");
  }
  if (rc == 0 && (got != (int)len || pattern_check(rb, len, 7) != (size_t)-1))
    rc = peer_fail(p, "the first message arrived wrong (%d bytes)", got);
  /* iflush */
  int fsize = (int)len;
  void *freq = (void *)0x1;
  if (rc == 0 && (r = rn_net_iflush(&p->net, rcm, 1, &d, &fsize, &rmh, &freq)) != ncclSuccess)
    rc = peer_fail(p, "iflush of a host-memory receive: %s, want ncclSuccess", rn_result_str(r));
  if (rc == 0 && freq != NULL)
    rc = peer_fail(p, "iflush of a host-memory receive returned request %p, want NULL", freq);
  w = rn_log_warns();
  if (rc == 0)
    rc = expect_refused(p, rn_net_iflush(&p->net, rcm, 0, &d, &fsize, &rmh, &freq), w,
                        "iflush with 0 buffers");
  w = rn_log_warns();
  if (rc == 0)
    rc = expect_refused(p, rn_net_iflush(&p->net, sc, 1, &d, &fsize, &smh, &freq), w,
                        "iflush on a send comm");
  /* getDeviceMr */
  if (rc == 0 && !rn_net_has_get_device_mr(&p->net))
    note("getDeviceMr is NULL in this table (allowed: NCCL then skips it)");
  else if (rc == 0) {
    out = (void *)0x1;
    if ((r = rn_net_get_device_mr(&p->net, rcm, rmh, &out)) != ncclSuccess)
      rc = peer_fail(p, "getDeviceMr of a host registration: %s", rn_result_str(r));
    else if (out != NULL)
      rc = peer_fail(p, "getDeviceMr of a host registration gave %p, want NULL", out);
    w = rn_log_warns();
    if (rc == 0)
      rc = expect_refused(p, rn_net_get_device_mr(&p->net, rcm, rmh, NULL), w,
                          "getDeviceMr with a NULL out pointer");
  }
  /* irecvConsumed */
  if (rc == 0 && !rn_net_has_irecv_consumed(&p->net))
    note("irecvConsumed is NULL in this table (allowed)");
  else if (rc == 0) {
    if ((r = rn_net_irecv_consumed(&p->net, rcm, 1, rreq)) != ncclSuccess)
      rc = peer_fail(p, "irecvConsumed on the receive comm: %s", rn_result_str(r));
    w = rn_log_warns();
    if (rc == 0)
      rc = expect_refused(p, rn_net_irecv_consumed(&p->net, sc, 1, sreq), w,
                          "irecvConsumed on a send comm");
  }
  /* regMrDmaBuf */
  if (rc == 0 && (p->props.ptr_support & NCCL_PTR_DMABUF)) {
    note("device advertises DMABUF: registering a dma-buf needs a CUDA buffer, not done here");
  } else if (rc == 0) {
    void *dmh = (void *)0x1;
    w = rn_log_warns();
    rc = expect_refused(p, rn_net_regmr_dmabuf(&p->net, sc, sb, len, NCCL_PTR_HOST, 0, -1, &dmh), w,
                        "regMrDmaBuf without NCCL_PTR_DMABUF");
    if (rc == 0 && dmh != NULL && dmh != (void *)0x1)
      rc = peer_fail(p, "regMrDmaBuf failed but returned a handle %p", dmh);
  }
  /* the pair still works */
  if (rc == 0 && one_message(p, sc, rcm, 64 * KB, 1) != 0) rc = -1;
  if (peer_check(p, rn_net_deregmr(&p->net, sc, smh), "deregMr(send)")) rc = -1;
  if (peer_check(p, rn_net_deregmr(&p->net, rcm, rmh), "deregMr(recv)")) rc = -1;
  if (peer_check(p, rn_net_close_send(&p->net, sc), "closeSend")) rc = -1;
  if (peer_check(p, rn_net_close_recv(&p->net, rcm), "closeRecv")) rc = -1;
  if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) rc = -1;
  free(sb);
  free(rb);
  return rc;
}

/* v11+ setNetAttr: NCCL passes per-communicator hints (peer and flow counts,
 * op/algo/proto masks).  railnet accepts them as hints, like NCCL's own IB
 * transport, and the context keeps carrying traffic. */
static int case_set_net_attr(struct rn_peer *p) {
  ncclNetAttr_v11_t attr;
  memset(&attr, 0, sizeof attr);
  attr.sendCommAttr = (ncclNetCommAttr_v11_t){
      .maxConcurrentPeers = 8, .minConcurrentPeers = 1, .maxFlowsPerPeer = 4, .minFlowsPerPeer = 1};
  attr.recvCommAttr = (ncclNetCommAttr_v11_t){NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF,
                                              NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF};
  attr.op = 0x1, attr.algo = 0x2, attr.proto = 0x4;
  ncclResult_t r = rn_net_set_net_attr(&p->net, &attr);
  if (r != ncclSuccess) return peer_fail(p, "setNetAttr: %s, want ncclSuccess", rn_result_str(r));
  if (loopback_once(p, 8, 256 * KB) != 0) return -1;
  return 0;
}

/* ---- the table ---------------------------------------------------------- */
struct tcase {
  const char *name;
  rn_peer_fn recv, send; /* send NULL: single process */
  const struct scfg *cfg;
  int timeout_s;
  int min_version;
  int smoke; /* part of the v9/v10 smoke pass */
  int init;  /* 0: the case initializes itself */
};

static const struct scfg c_0 = {.nmsg = 4, .fixed = 0, .window = 2};
static const struct scfg c_1 = {.nmsg = 4, .fixed = 1, .window = 2};
static const struct scfg c_4k = {.nmsg = 16, .fixed = 4 * KB, .window = 4};
static const struct scfg c_1m = {.nmsg = 8, .fixed = 1 * MB, .window = 4};
static const struct scfg c_64m = {.nmsg = 3, .fixed = 64 * MB, .window = 1};
static const struct scfg c_rand = {.nmsg = 200, .maxrand = 4 * MB, .window = 8};
static const struct scfg c_bigger = {
    .nmsg = 64, .maxrand = 256 * KB, .post_size = 1 * MB, .window = 8};
static const struct scfg c_nullsz = {.nmsg = 32, .maxrand = 256 * KB, .window = 4, .null_sizes = 1};
static const struct scfg c_32 = {
    .nmsg = 96, .maxrand = 64 * KB, .window = 32, .post_all_first = 1, .want_inflight = 32};
static const struct scfg c_rev = {
    .nmsg = 64, .maxrand = 512 * KB, .window = 8, .order = RN_ORDER_REVERSE};
static const struct scfg c_rnd = {
    .nmsg = 128, .maxrand = 512 * KB, .window = 16, .order = RN_ORDER_RANDOM};
static const struct scfg c_thr = {.nmsg = 64,
                                  .maxrand = 2 * MB,
                                  .window = 8,
                                  .ncomms = 4,
                                  .threads = 1,
                                  .order = RN_ORDER_RANDOM};
static const struct scfg c_one = {.nmsg = 32, .maxrand = 2 * MB, .window = 8, .ncomms = 4};
static const struct scfg c_many = {.nmsg = 4, .maxrand = 256 * KB, .window = 2, .ncomms = 16};
static const struct scfg c_64c = {.nmsg = 2, .maxrand = 64 * KB, .window = 2, .ncomms = 64};
/* Each size on either side of where a transport changes how it moves a
 * message: verbs inline sends, the page, TCP's eager/inline limit (64 KiB),
 * its smallest chunk and chunk grid (128 and 512 KiB), the 4 MiB that goes
 * inline while data streams open. */
static const size_t edge_sizes[] = {
    1,          2,          63,          64,          65,          255,        256,
    257,        4095,       4096,        4097,        8191,        8192,       8193,
    65535,      65536,      65537,       131071,      131072,      131073,     524287,
    524288,     524289,     1048575,     1048577,     4194303,     4194304,    4194305};
#define N_EDGE ((int)(sizeof(edge_sizes) / sizeof(edge_sizes[0])))
static const struct scfg c_edge = {.nmsg = N_EDGE, .list = edge_sizes, .nlist = N_EDGE, .window = 4};
static const struct scfg c_edge_late = {
    .nmsg = N_EDGE, .list = edge_sizes, .nlist = N_EDGE, .window = 8, .recv_delay_ms = 300};
static const struct scfg c_lateacc = {
    .nmsg = 8, .maxrand = 1 * MB, .window = 4, .ncomms = 2, .accept_delay_ms = 1500};
static const struct scfg c_lateconn = {
    .nmsg = 8, .maxrand = 1 * MB, .window = 4, .ncomms = 2, .connect_delay_ms = 1500};

static const struct tcase cases[] = {
    {"properties are sane on every device", case_props, NULL, NULL, 30, 8, 1, 1},
    {"a handle at an odd address (NCCL's buffers promise no alignment)", case_odd_handle, NULL,
     NULL, 60, 8, 1, 1},
    {"connect and accept progress on one thread (same process)", case_loopback, NULL, NULL, 60, 8,
     1, 1},
    {"0-byte messages", stream_case, stream_case, &c_0, 60, 8, 0, 1},
    {"1-byte messages", stream_case, stream_case, &c_1, 60, 8, 0, 1},
    {"4 KiB messages", stream_case, stream_case, &c_4k, 60, 8, 1, 1},
    {"1 MiB messages", stream_case, stream_case, &c_1m, 60, 8, 0, 1},
    {"64 MiB messages", stream_case, stream_case, &c_64m, 120, 8, 0, 1},
    {"random sizes 0..4 MiB", stream_case, stream_case, &c_rand, 120, 8, 1, 1},
    {"sizes on either side of each transport threshold (1 B .. 4 MiB + 1)", stream_case,
     stream_case, &c_edge, 120, 8, 0, 1},
    {"the same sizes sent before their receives are posted (receiver 0.3 s late)", stream_case,
     stream_case, &c_edge_late, 120, 8, 0, 1},
    {"receive buffer larger than the send: test() reports the sent size", stream_case, stream_case,
     &c_bigger, 60, 8, 1, 1},
    {"test() with sizes == NULL", stream_case, stream_case, &c_nullsz, 60, 8, 0, 1},
    {"grouped receives: tags pick the buffer, sends in another tag order", case_group_recv,
     case_group_send, NULL, 60, 8, 1, 1},
    {"32 requests in flight per comm", stream_case, stream_case, &c_32, 60, 8, 0, 1},
    {"test() polled in reverse order", stream_case, stream_case, &c_rev, 60, 8, 0, 1},
    {"test() polled in random order", stream_case, stream_case, &c_rnd, 60, 8, 0, 1},
    {"4 threads, one comm each, at once", stream_case, stream_case, &c_thr, 120, 8, 1, 1},
    {"4 comms driven from one thread", stream_case, stream_case, &c_one, 120, 8, 0, 1},
    {"16 comms set up and used at once", stream_case, stream_case, &c_many, 60, 8, 0, 1},
    {"64 comms set up and used at once", stream_case, stream_case, &c_64c, 90, 8, 0, 1},
    {"accept first polled 1.5 s after the sender started connecting", stream_case, stream_case,
     &c_lateacc, 60, 8, 0, 1},
    {"connect first polled 1.5 s after the receiver started accepting", stream_case, stream_case,
     &c_lateconn, 60, 8, 0, 1},
    {"both processes send and receive at once", case_bidir, case_bidir, NULL, 90, 8, 0, 1},
    {"eight receives and eight sends posted, the sends tested first (MPI-style wait order)",
     case_sends_first, case_sends_first, NULL, 90, 8, 0, 1},
    {"one listen comm and handle per side serve five connect/accept rounds in turn",
     case_reuse_listen, case_reuse_listen, NULL, 120, 8, 0, 1},
    {"repeated and overlapping regMr, deregMr in another order", case_regmr, case_regmr, NULL, 60,
     8, 0, 1},
    {"irecv with *request == 0x1 returns a real request", case_req_preset_recv,
     case_req_preset_send, NULL, 60, 9, 1, 1},
    {"iflush, getDeviceMr, irecvConsumed and regMrDmaBuf answer as NCCL expects of a host device",
     case_optional_entry_points, NULL, NULL, 60, 8, 1, 1},
    {"setNetAttr hints are accepted and the context keeps carrying traffic", case_set_net_attr,
     NULL, NULL, 60, 11, 0, 1},
    {"init/finalize (v11+) repeated, concurrent, per context", case_v11_lifecycle, NULL, NULL, 90,
     11, 0, 0},
    {"dlclose and dlopen again: init and traffic work", case_reload, NULL, NULL, 90, 8, 0, 0},
    {"finalize and dlclose with comms open and a transfer in flight: no plugin thread left",
     case_unload_open, NULL, NULL, 60, 8, 0, 0},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static int probe_fn(struct rn_peer *p) {
  (void)p;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: conformance [--api v8|v9|v10|v11|v12|all|v8,v11] [--seed N] [--only SUBSTR] "
          "[--smoke] [--list]\n"
          "  --smoke: only the smoke subset through v9 and v10\n");
}

int main(int argc, char **argv) {
  const char *api = "v8,v12,v11,v9,v10";
  const char *only = NULL;
  int full = 1, list = 0;
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
  if (getenv("RN_CONF_SEED")) seed = (uint64_t)strtoull(getenv("RN_CONF_SEED"), NULL, 0);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--api") && i + 1 < argc)
      api = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--full"))
      full = 1;
    else if (!strcmp(argv[i], "--smoke"))
      full = 0;
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else {
      usage();
      return 2;
    }
  }
  if (!strcmp(api, "all")) api = "v8,v9,v10,v11,v12", full = 1;
  int versions[8], nv = 0;
  char *copy = strdup(api), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && nv < 8; t = strtok_r(NULL, ",", &save)) {
    int v = rn_parse_version(t);
    if (!v) {
      usage();
      return 2;
    }
    versions[nv++] = v;
  }
  free(copy);
  /* a single explicitly named version gets the full suite */
  if (nv == 1) full = 1;

  int plan = 0;
  for (int vi = 0; vi < nv; vi++)
    for (int c = 0; c < NCASES; c++) {
      if (only && !strstr(cases[c].name, only)) continue;
      plan++;
    }
  if (list) {
    for (int c = 0; c < NCASES; c++) printf("%s\n", cases[c].name);
    return 0;
  }

  rn_default_env();
  /* Asked to test a transport, the suite needs the plugin to load, init and
   * offer a device with properties.  Anything less is a failure, never a
   * skip: a wrong RAILNET_TRANSPORT or RAILNET_SOCKET_IFNAME (0 devices and
   * a WARN, by design, so that NCCL falls back visibly) must not pass as
   * "nothing to test". */
  {
    struct rn_pair_opts o = {.version = versions[0], .timeout_s = 30, .init = 1};
    char why[512];
    if (rn_run_single(probe_fn, &o, why, sizeof why) != 0) {
      tap_plan(1);
      tap_result(0, "v%d: the plugin loads, initializes and offers a device (transport %s)",
                 versions[0], getenv("RAILNET_TRANSPORT") ? getenv("RAILNET_TRANSPORT") : "auto");
      diag("  %s; the remaining %d tests were not run", why, plan);
      return 1;
    }
  }

  tap_plan(plan);
  note("plugin %s, seed %llu (rerun: --seed %llu), transport %s", rn_plugin_path(),
       (unsigned long long)seed, (unsigned long long)seed,
       getenv("RAILNET_TRANSPORT") ? getenv("RAILNET_TRANSPORT") : "auto");
  for (int vi = 0; vi < nv; vi++) {
    int v = versions[vi];
    for (int c = 0; c < NCASES; c++) {
      const struct tcase *tc = &cases[c];
      if (only && !strstr(tc->name, only)) continue;
      if (v < tc->min_version) {
        tap_skip("v%d: %s (needs v%d+)", v, tc->name, tc->min_version);
        continue;
      }
      if (!full && (v == 9 || v == 10) && !tc->smoke) {
        tap_skip("v%d: %s (smoke pass only; --api v%d for all)", v, tc->name, v);
        continue;
      }
      struct rn_pair_opts o = {.version = v,
                               .timeout_s = tc->timeout_s,
                               .init = tc->init,
                               .seed = seed + (uint64_t)c * 1000003u,
                               .arg = (void *)tc->cfg};
      char why[1024];
      double t0 = now_s();
      int rc = tc->send ? rn_run_pair(tc->recv, tc->send, &o, why, sizeof why)
                        : rn_run_single(tc->recv, &o, why, sizeof why);
      int skipped =
          rc == 0 &&
          ((WIFEXITED(o.exit_status[0]) && WEXITSTATUS(o.exit_status[0]) == RN_EXIT_SKIP) ||
           (tc->send && WIFEXITED(o.exit_status[1]) &&
            WEXITSTATUS(o.exit_status[1]) == RN_EXIT_SKIP));
      if (skipped) {
        tap_skip("v%d: %s (not applicable to this plugin)", v, tc->name);
        continue;
      }
      if (!tap_result(rc == 0, "v%d: %s", v, tc->name))
        diag("  %s (seed %llu)", why, (unsigned long long)o.seed);
      else
        note("  %.2f s", now_s() - t0);
    }
  }
  return tap_failed() ? 1 : 0;
}
