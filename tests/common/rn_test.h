/* Shared pieces of railnet's plugin-level test programs (conformance,
 * fault, bench): TAP output, a version-neutral view of the plugin ABI that
 * loads the .so exactly as NCCL does, a capturing logger, data patterns,
 * and a two-process runner.  Owner: the test programs; nothing here is
 * linked into the plugin. */
#ifndef RN_TEST_H
#define RN_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl/net_common.h"
#include "nccl/net_v8.h"
#include "nccl/net_v9.h"
#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"

#define RN_ATTR_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ---- TAP and diagnostics (tap.c) ---------------------------------- */
void tap_plan(int n);
void tap_skip_all(const char *why);
/* Prints "ok N - desc" or "not ok N - desc"; returns ok. */
int tap_result(int ok, const char *fmt, ...) RN_ATTR_PRINTF(2, 3);
/* "not ok N - desc # TODO why": a known bug (TAP's "expected to fail"),
 * shown but not counted as a failure; ok when it passes. */
int tap_result_todo(int ok, const char *todo, const char *fmt, ...) RN_ATTR_PRINTF(3, 4);
void tap_skip(const char *fmt, ...) RN_ATTR_PRINTF(1, 2);
int tap_failed(void);
int tap_count(void);
/* "# ..." on stdout (note) or stderr (diag); each line is one write(),
 * so lines from several processes never interleave mid-line. */
void note(const char *fmt, ...) RN_ATTR_PRINTF(1, 2);
void diag(const char *fmt, ...) RN_ATTR_PRINTF(1, 2);

/* ---- time ---------------------------------------------------------- */
double now_s(void); /* CLOCK_MONOTONIC, seconds */
void sleep_us(long us);
void sleep_until(double t); /* until now_s() reaches t */

/* ---- whole-buffer I/O on pipes and sockets (tap.c) ------------------ */
/* Writes all of buf: EINTR retried, EAGAIN waited out; on a socket a dead
 * peer is EPIPE, never a SIGPIPE.  0 ok, -1 error. */
int rn_write_all(int fd, const void *buf, size_t len);
/* Reads exactly len bytes before deadline (a now_s() time; < 0: no
 * deadline).  0 ok; -1 on an error, end of file or the deadline. */
int rn_read_all(int fd, void *buf, size_t len, double deadline);
/* The 1, 5 and 15 minute load averages as "0.50 0.40 0.30", or "?". */
void rn_loadavg(char *buf, size_t len);

/* ---- environment ----------------------------------------------------- */
/* Apply "K=V,K2=V2" (a token without '=' continues the previous value,
 * so "A=lo,eth0" sets A to "lo,eth0").  NULL or "" is a no-op. */
void rn_apply_env_list(const char *list);
/* Defaults the programs rely on: RAILNET_SOCKET_IFNAME=lo unless set. */
void rn_default_env(void);
/* Path of the plugin: $RN_PLUGIN, else $RN_BUILD/libnccl-net-railnet.so,
 * else build/libnccl-net-railnet.so. */
const char *rn_plugin_path(void);
long rn_env_long(const char *name, long dflt);
/* Multiplier for every time bound: RN_TIMEOUT_SCALE (set for every test
 * run by tests/common/test-env.sh: 1, x2 for gcov builds, x3 under
 * ASan+UBSan, x10 under valgrind) or RN_CONF_TIMEOUT_SCALE, whichever is
 * larger; >= 1.  A bound only turns a hang into a failure; it never judges
 * speed. */
double rn_timeout_scale(void);
/* Every bound goes through these, once: callers and the helpers below
 * take nominal seconds and scale them here. */
double rn_bound_s(double nominal_s);  /* nominal_s * rn_timeout_scale() */
double rn_deadline(double nominal_s); /* now_s() + rn_bound_s(nominal_s) */

/* ---- data patterns --------------------------------------------------- */
/* Deterministic bytes from key; every byte depends on (key, offset). */
void pattern_fill(void *buf, size_t len, uint64_t key);
/* Returns the first offset that differs, or (size_t)-1 when all match. */
size_t pattern_check(const void *buf, size_t len, uint64_t key);
uint64_t pattern_key(uint64_t seed, uint64_t seq, uint64_t size);
uint64_t rng_next(uint64_t *state); /* splitmix64 */

/* ---- capturing logger (netapi.c) ------------------------------------- */
/* NCCL-style lines on stderr when RN_CONF_VERBOSE=1; WARNs are counted
 * and the last few kept for inspection. */
void rn_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...);
int rn_log_warns(void);
/* 1 when one WARN since the last rn_log_reset() contains every non-NULL
 * needle. */
int rn_log_has_warn(const char *needle1, const char *needle2);
const char *rn_log_last_warn(void);
/* The oldest WARN since the last rn_log_reset() containing needle (any
 * WARN when NULL), copied into buf; 0 when none. */
