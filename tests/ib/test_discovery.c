/* Verbs discovery and the GPU-memory (GDR, dma-buf) probes, on any host:
 * each case runs this program again (--child) with LD_LIBRARY_PATH naming
 * stand-in libibverbs.so.1 / libcuda.so.1 builds (tests/ib/fake_verbs.c,
 * fake_cuda.c) and RAILNET_FSROOT naming a small sysfs tree, loads the
 * plugin as NCCL does (v12, RAILNET_TRANSPORT forced or auto), and prints
 * what it got: init's result, each device's properties, every log line,
 * and what the stand-ins still hold after finalize.  The parent checks the
 * plugin's decision (ptrSupport, the NICs, their names and speeds, the GID
 * it chose), the INFO/WARN line that gives the reason, and that the probes
 * released everything they took.  One TAP line per case. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"
#include "fake.h"

#define MAX_ITEMS 24

struct disc_case {
  const char *name; /* the behaviour, as the TAP line says it */
  const char *libs; /* stand-in builds on LD_LIBRARY_PATH: "verbs cuda" */
  const char *env[MAX_ITEMS];
  const char *fs[MAX_ITEMS];     /* sysfs tree: "d:DIR", "f:FILE=TEXT", "l:LINK=TARGET" */
  const char *result[MAX_ITEMS]; /* "R key=value" lines the child must print */
  const char *log[MAX_ITEMS];    /* substrings some log line must contain */
  const char *nolog[MAX_ITEMS];  /* substrings no log line may contain */
  int needs_no_cuda;             /* meaningful only where no real libcuda.so.1 exists */
};

/* ---- the child: load the plugin, report ------------------------------- */

static void report(const char *fmt, ...) RN_ATTR_PRINTF(1, 2);
static void report(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  dprintf(1, "R %s\n", line);
}

/* Open fds that are the fake CUDA's dma-buf memfds. */
static int dmabuf_fds_open(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *de;
  while (d && (de = readdir(d))) {
    char path[300], link[128];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
    ssize_t len = readlink(path, link, sizeof(link) - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    if (strstr(link, FAKE_DMABUF_NAME)) n++;
  }
  if (d) closedir(d);
  return n;
}

static int child_main(void) {
  struct rn_net n;
  char err[256];
  if (rn_net_open(&n, 12, err, sizeof(err))) {
    report("open=%s", err);
    return 1;
  }
  ncclResult_t r = rn_net_init(&n);
  report("init=%d", (int)r);
  if (r == ncclSuccess) {
    int ndev = -1;
    r = rn_net_devices(&n, &ndev);
    report("devices=%d", (int)r);
    report("ndev=%d", ndev);
    for (int i = 0; r == ncclSuccess && i < ndev; i++) {
      struct rn_props p;
      ncclResult_t pr = rn_net_props(&n, i, &p);
      report("dev%d.props=%d", i, (int)pr);
      if (pr != ncclSuccess) continue;
      report("dev%d.name=%s", i, p.name);
      report("dev%d.ptr=%d", i, p.ptr_support);
      report("dev%d.speed=%d", i, p.speed);
      report("dev%d.pci=%s", i, p.pci_path ? p.pci_path : "(null)");
      report("dev%d.guid=%#llx", i, (unsigned long long)p.guid);
      report("dev%d.port=%d", i, p.port);
      report("dev%d.max_comms=%d", i, p.max_comms);
    }
    report("finalize=%d", (int)rn_net_finalize(&n));
  }
  void *v = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  fake_verbs_stats_fn vs = v ? (fake_verbs_stats_fn)dlsym(v, "fake_verbs_stats") : NULL;
  struct fake_verbs_stats s;
  memset(&s, 0, sizeof(s));
  if (vs) vs(&s);
  report("verbs.fake=%d", vs != NULL);
  report("verbs.alive=%d/%d/%d/%d/%d", s.contexts, s.pds, s.mrs, s.cqs, s.qps);
  report("verbs.opens=%d", s.opens);
  report("verbs.dmabuf_probes=%d", s.dmabuf_probe_calls);
  report("verbs.dmabuf_regs=%d", s.dmabuf_calls);
  void *c = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  fake_cuda_stats_fn cs = c ? (fake_cuda_stats_fn)dlsym(c, "fake_cuda_stats") : NULL;
  struct fake_cuda_stats cu;
  memset(&cu, 0, sizeof(cu));
  if (cs) cs(&cu);
  report("cuda.loaded=%d", c != NULL);
  report("cuda.inits=%d", cu.inits);
  report("cuda.held=%d/%d/%d", cu.retained, cu.pushed, cu.allocs);
  report("cuda.handles=%d", cu.handles);
  if (s.dmabuf_calls) {
    /* what the plugin registered: the CUDA allocation, through its fd */
    report("dmabuf.fd_is_cuda=%d", s.dmabuf_fd_ok);
    report("dmabuf.iova_is_cuda_ptr=%d", cu.last_dptr != 0 && s.dmabuf_iova == cu.last_dptr);
    report("dmabuf.len=%zu", s.dmabuf_len);
    report("dmabuf.access=%d", s.dmabuf_access);
  }
  report("dmabuf.fds_open=%d", dmabuf_fds_open());
  if (c) dlclose(c);
  if (v) dlclose(v);
  rn_net_close(&n);
  return 0;
}

/* ---- the parent: build the case, run the child, check ----------------- */

static char exe_dir[PATH_MAX];

static int mkdirs(const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    *p = '/';
  }
  return (mkdir(buf, 0755) && errno != EEXIST) ? -1 : 0;
}

