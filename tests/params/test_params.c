/* railnet's knobs as NCCL and a user see them, through the v11 ABI: each
 * case sets the environment, opens a context (the first context after a
 * full finalize reads the environment again), looks at the log and the
 * devices, and finalizes.
 *  - every RAILNET_* integer knob: a value out of its range, above it or
 *    not a number gets a WARN naming the variable, the value, the range and
 *    the default it falls back to; a value in range is echoed under
 *    NCCL_ENV ("set by environment to");
 *  - every string knob with an NCCL_* fallback: the NCCL variable is read
 *    when the railnet one is unset, and ignored when it is set;
 *  - the fallbacks' effects: NCCL_SOCKET_IFNAME picks the devices (and
 *    NCCL_IB_HCA does not pick TCP ones), NCCL_TOPO_FILE is the file read;
 *  - RAILNET_SOCKET_NSTREAMS in range sets the stream count of a
 *    connection, and out of range leaves the default;
 *  - a string longer than the knob holds is truncated with a WARN;
 *  - RAILNET_STATS: %h/%p expanded, a relative name made absolute, the
 *    file named in one INFO; an unwritable one is one WARN, used once it
 *    can be written; a comm without data streams has its close line too.
 * The knob table is include/railnet/params.def itself, so a new knob is
 * tested as soon as it is added. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "nccl/net_v11.h"
#include "railnet/version.h"

static int failures, count;

__attribute__((format(printf, 2, 3))) static int ok(int cond, const char *fmt, ...) {
  va_list ap;
  count++;
  if (!cond) failures++;
  printf("%sok %d - ", cond ? "" : "not ", count);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  return cond;
}

/* ---- the log ----------------------------------------------------------- */
#define LOG_LINES 512
static char log_line[LOG_LINES][600];
static int log_level[LOG_LINES];
static int log_n;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  va_list ap;
  pthread_mutex_lock(&log_mu);
  if (log_n < LOG_LINES) {
    va_start(ap, fmt);
    vsnprintf(log_line[log_n], sizeof(log_line[0]), fmt, ap);
    va_end(ap);
    log_level[log_n++] = level;
  }
  pthread_mutex_unlock(&log_mu);
}

/* The first line at `level` (0: any) containing every non-NULL needle. */
static const char *log_find(int level, const char *a, const char *b, const char *c) {
  for (int i = 0; i < log_n; i++) {
    const char *m = log_line[i];
    if ((level == 0 || log_level[i] == level) && (!a || strstr(m, a)) && (!b || strstr(m, b)) &&
        (!c || strstr(m, c)))
      return m;
  }
  return NULL;
}

static void log_dump(void) {
  for (int i = 0; i < log_n; i++)
    printf("#   %s %s\n", log_level[i] == NCCL_LOG_WARN ? "WARN" : "INFO", log_line[i]);
}

/* ---- the environment ---------------------------------------------------- */
struct knob {
  const char *name, *fallback;
  int is_int;
  long long def, lo, hi;
};

static const struct knob knobs[] = {
#define RN_PARAM_INT(field, name, def, lo, hi, doc) {name, "", 1, def, lo, hi},
#define RN_PARAM_STR(field, name, def, fallback, doc) {name, fallback, 0, 0, 0, 0},
#include "railnet/params.def"
#undef RN_PARAM_INT
#undef RN_PARAM_STR
};
#define NKNOBS ((int)(sizeof(knobs) / sizeof(knobs[0])))

static void env_clear(void) {
  char var[96];
  for (int i = 0; i < NKNOBS; i++) {
    snprintf(var, sizeof(var), "RAILNET_%s", knobs[i].name);
    unsetenv(var);
    if (knobs[i].fallback[0]) unsetenv(knobs[i].fallback);
  }
  /* the base every case starts from: TCP on loopback */
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "=lo", 1);
}

/* ---- one context ------------------------------------------------------- */
static const ncclNet_v11_t *net;
static void *ctx;
static int ndev;