int rn_log_first_warn(const char *needle, char *buf, size_t len);
void rn_log_reset(void);
/* Count the lines of every level (INFO too) that contain needle, from now
 * on (a needle watched again restarts from 0); at most 8 needles.  Returns
 * the watch for rn_log_seen, -1 when none is left. */
int rn_log_watch(const char *needle);
int rn_log_seen(int watch);

/* ---- version-neutral plugin view (netapi.c) --------------------------- */
struct rn_props {
  const char *name;
  const char *pci_path;
  uint64_t guid;
  int ptr_support, reg_is_global, force_flush, speed, port;
  float latency;
  int max_comms, max_recvs, dev_type, dev_version;
  int vndevs, vdev0;                    /* v9+: vProps */
  size_t max_p2p_bytes, max_coll_bytes; /* v9+ */
  int max_multi_request_size;           /* v11 */
  int rail_id, plane_id;                /* v12; NCCL_NET_ID_UNDEF before */
};

struct rn_net {
  int version; /* 8 .. 12 */
  void *dl;
  const char *name;
  union {
    const ncclNet_v8_t *v8;
    const ncclNet_v9_t *v9;
    const ncclNet_v10_t *v10;
    const ncclNet_v11_t *v11;
    const ncclNet_v12_t *v12;
  } t;
  void *ctx; /* v11+ per-communicator context */
  int inited;
};

/* For programs that drive the v8 table directly (a forked pair of raw
 * calls): ncclNetPlugin_v8 of rn_plugin_path(), loaded as NCCL loads it;
 * NULL after printing "not ok <tap> - load ...". */
const ncclNet_v8_t *rn_load_v8(int tap);
/* Two TCP devices for one process, loopback and the first other network
 * interface: RAILNET_TRANSPORT=socket, RAILNET_SOCKET_IFNAME=spec ("=lo,IF")
 * and RAILNET_NICS=lo,IF; -1 after printing a TAP skip when there is no
 * other interface. */
int rn_two_ifs_env(char *spec, size_t len);
/* An IPv4 address of this host outside 127/8, of an interface that is up,
 * into buf (tap.c); 0 when there is none. */
int rn_other_ipv4(char *buf, size_t len);
/* dlopen rn_plugin_path() as NCCL does; NULL after printing "1..1" and
 * "not ok 1 - dlopen ...". */
