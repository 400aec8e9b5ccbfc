/* MR cache unit test, no hardware: a fake register/deregister pair records
 * every call so overlap handling, reference counts, deregistration order,
 * sub-range hits and thread safety can be checked exactly. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/mr_cache.h"

/* mr_cache.c logs through rn_log; the plugin's logger is not linked here. */
void rn_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void rn_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line;
  if (!getenv("RAILNET_DEBUG")) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "# ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

#define PAGE 4096u
struct fake_mr {
  uintptr_t addr;
  size_t len;
  int id;
};
struct fake {
  pthread_mutex_t lock;
  int nreg, ndereg, live, fail_next;
  int dereg_order[64];
  int ndereg_order;
};

static ncclResult_t fake_reg(void *ctx, uintptr_t addr, size_t len, const void *arg, void **h) {
  (void)arg;
  struct fake *f = ctx;
  pthread_mutex_lock(&f->lock);
  if (f->fail_next) {
    f->fail_next = 0;
    pthread_mutex_unlock(&f->lock);
    return ncclSystemError;
  }
  struct fake_mr *m = malloc(sizeof(*m));
  m->addr = addr;
  m->len = len;
  m->id = ++f->nreg;
  f->live++;
  pthread_mutex_unlock(&f->lock);
  *h = m;
  return ncclSuccess;
}

static void fake_dereg(void *ctx, void *h) {
  struct fake *f = ctx;
  struct fake_mr *m = h;
  pthread_mutex_lock(&f->lock);
  f->ndereg++;
  f->live--;
  if (f->ndereg_order < 64) f->dereg_order[f->ndereg_order++] = m->id;
  pthread_mutex_unlock(&f->lock);
  free(m);
}

static int ntest, nfail;
static void ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ok(int cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s %d - ", cond ? "ok" : "not ok", ++ntest);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (!cond) nfail++;
}

static struct rn_mr_cache *mk(struct fake *f, int enabled) {
  memset(f, 0, sizeof(*f));
  pthread_mutex_init(&f->lock, NULL);
  struct rn_mr_cache *c = NULL;
  if (rn_mr_cache_create(PAGE, enabled, fake_reg, fake_dereg, f, &c) != ncclSuccess) abort();
  return c;
}

static void test_alignment_and_subrange_hits(char *base) {
  struct fake f;
  struct rn_mr_cache *c = mk(&f, 1);
  struct rn_mr_entry *a, *b, *d;
  ok(rn_mr_cache_get(c, base + 100, 3 * PAGE, 0, NULL, &a) == ncclSuccess,
     "register an unaligned range");
  ok(a->addr == (uintptr_t)base && a->len == 4 * PAGE, "range widened to whole pages");
  ok(rn_mr_cache_get(c, base + PAGE + 7, 10, 0, NULL, &b) == ncclSuccess && b == a,
     "sub-range is a cache hit on the same entry");
  ok(rn_mr_cache_get(c, base, 4 * PAGE, 0, NULL, &d) == ncclSuccess && d == a,
     "exact page range is a hit");
  ok(f.nreg == 1 && a->refs == 3, "one registration, three references (got %d, %d)", f.nreg,
     a->refs);
  rn_mr_cache_put(c, b);
  rn_mr_cache_put(c, d);
  ok(f.ndereg == 0, "entry stays while referenced");
  rn_mr_cache_put(c, a);
  ok(f.ndereg == 1 && f.live == 0, "last put deregisters");
  struct rn_mr_stats st;
  rn_mr_cache_stats(c, &st);
  ok(st.hits == 2 && st.misses == 1 && st.live == 0, "stats: 2 hits, 1 miss, 0 live");
  rn_mr_cache_destroy(c);
}

static void test_overlap_and_order(char *base) {
  struct fake f;
  struct rn_mr_cache *c = mk(&f, 1);
  struct rn_mr_entry *a, *b, *x, *y, *z;
  rn_mr_cache_get(c, base, 2 * PAGE, 0, NULL, &a);        /* [0,2) id 1 */
  rn_mr_cache_get(c, base + PAGE, 2 * PAGE, 0, NULL, &b); /* [1,3) overlaps: id 2 */
  ok(a != b && f.nreg == 2, "overlapping but not contained: a second registration");
  ok(a->addr == (uintptr_t)base && a->len == 2 * PAGE, "first entry unchanged by the overlap");
  rn_mr_cache_get(c, base + PAGE + 1, 100, 0, NULL, &x); /* inside both */
  ok(x == a || x == b, "range inside two entries hits one of them");
  rn_mr_cache_put(c, x);
  rn_mr_cache_get(c, base + 2 * PAGE + 5, 10, 0, NULL, &y); /* only inside b */
  ok(y == b, "range only inside the second entry hits it");
  rn_mr_cache_get(c, base, 3 * PAGE, 0, NULL, &z); /* covers both, in neither */
  ok(z != a && z != b && f.nreg == 3, "range spanning both entries gets its own registration");
  /* release in an order unrelated to creation: b's refs first */
  rn_mr_cache_put(c, y);
  rn_mr_cache_put(c, b);
  ok(f.ndereg == 1 && f.dereg_order[0] == 2, "second entry deregistered first when its refs end");
  rn_mr_cache_put(c, z);
  ok(f.ndereg == 2 && f.dereg_order[1] == 3, "then the spanning one");
  struct rn_mr_entry *w;
  rn_mr_cache_get(c, base + 2 * PAGE, 10, 0, NULL, &w);
  ok(f.nreg == 4, "a released range is registered afresh");
  rn_mr_cache_put(c, w);
  ok(f.live == 1 && a->refs == 1, "first entry still held (refs %d)", a->refs);
  rn_mr_cache_put(c, a);
  ok(f.live == 0 && f.ndereg == f.nreg, "everything deregistered exactly once (%d/%d)", f.ndereg,
     f.nreg);
  rn_mr_cache_destroy(c);
}