static int open_ctx(void) {
  static uint64_t comm_id = 0x7000;
  ncclNetCommConfig_v11_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  log_n = 0;
  ndev = -1;
  ctx = NULL;
  ncclResult_t r = net->init(&ctx, ++comm_id, &cfg, logger, NULL);
  if (r != ncclSuccess) {
    printf("# init: %d\n", (int)r);
    return -1;
  }
  if ((r = net->devices(&ndev)) != ncclSuccess) {
    printf("# devices: %d\n", (int)r);
    return -1;
  }
  return 0;
}

static int close_ctx(void) {
  ncclResult_t r = net->finalize(ctx);
  ctx = NULL;
  if (r != ncclSuccess) printf("# finalize: %d\n", (int)r);
  return r == ncclSuccess ? 0 : -1;
}

static const char *dev_name(int d) {
  static ncclNetProperties_v11_t p;
  memset(&p, 0, sizeof(p));
  if (net->getProperties(d, &p) != ncclSuccess || p.name == NULL) return "(error)";
  return p.name;
}

/* ---- cases ----------------------------------------------------------------- */
static void int_knob_cases(const struct knob *k) {
  char var[96], val[64], range[96], dflt[64];
  snprintf(var, sizeof(var), "RAILNET_%s", k->name);
  snprintf(range, sizeof(range), "[%lld, %lld]", k->lo, k->hi);
  snprintf(dflt, sizeof(dflt), "using %lld", k->def);
  const char *bad[3] = {val, val, "12abc"};
  const char *what[3] = {"below its range", "above its range", "not a number"};
  for (int i = 0; i < 3; i++) {
    if (i == 0) snprintf(val, sizeof(val), "%lld", k->lo - 1);
    if (i == 1) snprintf(val, sizeof(val), "%lld", k->hi + 1);
    env_clear();
    setenv(var, bad[i], 1);
    char setting[256];
    snprintf(setting, sizeof(setting), "%s=%s ", var, bad[i]);
    int up = open_ctx() == 0;
    const char *w = log_find(NCCL_LOG_WARN, setting, range, dflt);
    const char *echo = log_find(0, var, "set by environment", NULL);
    if (!ok(up && w != NULL && echo == NULL,
            "%s=%s (%s): a WARN names the variable, the value, %s and the default (%lld)", var,
            bad[i], what[i], range, k->def))
      log_dump();
    if (up) close_ctx();
  }
  /* in range: echoed, no WARN */
  long long good = k->def != k->lo ? k->lo : k->hi;
  snprintf(val, sizeof(val), "%lld", good);
  env_clear();
  setenv(var, val, 1);
  char echo_want[256];
  snprintf(echo_want, sizeof(echo_want), "%s set by environment to %s", var, val);
  int up = open_ctx() == 0;
  if (!ok(up && log_find(0, echo_want, NULL, NULL) != NULL &&
              log_find(NCCL_LOG_WARN, var, NULL, NULL) == NULL,
          "%s=%s (in range): echoed under NCCL_ENV, no WARN", var, val))
    log_dump();
  if (up) close_ctx();
}

static void fallback_cases(const struct knob *k) {
  char var[96], echo_want[200];
  snprintf(var, sizeof(var), "RAILNET_%s", k->name);
  /* NCCL_* read when the railnet variable is unset */
  env_clear();
  setenv(k->fallback, "rn-fallback-value", 1);
  unsetenv(var);
  snprintf(echo_want, sizeof(echo_want), "%s set by environment to rn-fallback-value", k->fallback);
  int up = open_ctx() == 0;
  if (!ok(up && log_find(0, echo_want, NULL, NULL) != NULL, "%s is read when %s is unset",
          k->fallback, var))
    log_dump();
  if (up) close_ctx();
  /* and ignored when it is set */
  env_clear();
  setenv(k->fallback, "rn-fallback-value", 1);
  if (getenv(var) == NULL) setenv(var, "rn-railnet-value", 1);
  up = open_ctx() == 0;
  if (!ok(up && log_find(0, k->fallback, "set by environment", NULL) == NULL,
          "%s is ignored when %s is set", k->fallback, var))
    log_dump();
  if (up) close_ctx();
}