void *rn_dlopen_plugin(void);
/* "not ok <tap> - <what> (<r>)"; returns 1, the exit status. */
int rn_tap_call_failed(int tap, const char *what, int r);
/* Return rn_tap_call_failed(tap, ...) from the caller unless call succeeds. */
#define RN_TAP_CHECK(tap, call)                                       \
  do {                                                                \
    ncclResult_t r_ = (call);                                         \
    if (r_ != ncclSuccess) return rn_tap_call_failed(tap, #call, r_); \
  } while (0)

int rn_parse_version(const char *s); /* "v8".."v12" or "8".."12"; 0 if bad */
/* dlopen(RTLD_NOW|RTLD_LOCAL) + dlsym("ncclNetPlugin_vN").  0 ok; -1 with
 * a reason in err. */
int rn_net_open(struct rn_net *n, int version, char *err, size_t errlen);
void rn_net_close(struct rn_net *n);            /* dlclose */
ncclResult_t rn_net_init(struct rn_net *n);     /* v11+: a fresh context in n->ctx */
ncclResult_t rn_net_finalize(struct rn_net *n); /* v11+ only; else success */
/* Traffic class: v11+ carry it in init's config, v10 in connect's; v8/v9
 * have none (these then act as rn_net_init / rn_net_connect). */
ncclResult_t rn_net_init_tc(struct rn_net *n, int traffic_class);
ncclResult_t rn_net_connect_tc(struct rn_net *n, int dev, void *handle, void **scomm,
                               int traffic_class);
ncclResult_t rn_net_devices(struct rn_net *n, int *ndev);
ncclResult_t rn_net_props(struct rn_net *n, int dev, struct rn_props *p);
ncclResult_t rn_net_listen(struct rn_net *n, int dev, void *handle, void **lcomm);
ncclResult_t rn_net_connect(struct rn_net *n, int dev, void *handle, void **scomm);
ncclResult_t rn_net_accept(struct rn_net *n, void *lcomm, void **rcomm);
ncclResult_t rn_net_regmr(struct rn_net *n, void *comm, void *data, size_t size, int type,
                          void **mh);
ncclResult_t rn_net_deregmr(struct rn_net *n, void *comm, void *mh);
ncclResult_t rn_net_isend(struct rn_net *n, void *scomm, void *data, size_t size, int tag, void *mh,
                          void **req);
ncclResult_t rn_net_irecv(struct rn_net *n, void *rcomm, int cnt, void **data, const size_t *sizes,
                          const int *tags, void **mhs, void **req);
ncclResult_t rn_net_test(struct rn_net *n, void *req, int *done, int *sizes);
ncclResult_t rn_net_regmr_dmabuf(struct rn_net *n, void *comm, void *data, size_t size, int type,
                                 uint64_t offset, int fd, void **mh);
ncclResult_t rn_net_iflush(struct rn_net *n, void *rcomm, int cnt, void **data, int *sizes,
                           void **mhs, void **req);
int rn_net_has_get_device_mr(struct rn_net *n); /* the ABI allows a NULL slot */
ncclResult_t rn_net_get_device_mr(struct rn_net *n, void *comm, void *mh, void **dptr);
int rn_net_has_irecv_consumed(struct rn_net *n); /* the ABI allows a NULL slot */
ncclResult_t rn_net_irecv_consumed(struct rn_net *n, void *rcomm, int cnt, void *req);
/* v11+ only (ncclInvalidUsage before); attr is a ncclNetAttr_v11_t. */
ncclResult_t rn_net_set_net_attr(struct rn_net *n, void *attr);
ncclResult_t rn_net_close_send(struct rn_net *n, void *c);
ncclResult_t rn_net_close_recv(struct rn_net *n, void *c);
ncclResult_t rn_net_close_listen(struct rn_net *n, void *c);
const char *rn_result_str(ncclResult_t r);
/* Listens and connects on dev in this one process, sends len bytes of a
 * pattern and checks them; every call's result is checked and everything
 * opened is closed.  0 ok, -1 not (bounded by rn_deadline(20)). */
int rn_net_self_transfer(struct rn_net *n, int dev, size_t len);
/* Listen on dev, then connect and accept in this process: a pair (its
 * listen comm left open), or an error (bounded by rn_deadline(20)). */
ncclResult_t rn_net_self_connect(struct rn_net *n, int dev, void **lc, void **sc, void **rc);
/* The same over a connected pair (send comm sc, receive comm rc), with
 * this tag; nothing is closed. */
int rn_net_pair_transfer(struct rn_net *n, void *sc, void *rc, size_t len, int tag);
/* Descriptors this process holds now (/proc/self/fd), -1 if unknown. */
int rn_open_fds(void);
/* The TCP port of a socket-transport handle's first listening address
 * (the handle: a 16-byte header, then the addresses: family, reserved,
 * port in network order, address). */
int rn_handle_port(const void *handle);

/* ---- two-process runner (pair.c) -------------------------------------- */
enum rn_role { RN_RECEIVER = 0, RN_SENDER = 1 };

/* What each child of a pair sees.  Owner: the child. */
struct rn_peer {
  enum rn_role role;
  struct rn_net net;
  int version;
  int dev;
  int ndev;
  struct rn_props props;
  int to_peer, from_peer; /* pipes between the two children */
  int to_parent;          /* pipe to the runner, -1 if unused */
  uint64_t seed;
  void *arg;
  int setup_delay_ms; /* peer_connect: wait this long after the
                                   * handle exchange before polling */
  char why[256];      /* failure reason, printed by the child */
};

/* 0 = pass, RN_EXIT_SKIP = not applicable here (reason in why), else fail */
#define RN_EXIT_SKIP 77
typedef int (*rn_peer_fn)(struct rn_peer *p);

struct rn_pair_opts {
  int version;
  int timeout_s; /* whole pair, nominal (scaled); past it both are killed */
  int init;      /* 1: init+devices+props before fn */
  uint64_t seed;
  void *arg;
  int want_parent_pipe;         /* children get to_parent; *parent_fd set */
  int *parent_fd;               /* read end for the caller, closed by it */
  int allow_signal[2];          /* signal a child may die of without fault */
  int exit_status[2];           /* out: raw wait status of each child */
  const char *env;              /* "K=V,K=V" set in each child before it loads the plugin */
  double grace_s;               /* after one child failed, the other's time to end (default 3 s) */
  void (*tick)(void *tick_arg); /* called every few ms while the runner waits */
  void *tick_arg;
};

/* Fork receiver and sender; each enters the network namespace named by
 * RN_CONF_RECV_NETNS/RN_CONF_SEND_NETNS when set (as `ip netns exec`
 * does), applies RN_CONF_RECV_ENV/RN_CONF_SEND_ENV, opens the plugin
 * itself, runs its function and exits.  Returns 0 when both pass; -1
 * otherwise (reason in why). */
int rn_run_pair(rn_peer_fn recv_fn, rn_peer_fn send_fn, struct rn_pair_opts *o, char *why,
                size_t whylen);
/* One forked child running fn (role RN_RECEIVER, no peer pipes). */
int rn_run_single(rn_peer_fn fn, struct rn_pair_opts *o, char *why, size_t whylen);

/* Peer pipe helpers, bounded by timeout_s (nominal, scaled by
 * rn_bound_s here and in every helper below): 0 ok, -1 error/timeout. */
int peer_write(struct rn_peer *p, const void *buf, size_t len);
int peer_read(struct rn_peer *p, void *buf, size_t len, double timeout_s);
int peer_to_parent(struct rn_peer *p, const void *buf, size_t len);
int peer_sync(struct rn_peer *p, double timeout_s); /* barrier between the two */

/* Establish n comms receiver<-sender: the receiver listens n times, sends
 * the handles, both poll accept/connect until every comm is up.  lcomms
 * (receiver) may be NULL to close the listen comms right away. */
int peer_connect(struct rn_peer *p, int n, void **comms, void **lcomms, double timeout_s);
/* Close what peer_connect made. */
int peer_close(struct rn_peer *p, int n, void **comms, void **lcomms);

/* listen, then connect and accept interleaved on this one thread: both
 * ends of a comm in this process. */
int peer_loopback(struct rn_peer *p, void **lc, void **sc, void **rcomm, double timeout_s);
/* Comms both ways, as two ranks of a ring of two have: each side listens,
 * the handles cross, and each connects to the other while accepting. */
int peer_both_ways(struct rn_peer *p, void **lc, void **sc, void **rcomm, double timeout_s);
/* Undo peer_both_ways and the registrations on its comms, whatever is set
 * (NULL: never made); results are not checked (a failed test's cleanup). */
void peer_both_ways_close(struct rn_peer *p, void *lc, void *sc, void *rcomm, void *smh,
                          void *rmh);
/* A whole test program of one case: `side` in both processes of a pair
 * over the TCP transport (v12, helper threads off, so each process's calls
 * are all its progress); prints the plan and the result (what, and why on
 * failure).  Returns the exit status. */
int rn_tap_socket_pair(rn_peer_fn side, uint64_t seed, const char *what);

int peer_fail(struct rn_peer *p, const char *fmt, ...) RN_ATTR_PRINTF(2, 3);
/* 0 when r is ncclSuccess; else -1 with "what: <result>" in why (unless a
 * reason is there already).  For calls whose result matters but whose
 * failure should not cut the cleanup short. */
int peer_check(struct rn_peer *p, ncclResult_t r, const char *what);

/* Wait for a request: polls test until done or error, bounded.  Returns
 * the test result; ncclInternalError + "timeout" in why on timeout. */
ncclResult_t peer_wait(struct rn_peer *p, void *req, int *sizes, double timeout_s);
/* Post one message of size bytes with tag: an isend from the sender, a
 * receive of one buffer from the receiver, tried again while the plugin
 * answers with no request (bounded, 20 s).  0, or -1 with why set. */
int peer_post(struct rn_peer *p, void *comm, void *mh, void *buf, size_t size, int tag,
              void **req);

/* ---- message streams over one comm (stream.c) ------------------------- */
/* A sequence of messages over one comm, posted with up to `window`
 * requests in flight and tested in a chosen order; step() makes progress
 * without blocking so several streams can share one thread the way NCCL's
 * proxy progress thread does. */
#define RN_STREAM_MAX_WINDOW 64
enum rn_order { RN_ORDER_FIFO = 0, RN_ORDER_REVERSE = 1, RN_ORDER_RANDOM = 2 };

struct rn_stream {
  struct rn_peer *p;
  void *comm;
  int is_send;
  int nmsg;
  const size_t *sizes;      /* message sizes, per seq */
  const size_t *post_sizes; /* receiver buffer sizes, NULL = sizes */
  int window;
  enum rn_order order;
  int null_sizes;     /* pass sizes=NULL to test */
  int verify;         /* fill/check the pattern (0 in bench) */
  int post_all_first; /* post `window` requests before any test */
  int single_buffer;  /* every slot shares one buffer (bench only) */
  uint64_t seed;
  /* state */
  unsigned char *arena;
  size_t slot_bytes;
  void *mh;
  void *req[RN_STREAM_MAX_WINDOW];
  int req_seq[RN_STREAM_MAX_WINDOW];
  int next_post, ncomplete, null_posts, max_inflight;
  uint64_t rng;
  size_t bytes_done;
};

int rn_stream_setup(struct rn_stream *s);    /* 0 ok, -1 with p->why */
int rn_stream_step(struct rn_stream *s);     /* 1 all done, 0 progress, -1 error */
int rn_stream_teardown(struct rn_stream *s); /* deregMr + free */
/* setup + step until done (bounded) + teardown. */
int rn_stream_run(struct rn_stream *s, double timeout_s);
/* A short verified mix (100 B, 70 KB, 1 MiB, 0 B; 2 in flight) on comm,
 * to show a comm works after something hostile happened next to it. */
int rn_stream_check(struct rn_peer *p, void *comm, int is_send);

#endif