static void test_disabled_and_exact_and_failure(char *base) {
  struct fake f;
  struct rn_mr_cache *c = mk(&f, 0);
  struct rn_mr_entry *a, *b;
  rn_mr_cache_get(c, base, PAGE, 0, NULL, &a);
  rn_mr_cache_get(c, base, PAGE, 0, NULL, &b);
  ok(a != b && f.nreg == 2, "cache disabled: every get registers");
  rn_mr_cache_put(c, a);
  rn_mr_cache_put(c, b);
  ok(f.live == 0, "cache disabled: every put deregisters");
  rn_mr_cache_destroy(c);

  c = mk(&f, 1);
  rn_mr_cache_get(c, base + 100, 50, RN_MR_EXACT, NULL, &a);
  ok(a->addr == (uintptr_t)base + 100 && a->len == 50, "RN_MR_EXACT keeps the range as given");
  rn_mr_cache_get(c, base + 100, 50, 0, NULL, &b);
  ok(b != a, "exact entries are private (no hit)");
  f.fail_next = 1;
  struct rn_mr_entry *e = NULL;
  ok(rn_mr_cache_get(c, base + 64 * PAGE, PAGE, 0, NULL, &e) == ncclSystemError && !e,
     "a failing registration is reported and not cached");
  ok(rn_mr_cache_get(c, base + 64 * PAGE, PAGE, 0, NULL, &e) == ncclSuccess && e,
     "the same range registers on retry");
  rn_mr_cache_put(c, e);
  rn_mr_cache_put(c, a);
  rn_mr_cache_put(c, b);
  ok(f.live == 0, "all released");
  /* destroy with a leak: deregistered by destroy */
  rn_mr_cache_get(c, base, PAGE, 0, NULL, &a);
  rn_mr_cache_destroy(c);
  ok(f.live == 0, "destroy deregisters leftovers");
}

struct thr {
  struct rn_mr_cache *c;
  char *base;
  int seed;
  int errors;
};
static void *worker(void *p) {
  struct thr *t = p;
  unsigned s = (unsigned)t->seed;
  struct rn_mr_entry *held[16] = {0};
  for (int it = 0; it < 20000; it++) {
    int k = (int)(rand_r(&s) % 16);
    if (held[k]) {
      rn_mr_cache_put(t->c, held[k]);
      held[k] = NULL;
    } else {
      size_t off = (size_t)(rand_r(&s) % (32 * PAGE)), len = 1 + (size_t)(rand_r(&s) % (8 * PAGE));
      if (rn_mr_cache_get(t->c, t->base + off, len, 0, NULL, &held[k]) != ncclSuccess)
        t->errors++;
      else if (held[k]->addr > (uintptr_t)t->base + off ||
               held[k]->addr + held[k]->len < (uintptr_t)t->base + off + len)
        t->errors++;
    }
  }
  for (int k = 0; k < 16; k++)
    if (held[k]) rn_mr_cache_put(t->c, held[k]);
  return NULL;
}

static void test_threads(char *base) {
  struct fake f;
  struct rn_mr_cache *c = mk(&f, 1);
  pthread_t th[8];
  struct thr t[8];
  for (int i = 0; i < 8; i++) {
    t[i] = (struct thr){.c = c, .base = base, .seed = i + 1};
    pthread_create(&th[i], NULL, worker, &t[i]);
  }
  int errors = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    errors += t[i].errors;
  }
  struct rn_mr_stats st;
  rn_mr_cache_stats(c, &st);
  ok(errors == 0, "8 threads x 20000 get/put: every entry covers its range");
  ok(f.live == 0 && st.live == 0 && f.nreg == f.ndereg,
     "8 threads: balanced (%d registered, %d deregistered, %llu hits)", f.nreg, f.ndereg,
     (unsigned long long)st.hits);
  rn_mr_cache_destroy(c);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* TAP survives an exit without flushing */
  char *base = aligned_alloc(PAGE, 128 * PAGE);
  printf("1..28\n");
  test_alignment_and_subrange_hits(base);
  test_overlap_and_order(base);
  test_disabled_and_exact_and_failure(base);
  test_threads(base);
  free(base);
  if (ntest != 28) printf("# planned 28, ran %d\n", ntest);
  return nfail ? 1 : 0;
}
