/* The logger: NCCL's when NCCL gave us one, else stderr when RAILNET_DEBUG
 * is set (tools and tests that load railnet without NCCL). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include "railnet/log.h"

static _Atomic(ncclDebugLogger_t) rn_logger;

void rn_log_set(ncclDebugLogger_t logger) {
  if (logger != NULL) atomic_store(&rn_logger, logger);
}

void rn_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  ncclDebugLogger_t logger = atomic_load(&rn_logger);
  if (logger != NULL) {
    logger(level, flags, file, line, "%s", msg);
    return;
  }
  const char *dbg = getenv("RAILNET_DEBUG");
  if (level == NCCL_LOG_WARN ||
      (dbg != NULL && *dbg != '\0' && *dbg != '0' && (level != NCCL_LOG_TRACE || dbg[0] == 'T')))
    fprintf(stderr, "railnet %s %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}