static void fallback_effects(void) {
  /* NCCL_SOCKET_IFNAME picks the interface */
  env_clear();
  unsetenv("RAILNET_SOCKET_IFNAME");
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  int up = open_ctx() == 0;
  ok(up && ndev == 1 && strcmp(dev_name(0), "lo") == 0,
     "NCCL_SOCKET_IFNAME==lo with RAILNET_SOCKET_IFNAME unset: one device, lo (%d: %s)", ndev,
     ndev > 0 ? dev_name(0) : "-");
  if (up) close_ctx();
  env_clear();
  setenv("NCCL_SOCKET_IFNAME", "=rn-no-such-if0", 1);
  up = open_ctx() == 0;
  ok(up && ndev == 1 && strcmp(dev_name(0), "lo") == 0,
     "RAILNET_SOCKET_IFNAME==lo wins over NCCL_SOCKET_IFNAME==rn-no-such-if0 (%d devices)", ndev);
  if (up) close_ctx();
  /* NCCL_IB_HCA is RAILNET_NICS's fallback for verbs devices only (the
   * filter's effect there: tests/core/test_vdev): NCCL's socket transport
   * never reads it, so these TCP devices stay, and an INFO says why;
   * RAILNET_NICS filters them. */
  env_clear();
  setenv("NCCL_IB_HCA", "^lo", 1);
  up = open_ctx() == 0;
  ok(up && ndev == 1 && log_find(NCCL_LOG_INFO, "NCCL_IB_HCA=^lo not applied", NULL, NULL) != NULL,
     "NCCL_IB_HCA=^lo over TCP: not applied, with an INFO; lo stays (%d devices)", ndev);
  if (up) close_ctx();
  env_clear();
  setenv("RAILNET_NICS", "^lo", 1);
  up = open_ctx() == 0;
  ok(up && ndev == 0, "RAILNET_NICS=^lo over TCP: lo excluded, 0 devices (%d)", ndev);
  if (up) close_ctx();
  env_clear();
  setenv("NCCL_IB_HCA", "^lo", 1);
  setenv("RAILNET_NICS", "lo", 1);
  up = open_ctx() == 0;
  ok(up && ndev == 1, "RAILNET_NICS=lo wins over NCCL_IB_HCA=^lo (%d devices)", ndev);
  if (up) close_ctx();
  /* NCCL_TOPO_FILE is the file read when RAILNET_TOPO_FILE is unset */
  env_clear();
  setenv("NCCL_TOPO_FILE", "/nonexistent/rn-nccl-topo.xml", 1);
  up = open_ctx() == 0;
  int named = log_find(NCCL_LOG_WARN, "/nonexistent/rn-nccl-topo.xml", NULL, NULL) != NULL;
  if (!ok(up && named,
          "NCCL_TOPO_FILE with RAILNET_TOPO_FILE unset: that file is read (a WARN "
          "names it when it cannot be)"))
    log_dump();
  if (up) close_ctx();
  env_clear();
  setenv("NCCL_TOPO_FILE", "/nonexistent/rn-nccl-topo.xml", 1);
  setenv("RAILNET_TOPO_FILE", "tests/topo/fixtures/no-nics.xml", 1);
  up = open_ctx() == 0;
  named = log_find(0, "rn-nccl-topo.xml", NULL, NULL) != NULL;
  if (!ok(up && !named && log_find(NCCL_LOG_WARN, "no-nics.xml", NULL, NULL) == NULL,
          "RAILNET_TOPO_FILE (a readable fixture) wins over NCCL_TOPO_FILE"))
    log_dump();
  if (up) close_ctx();
}

/* listen + connect + accept in this process; the streams the log reports. */
static int connect_streams(void) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *sc = NULL, *rc = NULL;
  if (net->listen(ctx, 0, handle, &lc) != ncclSuccess) return -1;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int streams = -1;
  while (sc == NULL || rc == NULL) {
    if (sc == NULL && net->connect(ctx, 0, handle, &sc, NULL) != ncclSuccess) break;
    if (rc == NULL && net->accept(lc, &rc, NULL) != ncclSuccess) break;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 60) break; /* a hang guard, nothing more */
  }
  const char *m = log_find(0, "tcp : connected to", "streams", NULL);
  if (sc && rc && m) {
    const char *w = strstr(m, " with ");
    if (w) streams = atoi(w + 6);
  }
  int bad = (sc && net->closeSend(sc) != ncclSuccess) | (rc && net->closeRecv(rc) != ncclSuccess) |
            (net->closeListen(lc) != ncclSuccess);
  return bad ? -1 : streams;
}

