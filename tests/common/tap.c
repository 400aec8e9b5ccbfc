/* TAP output, time, environment and data patterns for the test programs. */
#include "rn_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int tap_n;
static int tap_nfail;

static void vline(int fd, const char *prefix, const char *fmt, va_list ap) {
  char buf[2048];
  size_t off = (size_t)snprintf(buf, sizeof buf, "%s", prefix);
  int n = vsnprintf(buf + off, sizeof buf - off - 1, fmt, ap);
  if (n < 0) n = 0;
  off += (size_t)n;
  if (off > sizeof buf - 2) off = sizeof buf - 2;
  buf[off++] = '\n';
  (void)rn_write_all(fd, buf, off);
}

/* TAP goes to a pipe under prove: make stdout line-buffered before the
 * first line, so a process that dies without running exit handlers
 * (LeakSanitizer's report, a signal) never takes written lines with it. */
static void tap_line_buffered(void) {
  static int done;
  if (!done) setvbuf(stdout, NULL, _IOLBF, 0);
  done = 1;
}

void tap_plan(int n) {
  tap_line_buffered();
  printf("1..%d\n", n);
  fflush(stdout);
}

void tap_skip_all(const char *why) {
  tap_line_buffered();
  printf("1..0 # SKIP %s\n", why);
  fflush(stdout);
}

/* One numbered test line: "<status> N <sep> <description>". */
static void tap_line(const char *status, const char *sep, const char *fmt, va_list ap) {
  char desc[1024];
  vsnprintf(desc, sizeof desc, fmt, ap);
  tap_n++;
  printf("%s %d %s %s\n", status, tap_n, sep, desc);
  fflush(stdout);
}

int tap_result(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (!ok) tap_nfail++;
  tap_line(ok ? "ok" : "not ok", "-", fmt, ap);
  va_end(ap);
  return ok;
}

int tap_result_todo(int ok, const char *todo, const char *fmt, ...) {
  char desc[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(desc, sizeof desc, fmt, ap);
  va_end(ap);
  tap_n++; /* a TODO failure is reported, not counted as a failure */
  printf("%sok %d - %s # TODO %s\n", ok ? "" : "not ", tap_n, desc, todo);
  fflush(stdout);
  return ok;
}

void tap_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_line("ok", "# SKIP", fmt, ap);
  va_end(ap);
}

int tap_failed(void) { return tap_nfail; }
int tap_count(void) { return tap_n; }

void note(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  va_start(ap, fmt);
  vline(1, "# ", fmt, ap);
  va_end(ap);
}

void diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline(2, "# ", fmt, ap);
  va_end(ap);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void sleep_until(double t) {
  double left = t - now_s();
  if (left > 0) sleep_us((long)(left * 1e6) + 1);
}

void rn_apply_env_list(const char *list) {
  if (list == NULL || *list == '\0') return;
  char *copy = strdup(list);
  if (copy == NULL) return;
  char key[256] = "";
  char val[4096] = "";
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (eq == NULL) {
      /* continues the previous value: "A=lo,eth0" */
      if (key[0] != '\0' && strlen(val) + strlen(tok) + 2 < sizeof val) {
        strcat(val, ",");
        strcat(val, tok);
        setenv(key, val, 1);
      }
      continue;
    }
    *eq = '\0';
    snprintf(key, sizeof key, "%s", tok);
    snprintf(val, sizeof val, "%s", eq + 1);
    if (key[0] != '\0') setenv(key, val, 1);
  }
  free(copy);
}

void rn_default_env(void) { setenv("RAILNET_SOCKET_IFNAME", "lo", 0); }

const char *rn_plugin_path(void) {
  static char path[4096];
  const char *p = getenv("RN_PLUGIN");
  if (p != NULL && *p != '\0') return p;
  const char *b = getenv("RN_BUILD");
  if (b == NULL || *b == '\0') b = "build";
  /* dlopen needs a slash to take a relative path as a path */
  int rel = b[0] != '/' && strncmp(b, "./", 2) != 0;
  snprintf(path, sizeof path, "%s%.3000s/libnccl-net-railnet.so", rel ? "./" : "", b);
  return path;
}

long rn_env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') return dflt;
  char *end = NULL;
  long v = strtol(s, &end, 0);
  return (end != NULL && *end == '\0') ? v : dflt;
}

