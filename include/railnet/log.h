/* Logging through NCCL's logger.  The logger pointer is set at init (under
 * the core lock) and read atomically; before init, or from tools that run
 * without NCCL, messages go to stderr when RAILNET_DEBUG is set. */
#ifndef RN_LOG_H
#define RN_LOG_H

#include "nccl/net_common.h"

void rn_log_set(ncclDebugLogger_t logger);
void rn_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
            const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Every message starts with "NET/railnet : ", or with
 * "NET/railnet/<transport> : " in a transport's folder, whose .mk file
 * defines RN_LOG_TRANSPORT to the folder's name ("tcp", "ib"). */
#ifdef RN_LOG_TRANSPORT
#define RN_LOG_PREFIX "NET/railnet/" RN_LOG_TRANSPORT " : "
#else
#define RN_LOG_PREFIX "NET/railnet : "
#endif

#define RN_WARN(fmt, ...) \
  rn_log(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, RN_LOG_PREFIX fmt, ##__VA_ARGS__)
#define RN_INFO(flags, fmt, ...) \
  rn_log(NCCL_LOG_INFO, (flags), __FILE__, __LINE__, RN_LOG_PREFIX fmt, ##__VA_ARGS__)
#define RN_TRACE(flags, fmt, ...) \
  rn_log(NCCL_LOG_TRACE, (flags), __FILE__, __LINE__, RN_LOG_PREFIX fmt, ##__VA_ARGS__)

#endif
