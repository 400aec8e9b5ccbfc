/* Knobs: parsed once from the environment under a lock, bounds-checked,
 * echoed under NCCL_ENV.  The table is include/railnet/params.def. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/log.h"
#include "railnet/param.h"

static pthread_mutex_t rn_params_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rn_params rn_params_val;
/* Set (release) once the values are parsed: from then on rn_params()
 * takes no lock, so the data path's calls cost a load, not a mutex that
 * every proxy thread would pass between its cores. */
static atomic_int rn_params_loaded;

static int64_t rn_param_int(const char *name, int64_t def, int64_t lo, int64_t hi) {
  char var[64];
  snprintf(var, sizeof(var), "RAILNET_%s", name);
  const char *s = getenv(var);
  if (s == NULL || *s == '\0') return def;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) {
    RN_WARN("%s=%s is not an integer in [%lld, %lld]; using %lld", var, s, (long long)lo,
            (long long)hi, (long long)def);
    return def;
  }
  RN_INFO(NCCL_ENV, "%s set by environment to %lld", var, v);
  return v;
}

/* var and fallback are literals, so the returned source outlives the call. */
static const char *rn_param_str(char *dst, size_t len, const char *var, const char *def,
                                const char *fallback) {
  const char *s = getenv(var);
  const char *from = var;
  if ((s == NULL || *s == '\0') && fallback[0] != '\0') {
    s = getenv(fallback);
    from = fallback;
  }
  if (s == NULL || *s == '\0') {
    snprintf(dst, len, "%s", def);
    return NULL;
  }
  if (strlen(s) >= len) RN_WARN("%s is longer than %zu bytes; truncated", from, len - 1);
  snprintf(dst, len, "%s", s);
  RN_INFO(NCCL_ENV, "%s set by environment to %s", from, dst);
  return from;
}

static void rn_params_parse(void) {
#define RN_PARAM_INT(field, name, def, lo, hi, doc) \
  rn_params_val.field = rn_param_int(name, def, lo, hi);
#define RN_PARAM_STR(field, name, def, fallback, doc)                                         \
  rn_params_val.field##_from = rn_param_str(rn_params_val.field, sizeof(rn_params_val.field), \
                                            "RAILNET_" name, def, fallback);
#include "railnet/params.def"
#undef RN_PARAM_INT
#undef RN_PARAM_STR
  atomic_store_explicit(&rn_params_loaded, 1, memory_order_release);
}

const struct rn_params *rn_params(void) {
  if (!atomic_load_explicit(&rn_params_loaded, memory_order_acquire)) {
    pthread_mutex_lock(&rn_params_lock);
    if (!atomic_load_explicit(&rn_params_loaded, memory_order_relaxed)) rn_params_parse();
    pthread_mutex_unlock(&rn_params_lock);
  }
  return &rn_params_val;
}

void rn_params_reload(void) {
  pthread_mutex_lock(&rn_params_lock);
  rn_params_parse();
  pthread_mutex_unlock(&rn_params_lock);
}