uint64_t rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t pattern_key(uint64_t seed, uint64_t seq, uint64_t size) {
  uint64_t s = seed ^ (seq * 0xD6E8FEB86659FD93ull) ^ (size * 0xA0761D6478BD642Full);
  return rng_next(&s);
}

/* word i of the pattern: cheap, but every word differs and depends on key */
static inline uint64_t pattern_word(uint64_t key, uint64_t i) {
  uint64_t z = key + i * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29;
  z *= 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 32);
}

void pattern_fill(void *buf, size_t len, uint64_t key) {
  unsigned char *b = buf;
  size_t nw = len / 8;
  for (size_t i = 0; i < nw; i++) {
    uint64_t w = pattern_word(key, i);
    memcpy(b + i * 8, &w, 8);
  }
  if (len % 8) {
    uint64_t w = pattern_word(key, nw);
    memcpy(b + nw * 8, &w, len % 8);
  }
}

size_t pattern_check(const void *buf, size_t len, uint64_t key) {
  const unsigned char *b = buf;
  size_t nw = len / 8;
  for (size_t i = 0; i < nw; i++) {
    uint64_t w = pattern_word(key, i), g;
    memcpy(&g, b + i * 8, 8);
    if (g != w) {
      for (size_t j = 0; j < 8; j++)
        if (((const unsigned char *)&g)[j] != ((const unsigned char *)&w)[j]) return i * 8 + j;
    }
  }
  if (len % 8) {
    uint64_t w = pattern_word(key, nw);
    if (memcmp(b + nw * 8, &w, len % 8) != 0) {
      for (size_t j = 0; j < len % 8; j++)
        if (b[nw * 8 + j] != ((const unsigned char *)&w)[j]) return nw * 8 + j;
    }
  }
  return (size_t)-1;
}

double rn_timeout_scale(void) {
  long a = rn_env_long("RN_CONF_TIMEOUT_SCALE", 1), b = rn_env_long("RN_TIMEOUT_SCALE", 1);
  long s = a > b ? a : b;
  return s < 1 ? 1.0 : (double)s;
}

double rn_bound_s(double nominal_s) { return nominal_s * rn_timeout_scale(); }

double rn_deadline(double nominal_s) { return now_s() + rn_bound_s(nominal_s); }

/* ---- whole-buffer I/O ------------------------------------------------- */
int rn_write_all(int fd, const void *buf, size_t len) {
  const char *b = buf;
  while (len > 0) {
    ssize_t w = send(fd, b, len, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = write(fd, b, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {fd, POLLOUT, 0};
        (void)poll(&p, 1, 100);
        continue;
      }
      return -1;
    }
    b += w;
    len -= (size_t)w;
  }
  return 0;
}

int rn_read_all(int fd, void *buf, size_t len, double deadline) {
  char *b = buf;
  while (len > 0) {
    ssize_t got;
    if (deadline < 0) {
      got = read(fd, b, len); /* blocking: no poll() in a timed loop */
    } else {
      double left = deadline - now_s();
      if (left <= 0) return -1;
      struct pollfd p = {fd, POLLIN, 0};
      int r = poll(&p, 1, (int)(left * 1000) + 1);
      if (r < 0 && errno != EINTR) return -1;
      if (r <= 0) continue;
      got = recv(fd, b, len, MSG_DONTWAIT);
      if (got < 0 && errno == ENOTSOCK) got = read(fd, b, len);
    }
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return -1;
    b += got;
    len -= (size_t)got;
  }
  return 0;
}

void rn_loadavg(char *buf, size_t len) {
  snprintf(buf, len, "?");
  FILE *f = fopen("/proc/loadavg", "r");
  if (f == NULL) return;
  double a, b, c;
  if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
  fclose(f);
}

int rn_other_ipv4(char *buf, size_t len) {
  struct ifaddrs *all = NULL;
  int found = 0;
  if (getifaddrs(&all) != 0) return 0;
  for (const struct ifaddrs *a = all; a != NULL && !found; a = a->ifa_next) {
    if (a->ifa_addr == NULL || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP))
      continue;
    const struct sockaddr_in *in = (const struct sockaddr_in *)a->ifa_addr;
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    found = inet_ntop(AF_INET, &in->sin_addr, buf, (socklen_t)len) != NULL;
  }
  freeifaddrs(all);
  return found;
}
