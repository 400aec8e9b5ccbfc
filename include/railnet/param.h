/* Parsed knobs.  rn_params() parses the environment once (under a lock),
 * echoes every value under NCCL_ENV, and returns a read-only view; once
 * parsed it takes no lock (the data path calls it). */
#ifndef RN_PARAM_H
#define RN_PARAM_H

#include <stdint.h>

struct rn_params {
#define RN_PARAM_INT(field, name, def, lo, hi, doc) int64_t field;
/* A string's *_from: the variable that set it ("RAILNET_X" or its NCCL
 * fallback), NULL for the default. */
#define RN_PARAM_STR(field, name, def, fallback, doc) \
  char field[256];                                    \
  const char *field##_from;
#include "railnet/params.def"
#undef RN_PARAM_INT
#undef RN_PARAM_STR
};

const struct rn_params *rn_params(void);
/* Re-read the environment (tests and re-init after a full finalize): only
 * while no other thread reads the values, which it rewrites in place. */
void rn_params_reload(void);

#endif