static void nstreams_effect(void) {
  env_clear();
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);
  int up = open_ctx() == 0, s = up ? connect_streams() : -1;
  ok(s == 2, "RAILNET_SOCKET_NSTREAMS=2: a connection has 2 data streams (%d)", s);
  if (up) close_ctx();
  env_clear();
  setenv("RAILNET_SOCKET_NSTREAMS", "0", 1);
  up = open_ctx() == 0, s = up ? connect_streams() : -1;
  long long def = 0;
  for (int i = 0; i < NKNOBS; i++)
    if (strcmp(knobs[i].name, "SOCKET_NSTREAMS") == 0) def = knobs[i].def;
  ok(s == def, "RAILNET_SOCKET_NSTREAMS=0 (out of range): the default %lld streams (%d)", def, s);
  if (up) close_ctx();
}

static void long_string(void) {
  char v[400];
  memset(v, 'x', sizeof(v) - 1);
  v[sizeof(v) - 1] = '\0';
  env_clear();
  setenv("RAILNET_SOCKET_IFNAME", v, 1);
  int up = open_ctx() == 0;
  if (!ok(up && log_find(NCCL_LOG_WARN, "RAILNET_SOCKET_IFNAME is longer than", "truncated",
                         NULL) != NULL,
          "a 399-byte RAILNET_SOCKET_IFNAME is truncated with a WARN"))
    log_dump();
  if (up) close_ctx();
}

/* The first context of the process: every init decision said once, with
 * its reason (the transport choice, the interface and why it was chosen,
 * the version), and nothing said twice. */
static int log_count(const char *a) {
  int n = 0;
  for (int i = 0; i < log_n; i++) n += strstr(log_line[i], a) != NULL;
  return n;
}

static void init_lines(void) {
  env_clear();
  unsetenv("RAILNET_TRANSPORT"); /* auto: the choice between verbs and TCP is logged */
  int up = open_ctx() == 0;
  const char *ver =
      log_find(NCCL_LOG_INFO, "railnet " RAILNET_VERSION ", wire version", NULL, NULL);
  if (!ok(up && ver != NULL && log_count(", wire version") == 1,
          "init logs the version and wire version once (%s)", ver ? ver : "none"))
    log_dump();
  const char *t = log_find(NCCL_LOG_INFO, "transport ", NULL, NULL);
  int reasoned =
      t != NULL &&
      (strstr(t, "transport ib:") != NULL ||
       (strstr(t, "verbs unavailable (") != NULL && strstr(t, "verbs unavailable ()") == NULL));
  if (!ok(up && reasoned && log_count("transport ") == 1 && log_count("no verbs NICs") == 0,
          "the transport choice is one line with its reason (%s)", t ? t : "none"))
    log_dump();
  const char *lo = log_find(NCCL_LOG_INFO, "lo ", "matches the interface filter '=lo'", NULL);
  if (!ok(up && lo != NULL && log_count("matches the interface filter") == 1,
          "the interface line says which rule chose it (%s)", lo ? lo : "none"))
    log_dump();
  if (!ok(lo != NULL && strstr(lo, "speed unknown, reporting 10000 Mbps") != NULL, "%s",
          "lo reports no link speed: the line says unknown and what is reported"))
    log_dump();
  if (up) close_ctx();
}

/* RAILNET_STATS names a file as NCCL_DEBUG_FILE does: %h and %p expand
 * (one file per rank), a relative name is taken from the working
 * directory, and the file is named once in an INFO; a file that cannot
 * be written is one WARN, and the comms go on. */
