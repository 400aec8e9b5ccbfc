/* The one error-macro family.  Every macro that can return says CHECK in its
 * name so the hidden control flow is visible at the call site. */
#ifndef RN_CHECK_H
#define RN_CHECK_H

#include "railnet/log.h"

/* Propagate a failing ncclResult_t, leaving an INFO breadcrumb. */
#define RN_CHECK(call)                                                    \
  do {                                                                    \
    ncclResult_t rn_res_ = (call);                                        \
    if (rn_res_ != ncclSuccess) {                                         \
      RN_INFO(NCCL_NET, "%s:%d -> %d", __FILE__, __LINE__, (int)rn_res_); \
      return rn_res_;                                                     \
    }                                                                     \
  } while (0)

/* For functions holding resources: store the result and jump to a label
 * named for what it undoes. */
#define RN_CHECK_GOTO(call, res, label)                                 \
  do {                                                                  \
    (res) = (call);                                                     \
    if ((res) != ncclSuccess) {                                         \
      RN_INFO(NCCL_NET, "%s:%d -> %d", __FILE__, __LINE__, (int)(res)); \
      goto label;                                                       \
    }                                                                   \
  } while (0)

/* Reject NULL arguments at the ABI boundary. */
#define RN_CHECK_ARG(cond, fmt, ...)                    \
  do {                                                  \
    if (!(cond)) {                                      \
      RN_WARN("invalid argument: " fmt, ##__VA_ARGS__); \
      return ncclInvalidArgument;                       \
    }                                                   \
  } while (0)

#endif
