/* The transport registry and the selection RAILNET_TRANSPORT makes from
 * it. */
#include <stdio.h>
#include <string.h>
#include "railnet/check.h"
#include "railnet/registry.h"

struct rn_registry_entry {
  const struct rn_transport *transport;
  const char *alias;       /* another RAILNET_TRANSPORT spelling, or NULL */
  int preference;          /* auto tries higher first; the lowest is the fallback */
  const char *medium;      /* for messages: what it runs over */
  const char *found;       /* for messages: what its init counts */
  const char *none;        /* for messages: why auto found none */
  const char *none_forced; /* for messages: why a forced one found none */
};

/* One line per transport.  The first column is its index: WIRE FORMAT
 * (handles, comms and requests carry it), so append, never reorder or
 * reuse one.  TCP is 0 and verbs 1 in every build since the first. */
#define RN_REGISTRY(X)                                                        \
  X(0, rn_transport_tcp, "tcp", 0, "TCP", "interface(s)", NULL, NULL)         \
  X(1, rn_transport_ib, NULL, 1, "verbs", "active port(s)", "no ACTIVE port", \
    "no libibverbs, no device, or no ACTIVE port")

#define RN_REGISTRY_DECLARE(index, table, ...) extern const struct rn_transport table;
RN_REGISTRY(RN_REGISTRY_DECLARE)

#define RN_REGISTRY_ENTRY(index, table, alias, preference, medium, found, none, none_forced) \
  [index] = {&table, alias, preference, medium, found, none, none_forced},
static const struct rn_registry_entry rn_registry[] = {RN_REGISTRY(RN_REGISTRY_ENTRY)};
#define RN_REGISTRY_N ((int)(sizeof(rn_registry) / sizeof(rn_registry[0])))

#define RN_REGISTRY_ONE(...) +1
_Static_assert(RN_REGISTRY_N == 0 RN_REGISTRY(RN_REGISTRY_ONE),
               "registry indices are 0 .. n-1 with no gap");
_Static_assert(RN_REGISTRY_N <= 255, "the index travels in one byte of the handle");
_Static_assert(RN_REGISTRY_N >= 1, "a fallback transport");

int rn_registry_count(void) { return RN_REGISTRY_N; }

const struct rn_transport *rn_registry_get(int index) {
  return index >= 0 && index < RN_REGISTRY_N ? rn_registry[index].transport : NULL;
}

static int rn_registry_named(const char *want) {
  for (int i = 0; i < RN_REGISTRY_N; i++) {
    const struct rn_registry_entry *e = &rn_registry[i];
    if (strcmp(want, e->transport->name) == 0 || (e->alias && strcmp(want, e->alias) == 0))
      return i;
  }
  return -1;
}

/* Fill order with every index by preference, highest first (the
 * fallback, lowest, last); returns the fallback. */
static int rn_registry_by_preference(int *order) {
  for (int i = 0; i < RN_REGISTRY_N; i++) {
    int k = i;
    while (k > 0 && rn_registry[order[k - 1]].preference < rn_registry[i].preference) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = i;
  }
  return order[RN_REGISTRY_N - 1];
}

ncclResult_t rn_registry_select(const char *want, int *index, const struct rn_nic **nics,
                                int *nnics) {
  int order[RN_REGISTRY_N], fallback = rn_registry_by_preference(order);
  *index = -1;
  if (strcmp(want, "auto") != 0) {
    int i = rn_registry_named(want);
    if (i < 0) {
      /* Not a failed init: NCCL 2.28.9 then calls finalize through a NULL
       * pointer.  Zero devices with a WARN makes NCCL move on visibly. */
      char names[256] = "auto";
      for (int k = 0; k < RN_REGISTRY_N; k++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof(names) - len, ", %s", rn_registry[order[k]].transport->name);
      }
      RN_WARN("RAILNET_TRANSPORT=%s is not one of %s: railnet offers no devices", want, names);
      return ncclSuccess;
    }
    const struct rn_registry_entry *e = &rn_registry[i];
    char why[256] = "";
    RN_CHECK(e->transport->init(nics, nnics, why, sizeof(why)));
    if (i == fallback) {
      RN_INFO(NCCL_INIT | NCCL_NET, "transport %s: forced by RAILNET_TRANSPORT",
              e->transport->name);
    } else if (*nnics > 0) {
      RN_INFO(NCCL_INIT | NCCL_NET, "transport %s: %d %s (forced)", e->transport->name, *nnics,
              e->found);
    } else {
      e->transport->fini();
      RN_WARN("RAILNET_TRANSPORT=%s but no usable %s device (%s): railnet offers no devices", want,
              e->medium, why[0] ? why : e->none_forced);
      return ncclSuccess;
    }
    *index = i;
    return ncclSuccess;
  }
  /* auto: the first by preference with a NIC; the fallback even without. */
  for (int k = 0; k < RN_REGISTRY_N; k++) {
    const struct rn_registry_entry *e = &rn_registry[order[k]];
    char why[256] = "";
    RN_CHECK(e->transport->init(nics, nnics, why, sizeof(why)));
    if (order[k] == fallback) {
      *index = order[k];
      return ncclSuccess;
    }
    if (*nnics > 0) {
      RN_INFO(NCCL_INIT | NCCL_NET, "transport %s: %d %s (RAILNET_TRANSPORT=auto prefers %s)",
              e->transport->name, *nnics, e->found, e->medium);
      *index = order[k];
      return ncclSuccess;
    }
    e->transport->fini();
    const struct rn_registry_entry *next = &rn_registry[order[k + 1]];
    RN_INFO(NCCL_INIT | NCCL_NET, "transport %s: %s unavailable (%s), using %s",
            next->transport->name, e->medium, why[0] ? why : e->none, next->medium);
  }
  return ncclSuccess;
}