static int make_fsroot(const char *root, const char *const *fs) {
  for (int i = 0; i < MAX_ITEMS && fs[i]; i++) {
    char path[PATH_MAX], arg[PATH_MAX] = "";
    const char *spec = fs[i] + 2, *eq = strchr(spec, '=');
    snprintf(path, sizeof(path), "%s/%.*s", root, (int)(eq ? eq - spec : (long)strlen(spec)), spec);
    if (eq) snprintf(arg, sizeof(arg), "%s", eq + 1);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (mkdirs(path)) return -1;
    *slash = '/';
    if (fs[i][0] == 'd' && mkdirs(path)) return -1;
    if (fs[i][0] == 'l' && symlink(arg, path)) return -1;
    if (fs[i][0] == 'f') {
      FILE *f = fopen(path, "w");
      if (!f) return -1;
      fprintf(f, "%s\n", arg);
      if (fclose(f)) return -1;
    }
  }
  return 0;
}

/* Runs the child for c; its output (results and log) in out. 0 when it
 * exited 0 within the bound. */
static int run_child(const struct disc_case *c, const char *root, char *out, size_t len) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    char ld[4 * PATH_MAX + 64] = "", lib[64];
    const char *l = c->libs;
    while (l && *l) {
      size_t k = strcspn(l, " ");
      snprintf(lib, sizeof(lib), "%.*s", (int)k, l);
      size_t used = strlen(ld);
      snprintf(ld + used, sizeof(ld) - used, "%s%s/fake/%s", used ? ":" : "", exe_dir, lib);
      l += k;
      while (*l == ' ') l++;
    }
    setenv("LD_LIBRARY_PATH", ld, 1);
    setenv("RAILNET_FSROOT", root, 1);
    setenv("RN_CONF_VERBOSE", "1", 1);
    setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
    for (int i = 0; i < MAX_ITEMS && c->env[i]; i++) putenv((char *)c->env[i]);
    execl("/proc/self/exe", "test_discovery", "--child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  size_t got = 0;
  double deadline = rn_deadline(60);
  int status = -1, done = 0;
  while (!done) {
    ssize_t k = read(fds[0], out + got, len - 1 - got);
    if (k > 0) {
      got += (size_t)k;
      if (got == len - 1) break;
    } else if (k == 0) {
      done = 1;
    } else if (errno == EAGAIN) {
      if (now_s() > deadline) break;
      sleep_us(2000);
    } else if (errno != EINTR) {
      break;
    }
  }
  out[got] = '\0';
  close(fds[0]);
  if (!done) kill(pid, SIGKILL);
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (!done) {
    diag("child did not finish within %.0f s", rn_bound_s(60));
    return -1;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int has_line(const char *out, const char *prefix, const char *needle, int whole) {
  for (const char *l = out; *l;) {
    const char *end = strchr(l, '\n');
    size_t n = end ? (size_t)(end - l) : strlen(l);
    size_t pl = strlen(prefix), nl = strlen(needle);
    if (n >= pl && strncmp(l, prefix, pl) == 0) {
      if (whole ? (n - pl == nl && strncmp(l + pl, needle, nl) == 0)
                : (memmem(l, n, needle, nl) != NULL))
        return 1;
    }
    l = end ? end + 1 : l + n;
  }
  return 0;
}

static void check_case(const struct disc_case *c, int have_cuda) {
  if (c->needs_no_cuda && have_cuda) {
    tap_skip("%s: this host has a libcuda.so.1", c->name);
    return;
  }
  char root[] = "/tmp/rn-discovery.XXXXXX";
  static char out[1 << 17];
  int ok = 1;
  if (!mkdtemp(root)) {
    tap_result(0, "%s: mkdtemp: %s", c->name, strerror(errno));
    return;
  }
  if (make_fsroot(root, c->fs)) {
    diag("building the sysfs tree under %s failed: %s", root, strerror(errno));
    ok = 0;
  } else if (run_child(c, root, out, sizeof(out))) {
    diag("the child failed");
    ok = 0;
  }
  for (int i = 0; ok && i < MAX_ITEMS && c->result[i]; i++)
    if (!has_line(out, "R ", c->result[i], 1)) {
      diag("missing result: %s", c->result[i]);
      ok = 0;
    }
  for (int i = 0; ok && i < MAX_ITEMS && c->log[i]; i++)
    if (!has_line(out, "", c->log[i], 0)) {
      diag("no log line contains: %s", c->log[i]);
      ok = 0;
    }
  for (int i = 0; ok && i < MAX_ITEMS && c->nolog[i]; i++)
    if (has_line(out, "", c->nolog[i], 0)) {
      diag("a log line contains: %s", c->nolog[i]);
      ok = 0;
    }
  if (!ok)
    for (const char *l = out; *l;) {
      const char *end = strchr(l, '\n');
      int n = end ? (int)(end - l) : (int)strlen(l);
      diag("  child: %.*s", n, l);
      l = end ? end + 1 : l + n;
    }
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  if (system(cmd) != 0) diag("could not remove %s", root);
  tap_result(ok, "%s", c->name);
}

/* The machine most cases share: one RoCE port (HDR x4: 200 Gb/s) whose GID
 * table has RoCE v1 and v2 entries, link-local and IPv4-mapped; the v2
 * IPv4 one is index 3.  Its netdev is named by gid_attrs/ndevs, its PCI
 * function by the device link. */
#define ROCE_DEV "FAKE_VERBS_DEVICES=mlx5_0=eth:active:64:2"
#define ROCE_GIDS "FAKE_VERBS_GIDS=v1:fe80::1,v2:fe80::1,v1:::ffff:198.18.0.1,v2:::ffff:198.18.0.1"
#define PCI_FN "sys/devices/pci0000:00/0000:00:02.0/0000:18:00.0"
#define ROCE_FS                                        \
  "d:" PCI_FN,                                         \
      "l:sys/class/infiniband/mlx5_0/device=../../../" \
      "devices/pci0000:00/0000:00:02.0/0000:18:00.0",  \
      "f:sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3=ens7"
#define PEERMEM_FS "d:sys/module/nvidia_peermem"
#define RELEASED "verbs.alive=0/0/0/0/0", "cuda.held=0/0/0", "dmabuf.fds_open=0"
#define NO_DMABUF_REGISTRATION "verbs.dmabuf_regs=0"
/* Every CUDA failure leaves the device up with host memory only. */
#define CUDA_FAILS(what, line)                                                                  \
  {                                                                                             \
    "GDR: " what " -> no DMABUF, the CUresult said, everything taken released", "verbs cuda",   \
        {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "FAKE_CUDA_FAIL=" what}, {ROCE_FS},       \
        {"init=0", "ndev=1", "dev0.ptr=1", NO_DMABUF_REGISTRATION, RELEASED},                   \
        {"mlx5_0 GPU memory: no CUDA: no nvidia-peermem/nv_peer_mem module; no DMABUF: " line}, \
        {"WARN"}, 0                                                                             \
  }

static const struct disc_case cases[] = {
    {"GDR on: peermem loaded and a dma-buf registration of CUDA memory succeeds -> "
     "ptrSupport HOST|CUDA|DMABUF, INFO says why, probe resources released",
     "verbs cuda",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "FAKE_VERBS_MAX_INLINE=200"},
     {ROCE_FS, PEERMEM_FS},
     {"init=0", "ndev=1", "dev0.name=mlx5_0", "dev0.ptr=7", "dev0.speed=200000",
      "dev0.pci=/sys/devices/pci0000:00/0000:00:02.0/0000:18:00.0", "dev0.port=1",
      "dev0.max_comms=1000", "finalize=0", "verbs.dmabuf_probes=1", "verbs.dmabuf_regs=1",
      "dmabuf.fd_is_cuda=1", "dmabuf.iova_is_cuda_ptr=1", "dmabuf.len=2097152", "dmabuf.access=7",
      "cuda.handles=1", RELEASED},
     {"mlx5_0 GPU memory: CUDA (peermem) DMABUF peermem: /sys/module/nvidia_peermem; DMABUF: "
      "a dma-buf registration of CUDA memory on mlx5_0 succeeded",
      "mlx5_0 port 1 RoCE, 200000 Mbps, MTU 4096, GID 3 ::ffff:198.18.0.1 (RoCE v2, AF_INET), "
      "netdev ens7, PCI /sys/devices/pci0000:00/0000:00:02.0/0000:18:00.0",
      "mlx5_0: sends up to 200 bytes inline", "transport ib: 1"},
     {"WARN"},
     0},
    {"GDR off: no peermem module, provider rejects dma-buf (EOPNOTSUPP) -> ptrSupport HOST, "
     "INFO says both, libcuda never loaded",
     "verbs cuda",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.ptr=1", "cuda.loaded=0", NO_DMABUF_REGISTRATION, RELEASED},
     {"mlx5_0 GPU memory: no CUDA: no nvidia-peermem/nv_peer_mem module; no DMABUF: mlx5_0 does "
      "not support dma-buf registration (Operation not supported)"},
     {"WARN"},
     0},
    {"GDR on through nv_peer_mem, provider without dma-buf (EPROTONOSUPPORT) -> ptrSupport "
     "HOST|CUDA, INFO names the module",
     "verbs cuda",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "FAKE_VERBS_FAIL=dmabuf_probe=EPROTONOSUPPORT"},
     {ROCE_FS, "d:sys/module/nv_peer_mem"},
     {"init=0", "ndev=1", "dev0.ptr=3", "cuda.loaded=0", RELEASED},
     {"mlx5_0 GPU memory: CUDA (peermem) peermem: /sys/module/nv_peer_mem; no DMABUF: mlx5_0 does "
      "not support dma-buf registration (Protocol not supported)"},
     {"WARN"},
     0},
    {"GDR: libibverbs without ibv_reg_dmabuf_mr -> no DMABUF, INFO says so; GID types read "
     "from sysfs without _ibv_query_gid_ex",
     "verbs-old cuda",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS},
     {ROCE_FS, PEERMEM_FS, "f:sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0=IB/RoCE v1",
      "f:sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/1=RoCE v2",
      "f:sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/2=IB/RoCE v1",
      "f:sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3=RoCE v2"},
     {"init=0", "ndev=1", "dev0.ptr=3", "cuda.loaded=0", "verbs.dmabuf_probes=0", RELEASED},
     {"mlx5_0 GPU memory: CUDA (peermem) peermem: /sys/module/nvidia_peermem; no DMABUF: "
      "libibverbs lacks ibv_reg_dmabuf_mr",
      "GID 3 ::ffff:198.18.0.1 (RoCE v2, AF_INET)"},
     {"WARN"},
     0},
    {"GDR: no libcuda.so.1 -> no DMABUF, INFO says the probe was skipped",
     "verbs",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.ptr=1", "verbs.dmabuf_probes=1", NO_DMABUF_REGISTRATION, RELEASED},
     {"mlx5_0 GPU memory: no CUDA: no nvidia-peermem/nv_peer_mem module; no DMABUF: libcuda.so.1 "
      "not loadable, probe skipped"},
     {"WARN"},
     1},
    {"GDR: a driver without cuMemGetHandleForAddressRange -> no DMABUF (driver too old), "
     "nothing called",
     "verbs cuda-old",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.ptr=1", "cuda.loaded=1", "cuda.inits=0", NO_DMABUF_REGISTRATION,
      RELEASED},
     {"no DMABUF: libcuda lacks cuMemGetHandleForAddressRange (driver too old)"},
     {"WARN"},
     0},
    CUDA_FAILS("init", "no usable CUDA device (CUresult 100)"),
    CUDA_FAILS("device_get=101", "no usable CUDA device (CUresult 101)"),
    CUDA_FAILS("retain", "cuDevicePrimaryCtxRetain failed (CUresult 2)"),
    CUDA_FAILS("push=201", "cuCtxPushCurrent failed (CUresult 201)"),
    CUDA_FAILS("alloc", "cuMemAlloc failed (CUresult 2)"),
    CUDA_FAILS("handle", "cuMemGetHandleForAddressRange failed (CUresult 2)"),
    {"GDR: the dma-buf registration of CUDA memory fails (EFAULT) -> no DMABUF, INFO names "
     "the error, fd and memory released",
     "verbs cuda",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "FAKE_VERBS_FAIL=dmabuf=EFAULT"},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.ptr=1", "verbs.dmabuf_regs=1", "dmabuf.fd_is_cuda=1",
      "cuda.handles=1", RELEASED},
     {"no DMABUF: ibv_reg_dmabuf_mr of CUDA memory on mlx5_0 failed (Bad address)"},
     {"WARN"},
     0},
    /* ---- discovery ---- */
    {"IB ports: an ACTIVE InfiniBand port is a NIC named device:port at NDR x4 speed, with "
     "the netdev and PCI path of its function; DOWN and unknown-link ports skipped with INFO; "
     "unknown speed codes read as one QDR lane",
     "verbs",
     {"RAILNET_TRANSPORT=ib",
      "FAKE_VERBS_DEVICES=mlx5_0=ib:active:128:2,ib:down,none:active;mlx5_1=ib:active:3:32",
      "FAKE_VERBS_GIDS=ib:fe80::2c9:300:a0:b000", "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {"d:" PCI_FN "/net/ib0",
      "l:sys/class/infiniband/mlx5_0/device=../../../"
      "devices/pci0000:00/0000:00:02.0/0000:18:00.0"},
     {"init=0", "ndev=2", "dev0.name=mlx5_0:1", "dev0.speed=400000", "dev0.port=1",
      "dev0.pci=/sys/devices/pci0000:00/0000:00:02.0/0000:18:00.0", "dev0.max_comms=1000",
      "dev1.name=mlx5_1", "dev1.speed=10000", "dev1.pci=(null)", "dev1.max_comms=1001",
      "verbs.opens=2", RELEASED},
     {"mlx5_0:1 port 1 InfiniBand, 400000 Mbps, MTU 4096, GID 0 fe80::2c9:300:a0:b000 (IB: LID "
      "routed), netdev ib0, PCI /sys/devices/pci0000:00/0000:00:02.0/0000:18:00.0",
      "mlx5_0:2 is not ACTIVE (state 1), skipped", "mlx5_0:3 link layer 0 unsupported, skipped",
      "mlx5_1 port 1 InfiniBand, 10000 Mbps", "2 NIC(s) on 2 device(s)"},
     {"WARN"},
     0},
    {"RoCE GID, AF_INET: the IPv4-mapped RoCE v2 GID; else any RoCE v2 one (other family); "
     "else the first RoCE v1 one; none usable -> index 0, each with its reason",
     "verbs",
     {"RAILNET_TRANSPORT=ib",
      "FAKE_VERBS_DEVICES=r4=eth:active;r6=eth:active;r1=eth:active;r0=eth:active",
      "FAKE_VERBS_GIDS_r4=v2:fe80::1,v1:::ffff:198.18.0.2,v2:2001:db8::2,v2:::ffff:198.18.0.1",
      "FAKE_VERBS_GIDS_r6=v1:::ffff:198.18.0.2,-,v2:fe80::6,v2:2001:db8::6",
      "FAKE_VERBS_GIDS_r1=-,v1:fe80::1,v1:::ffff:198.18.0.3", "FAKE_VERBS_GIDS_r0=-,::,-",
      "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {"f:sys/class/infiniband/r4/ports/1/gid_attrs/ndevs/3=ens4"},
     {"init=0", "ndev=4", RELEASED},
     {"r4 port 1 RoCE, 100000 Mbps, MTU 4096, GID 3 ::ffff:198.18.0.1 (RoCE v2, AF_INET), "
      "netdev ens4",
      "r6 port 1 RoCE, 100000 Mbps, MTU 4096, GID 2 fe80::6 (RoCE v2, other family)",
      "r1 port 1 RoCE, 100000 Mbps, MTU 4096, GID 1 fe80::1 (not RoCE v2)",
      "r0 port 1 RoCE, 100000 Mbps, MTU 4096, GID 0 :: (no usable GID found, index 0)"},
     {"WARN"},
     0},
    {"RoCE GID, AF_INET6: a global RoCE v2 GID before a link-local one, a link-local one "
     "before an IPv4-mapped one",
     "verbs",
     {"RAILNET_TRANSPORT=ib", "RAILNET_IB_ADDR_FAMILY=AF_INET6",
      "FAKE_VERBS_DEVICES=g6=eth:active;ll=eth:active",
      "FAKE_VERBS_GIDS_g6=v2:::ffff:198.18.0.1,v2:fe80::5,v2:2001:db8::7,v1:2001:db8::9",
      "FAKE_VERBS_GIDS_ll=v2:::ffff:198.18.0.1,v2:fe80::5,v1:2001:db8::9",
      "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {"f:sys/class/infiniband/g6/ports/1/gid_attrs/ndevs/2=ens6"},
     {"init=0", "ndev=2", RELEASED},
     {"g6 port 1 RoCE, 100000 Mbps, MTU 4096, GID 2 2001:db8::7 (RoCE v2, AF_INET6), netdev ens6",
      "ll port 1 RoCE, 100000 Mbps, MTU 4096, GID 1 fe80::5 (RoCE v2, AF_INET6), netdev (none)"},
     {"WARN"},
     0},
    {"RAILNET_IB_GID_INDEX=1 picks GID 1 whatever its type; a provider rejecting every "
     "inline size -> sends nothing inline",
     "verbs",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "RAILNET_IB_GID_INDEX=1",
      "FAKE_VERBS_MAX_INLINE=0", "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.name=mlx5_0", RELEASED},
     {"mlx5_0 port 1 RoCE, 200000 Mbps, MTU 4096, GID 1 fe80::1 (RAILNET_IB_GID_INDEX)",
      "mlx5_0: sends up to 0 bytes inline"},
     {"WARN"},
     0},
    {"RAILNET_IB_GID_INDEX out of the table (4) -> WARN naming it, that device "
     "skipped and closed, an IB device beside it kept",
     "verbs",
     {"RAILNET_TRANSPORT=ib",
      "FAKE_VERBS_DEVICES=mlx5_0=eth:active;mlx5_1=ib:active;mlx5_2=eth:active", ROCE_GIDS,
      "FAKE_VERBS_GIDS_mlx5_2=v2:::ffff:198.18.0.1", "RAILNET_IB_GID_INDEX=4",
      "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {NULL},
     {"init=0", "ndev=1", "dev0.name=mlx5_1", "verbs.opens=3", RELEASED},
     {"mlx5_0:1: RAILNET_IB_GID_INDEX=4 is not an index below 4", "device mlx5_0 skipped",
      "mlx5_2:1: RAILNET_IB_GID_INDEX=4 is not an index below 1", "device mlx5_2 skipped",
      "mlx5_1 port 1 InfiniBand"},
     {"mlx5_0 port 1", "mlx5_2 port 1"},
     0},
    {"RAILNET_IB_GID_INDEX not a number -> WARN naming it, the device skipped and closed, "
     "the forced transport's WARN says the device was skipped (not that it had no ACTIVE port)",
     "verbs",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "RAILNET_IB_GID_INDEX=1x"},
     {NULL},
     {"init=0", "ndev=0", "verbs.opens=1", RELEASED},
     {"mlx5_0:1: RAILNET_IB_GID_INDEX=1x is not an index below 4", "device mlx5_0 skipped",
      "RAILNET_TRANSPORT=ib but no usable verbs device (1 verbs device(s), each skipped on an "
      "error)"},
     {"mlx5_0 port 1"},
     0},
    {"NCCL_IB_GID_INDEX=-1, NCCL's automatic choice -> the RoCE v2 GID of the address family, as "
     "when unset (not a WARN and a skipped device)",
     "verbs",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "NCCL_IB_GID_INDEX=-1",
      "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.name=mlx5_0", RELEASED},
     {"GID 3 ::ffff:198.18.0.1 (RoCE v2, AF_INET)"},
     {"WARN"},
     0},
    {"NCCL_IB_GID_INDEX=0x1, read as NCCL reads it (base 0) -> GID 1, its source named",
     "verbs",
     {"RAILNET_TRANSPORT=ib", ROCE_DEV, ROCE_GIDS, "NCCL_IB_GID_INDEX=0x1",
      "FAKE_VERBS_FAIL=dmabuf_probe=EOPNOTSUPP"},
     {ROCE_FS},
     {"init=0", "ndev=1", "dev0.name=mlx5_0", RELEASED},
     {"GID 1 fe80::1 (NCCL_IB_GID_INDEX)"},
     {"WARN"},
     0},
    {"verbs failures on one device (open, query_device, alloc_pd, query_port, create_cq, "
     "query_gid) -> a WARN naming the call, that device or port skipped and closed, the others "
     "kept",
     "verbs",
     {"RAILNET_TRANSPORT=ib",
      "FAKE_VERBS_DEVICES=mlx5_0=eth:active;mlx5_1=eth:active;mlx5_2=eth:active;mlx5_3=eth:"
      "active;mlx5_4=eth:active,eth:active;mlx5_5=eth:active",
      "FAKE_VERBS_GIDS=v2:::ffff:198.18.0.1,v2:fe80::1", "RAILNET_IB_GID_INDEX=0",
      "FAKE_VERBS_FAIL=open=mlx5_0,query_device=mlx5_1,pd=mlx5_2,query_port=mlx5_4:1,cq=mlx5_3,"
      "gid=mlx5_5,dmabuf_probe=EOPNOTSUPP"},
     {NULL},
     {"init=0", "ndev=2", "dev0.name=mlx5_3", "dev0.max_comms=1003", "dev1.name=mlx5_4:2",
      "dev1.port=2", "verbs.opens=6", RELEASED},
     {"ibv_open_device failed: No such device", "device mlx5_0 skipped",
      "ibv_query_device failed: Input/output error", "device mlx5_1 skipped",
      "ibv_alloc_pd failed: Cannot allocate memory", "device mlx5_2 skipped",
      "ibv_query_port failed: Invalid argument", "ibv_query_gid failed: Invalid argument",
      "device mlx5_5 skipped", "2 NIC(s) on 2 device(s)",
      "mlx5_3: sends nothing inline (no CQ to probe with"},
     {"device mlx5_3 skipped", "device mlx5_4 skipped", "mlx5_4:1 port"},
     0},
    {"no RDMA subsystem (ENODEV), transport auto -> TCP, and the INFO says why",
     "verbs",
     {"FAKE_VERBS_FAIL=list=ENODEV"},
     {NULL},
     {"init=0", "ndev=1", "dev0.name=lo", "verbs.opens=0", RELEASED},
     {"transport socket: verbs unavailable (no RDMA devices on this host: No such device), "
      "using TCP"},
     {"WARN"},
     0},
    {"forced RAILNET_TRANSPORT=ib: no device -> 0 devices and a WARN with the reason; a failing "
     "ibv_get_device_list -> its WARN too",
     "verbs",
     {"RAILNET_TRANSPORT=ib", "FAKE_VERBS_FAIL=list=EIO"},
     {NULL},
     {"init=0", "ndev=0", "verbs.opens=0", RELEASED},
     {"ibv_get_device_list failed: Input/output error",
      "RAILNET_TRANSPORT=ib but no usable verbs device (the list of RDMA devices could not be "
      "read: Input/output error): railnet offers no devices"},
     {NULL},
     0},
    {"forced RAILNET_TRANSPORT=ib, devices without an ACTIVE port -> 0 devices, the WARN says so",
     "verbs",
     {"RAILNET_TRANSPORT=ib", "FAKE_VERBS_DEVICES=mlx5_0=eth:down;mlx5_1=ib:down"},
     {NULL},
     {"init=0", "ndev=0", "verbs.opens=2", RELEASED},
     {"RAILNET_TRANSPORT=ib but no usable verbs device (2 verbs device(s), no ACTIVE port)"},
     {NULL},
     0},
    {"forced RAILNET_TRANSPORT=ib, one device failing to open and one without an ACTIVE port "
     "-> the WARN names both reasons",
     "verbs",
     {"RAILNET_TRANSPORT=ib", "FAKE_VERBS_DEVICES=mlx5_0=eth:active;mlx5_1=ib:down",
      "FAKE_VERBS_FAIL=open=mlx5_0"},
     {NULL},
     {"init=0", "ndev=0", "verbs.opens=2", RELEASED},
     {"ibv_open_device failed: No such device",
      "RAILNET_TRANSPORT=ib but no usable verbs device (2 verbs device(s): 1 skipped on an "
      "error, no ACTIVE port on the rest)"},
     {NULL},
     0},
};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
  (void)argv;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    tap_plan(1);
    tap_result(0, "readlink /proc/self/exe: %s", strerror(errno));
    return 1;
  }
  self[n] = '\0';
  snprintf(exe_dir, sizeof(exe_dir), "%.*s", (int)(strrchr(self, '/') - self), self);
  /* A real driver would answer the "no libcuda" case instead of nothing. */
  void *real_cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int have_cuda = real_cuda != NULL;
  int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
  tap_plan(ncases);
  for (int i = 0; i < ncases; i++) check_case(&cases[i], have_cuda);
  return tap_failed() ? 1 : 0;
}
