/* Real-NCCL check of the plugin: N ranks as forked processes (no MPI), each
 * with its own NCCL_HOSTID so NCCL treats them as separate hosts and routes
 * every byte through the net plugin.  Rank r sends to r+1 and receives from
 * r-1 (ncclSend/ncclRecv in one group), sizes from -b to -e by factor -f;
 * data is a host pattern copied in with cudaMemcpy (no kernels) and every
 * byte is checked.  Prints a table like nccl-tests' sendrecv_perf.
 *
 *   nccl-sendrecv [-n ranks] [-b min] [-e max] [-f factor] [-w warmup] [-i iters]
 *
 * Environment: RN_PLUGIN or RN_BUILD locate the plugin (NCCL_NET_PLUGIN is
 * set to it unless already set); RAILNET_SOCKET_IFNAME and
 * NCCL_SOCKET_IFNAME default to lo; NCCL_DEBUG etc. pass through. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <limits.h>
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROWS 64

struct row {
  size_t size;
  double us;  /* average time per iteration */
  long wrong; /* bytes that differ */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned char pattern(int rank, size_t size, size_t i) {
  uint64_t z =
      (uint64_t)rank * 0x9E3779B97F4A7C15ull ^ (uint64_t)size * 0xBF58476D1CE4E5B9ull ^ (i / 8);
  z ^= z >> 31;
  z *= 0x94D049BB133111EBull;
  return (unsigned char)(z >> (8 * (i % 8)));
}

static void fill(unsigned char *h, int rank, size_t size) {
  for (size_t i = 0; i < size; i++) h[i] = pattern(rank, size, i);
}

static long check(const unsigned char *h, int rank, size_t size) {
  long bad = 0;
  for (size_t i = 0; i < size; i++) bad += h[i] != pattern(rank, size, i);
  return bad;
}

static int write_full(int fd, const void *buf, size_t len) {
  const char *b = buf;
  while (len > 0) {
    ssize_t w = write(fd, b, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    len -= (size_t)w;
  }
  return 0;
}

static int read_full(int fd, void *buf, size_t len) {
  char *b = buf;
  while (len > 0) {
    ssize_t r = read(fd, b, len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r;
    len -= (size_t)r;
  }
  return 0;
}

#define CUDACHECK(cmd)                                                           \
  do {                                                                           \
    cudaError_t e_ = (cmd);                                                      \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "rank %d: %s:%d %s: %s\n", rank, __FILE__, __LINE__, #cmd, \
              cudaGetErrorString(e_));                                           \
      return 1;                                                                  \
    }                                                                            \
  } while (0)