static int file_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof(line), f) != NULL) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static void stats_file(void) {
  char dir[] = "/tmp/rn-stats-XXXXXX", want[512], host[256] = "", cwd[512];
  if (mkdtemp(dir) == NULL || gethostname(host, sizeof(host)) != 0 ||
      getcwd(cwd, sizeof(cwd)) == NULL) {
    ok(0, "a scratch directory for RAILNET_STATS: %s", strerror(errno));
    ok(0, "(skipped with the one above)");
    ok(0, "(skipped with the one above)");
    return;
  }
  env_clear();
  setenv("RAILNET_SOCKET_LAZY", "0", 1); /* streams, so rails and their lines, from connect */
  setenv("RAILNET_STATS", "rn-%h-%p-100%%.jsonl", 1);
  int up = chdir(dir) == 0 && open_ctx() == 0, s = up ? connect_streams() : -1;
  snprintf(want, sizeof(want), "%s/rn-%s-%d-100%%.jsonl", dir, host, (int)getpid());
  int info = log_count("RAILNET_STATS=rn-%h-%p-100%%.jsonl: appending") == 1 &&
             log_find(NCCL_LOG_INFO, want, NULL, NULL) != NULL;
  int closes = file_lines(want, "\"event\":\"close\"");
  if (!ok(up && s > 0 && info && closes == 2,
          "RAILNET_STATS=rn-%%h-%%p-100%%%%.jsonl (relative): %s gets both comms' close lines "
          "(%d), named once in an INFO",
          want, closes))
    log_dump();
  if (up) close_ctx();
  unlink(want);
  if (chdir(cwd) != 0) printf("# chdir back to %s failed\n", cwd);
  /* a directory that does not exist */
  snprintf(want, sizeof(want), "%s/gone/stats.jsonl", dir);
  env_clear();
  setenv("RAILNET_SOCKET_LAZY", "0", 1);
  setenv("RAILNET_STATS", want, 1);
  up = open_ctx() == 0, s = up ? connect_streams() : -1;
  int warns = 0;
  for (int i = 0; i < log_n; i++)
    warns += log_level[i] == NCCL_LOG_WARN && strstr(log_line[i], "RAILNET_STATS") != NULL;
  const char *w = log_find(NCCL_LOG_WARN, "cannot append to", want, "No such file");
  if (!ok(up && s > 0 && warns == 1 && w != NULL,
          "RAILNET_STATS in a missing directory: one WARN naming the file and why, for two "
          "comms (%d), and they connect and close as before",
          warns))
    log_dump();
  if (up) close_ctx();
  /* ... made later: used from the next line on */
  char sub[512];
  snprintf(sub, sizeof(sub), "%s/gone", dir);
  unsetenv("RAILNET_SOCKET_LAZY"); /* and comms without data streams have their lines too */
  up = mkdir(sub, 0755) == 0 && open_ctx() == 0, s = up ? connect_streams() : -1;
  closes = file_lines(want, "\"event\":\"close\"");
  ok(up && s > 0 && closes == 2,
     "once that directory exists, the next comms' close lines land, also with no data streams "
     "(%d)",
     closes);
  if (up) close_ctx();
  unlink(want);
  rmdir(sub);
  rmdir(dir);
  unsetenv("RAILNET_STATS");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* TAP survives an exit without flushing */
  const char *b = getenv("RN_BUILD");
  char so[512];
  snprintf(so, sizeof(so), "%s/libnccl-net-railnet.so", b ? b : "build");
  int plan = 0;
  for (int i = 0; i < NKNOBS; i++) plan += knobs[i].is_int ? 4 : (knobs[i].fallback[0] ? 2 : 0);
  plan += 4 + 7 + 2 + 1 + 3;
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  net = h ? dlsym(h, "ncclNetPlugin_v11") : NULL;
  if (net == NULL) {
    printf("1..1\nnot ok 1 - load ncclNetPlugin_v11 from %s: %s\n", so,
           h ? "no symbol" : dlerror());
    return 1;
  }
  printf("1..%d\n", plan);
  init_lines(); /* first: the process's first context */
  for (int i = 0; i < NKNOBS; i++) {
    if (knobs[i].is_int)
      int_knob_cases(&knobs[i]);
    else if (knobs[i].fallback[0])
      fallback_cases(&knobs[i]);
  }
  fallback_effects();
  nstreams_effect();
  long_string();
  stats_file();
  dlclose(h);
  printf("# %d passed, %d failed\n", count - failures, failures);
  return failures != 0;
}