#define NCCLCHECK(cmd)                                                           \
  do {                                                                           \
    ncclResult_t r_ = (cmd);                                                     \
    if (r_ != ncclSuccess) {                                                     \
      fprintf(stderr, "rank %d: %s:%d %s: %s\n", rank, __FILE__, __LINE__, #cmd, \
              ncclGetErrorString(r_));                                           \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

struct opts {
  int nranks;
  size_t minb, maxb;
  int factor, warmup, iters;
};

static int rank_main(int rank, const struct opts *o, int id_rd, int id_wr, int res_wr) {
  char hostid[64];
  snprintf(hostid, sizeof hostid, "railnet-sendrecv-rank%d", rank);
  setenv("NCCL_HOSTID", hostid, 1);
  ncclUniqueId id;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    for (int i = 1; i < o->nranks; i++)
      if (write_full(id_wr, &id, sizeof id) != 0) return 1;
  } else if (read_full(id_rd, &id, sizeof id) != 0) {
    fprintf(stderr, "rank %d: no unique id\n", rank);
    return 1;
  }
  int ndev = 0;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  if (ndev <= 0) return 1;
  CUDACHECK(cudaSetDevice(rank % ndev));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, o->nranks, id, rank));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreate(&stream));
  void *sbuf = NULL, *rbuf = NULL;
  CUDACHECK(cudaMalloc(&sbuf, o->maxb));
  CUDACHECK(cudaMalloc(&rbuf, o->maxb));
  unsigned char *h = malloc(o->maxb);
  if (h == NULL) return 1;
  int next = (rank + 1) % o->nranks, prev = (rank + o->nranks - 1) % o->nranks;
  for (size_t size = o->minb; size <= o->maxb; size *= (size_t)o->factor) {
    fill(h, rank, size);
    CUDACHECK(cudaMemcpy(sbuf, h, size, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(rbuf, 0, size));
    double t0 = 0;
    for (int it = 0; it < o->warmup + o->iters; it++) {
      if (it == o->warmup) {
        CUDACHECK(cudaStreamSynchronize(stream));
        t0 = now_s();
      }
      NCCLCHECK(ncclGroupStart());
      NCCLCHECK(ncclSend(sbuf, size, ncclInt8, next, comm, stream));
      NCCLCHECK(ncclRecv(rbuf, size, ncclInt8, prev, comm, stream));
      NCCLCHECK(ncclGroupEnd());
    }
    CUDACHECK(cudaStreamSynchronize(stream));
    double us = (now_s() - t0) * 1e6 / o->iters;
    CUDACHECK(cudaMemcpy(h, rbuf, size, cudaMemcpyDeviceToHost));
    struct row r = {size, us, check(h, prev, size)};
    if (write_full(res_wr, &r, sizeof r) != 0) return 1;
    if (o->factor <= 1) break;
  }
  free(h);
  CUDACHECK(cudaFree(sbuf));
  CUDACHECK(cudaFree(rbuf));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static size_t parse_size(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return (size_t)v;
}

int main(int argc, char **argv) {
  struct opts o = {2, 8, (size_t)1 << 30, 2, 5, 20};
  int opt;
  while ((opt = getopt(argc, argv, "n:b:e:f:w:i:")) != -1) {
    switch (opt) {
      case 'n':
        o.nranks = atoi(optarg);
        break;
      case 'b':
        o.minb = parse_size(optarg);
        break;
      case 'e':
        o.maxb = parse_size(optarg);
        break;
      case 'f':
        o.factor = atoi(optarg);
        break;
      case 'w':
        o.warmup = atoi(optarg);
        break;
      case 'i':
        o.iters = atoi(optarg);
        break;
      default:
        fprintf(stderr,
                "usage: %s [-n ranks] [-b min] [-e max] [-f factor] [-w warmup] [-i iters]\n",
                argv[0]);
        return 2;
    }
  }
  if (o.nranks < 2 || o.minb < 1 || o.maxb < o.minb || o.iters < 1 || o.nranks > 64) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  /* the plugin: RN_PLUGIN, else $RN_BUILD (default build) */
  if (getenv("NCCL_NET_PLUGIN") == NULL) {
    char path[PATH_MAX];
    const char *p = getenv("RN_PLUGIN");
    if (p == NULL || *p == '\0') {
      const char *b = getenv("RN_BUILD");
      char rel[PATH_MAX];
      snprintf(rel, sizeof rel, "%s/libnccl-net-railnet.so", b && *b ? b : "build");
      p = realpath(rel, path) ? path : rel;
    }
    setenv("NCCL_NET_PLUGIN", p, 1);
  }
  setenv("RAILNET_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  printf(
      "# nccl-sendrecv: %d ranks (processes, NCCL_HOSTID per rank), NCCL_NET_PLUGIN=%s, "
      "NCCL_NET=%s\n",
      o.nranks, getenv("NCCL_NET_PLUGIN"), getenv("NCCL_NET") ? getenv("NCCL_NET") : "(auto)");
  fflush(stdout);

  int idp[2], resp[64][2];
  if (pipe(idp) != 0) return 1;
  pid_t pid[64];
  for (int r = 0; r < o.nranks; r++) {
    if (pipe(resp[r]) != 0) return 1;
    fflush(stdout);
    pid[r] = fork();
    if (pid[r] == 0) {
      alarm(1200);
      /* NCCL writes its INFO lines to stdout with stdio: line by line, so
       * the ranks' lines do not cut each other, and flushed before _exit,
       * which would drop what a buffer still holds ("via NET/railnet"). */
      setvbuf(stdout, NULL, _IOLBF, 0);
      for (int k = 0; k <= r; k++) close(resp[k][0]);
      int rc = rank_main(r, &o, idp[0], idp[1], resp[r][1]);
      fflush(NULL);
      _exit(rc);
    }
    close(resp[r][1]);
  }
  close(idp[0]);
  close(idp[1]);
  struct row rows[64][MAX_ROWS];
  int nrows[64] = {0};
  for (int r = 0; r < o.nranks; r++)
    while (nrows[r] < MAX_ROWS &&
           read_full(resp[r][0], &rows[r][nrows[r]], sizeof(struct row)) == 0)
      nrows[r]++;
  int failed = 0;
  for (int r = 0; r < o.nranks; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exited" : "killed by signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed = 1;
    }
  }
  printf("#\n# %12s %12s %6s %10s %12s %12s %8s\n", "size", "count", "type", "time(us)",
         "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  long wrong = 0;
  for (int i = 0; i < nrows[0]; i++) {
    double us = 0;
    long w = 0;
    for (int r = 0; r < o.nranks; r++) {
      if (i >= nrows[r]) continue;
      if (rows[r][i].us > us) us = rows[r][i].us;
      w += rows[r][i].wrong;
    }
    double algbw = (double)rows[0][i].size / (us * 1e-6) / 1e9;
    printf("  %12zu %12zu %6s %10.1f %12.3f %12.3f %8ld\n", rows[0][i].size, rows[0][i].size,
           "int8", us, algbw, algbw, w);
    wrong += w;
  }
  printf("# Out of bounds values : %ld %s\n", wrong, wrong ? "FAILED" : "OK");
  if (nrows[0] == 0) failed = 1;
  return failed || wrong ? 1 : 0;
}
