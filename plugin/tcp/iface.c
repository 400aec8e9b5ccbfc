/* TCP interface discovery: which netdevs carry railnet's TCP traffic, with
 * their address, PCI function and link speed. */
#include <arpa/inet.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/clock.h"
#include "railnet/log.h"
#include "railnet/param.h"
#include "railnet/sysfs.h"
#include "tcp.h"

#define RN_TCP_DEFAULT_SPEED 10000 /* Mbps, when sysfs does not know (virtual NICs) */

int rn_tcp_if_match(const char *spec, const char *name) {
  int exclude = 0, exact = 0;
  if (*spec == '^') {
    exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    exact = 1;
    spec++;
  }
  int hit = 0;
  char list[256];
  snprintf(list, sizeof(list), "%s", spec);
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    char *port = strchr(tok, ':'); /* NCCL_IB_HCA-style ":port" has no meaning for netdevs */
    if (port != NULL) *port = '\0';
    if (exact ? strcmp(tok, name) == 0 : strncmp(tok, name, strlen(tok)) == 0) hit = 1;
  }
  return exclude ? !hit : hit;
}

static int rn_tcp_family_wanted(int family) {
  const char *f = rn_params()->socket_family;
  if (strcmp(f, "AF_INET") == 0 || strcmp(f, "4") == 0) return family == AF_INET;
  if (strcmp(f, "AF_INET6") == 0 || strcmp(f, "6") == 0) return family == AF_INET6;
  return family == AF_INET || family == AF_INET6;
}

static void rn_tcp_if_fill(struct rn_tcp_if *t, const char *name, const struct sockaddr *sa) {
  char path[256], dev[512], buf[64];
  memset(t, 0, sizeof(*t));
  snprintf(t->nic.name, sizeof(t->nic.name), "%s", name);
  snprintf(t->nic.netdev, sizeof(t->nic.netdev), "%s", name);
  /* NCCL takes devices with one GUID and port for one NIC, whose bandwidth
   * they share (graph search, NCCL_CROSS_NIC): the interface index is the
   * host's own distinct and stable number for it. */
  t->nic.guid = if_nametoindex(name);
  memcpy(&t->addr, sa,
         sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
  snprintf(path, sizeof(path), "/sys/class/net/%s/device", name);
  /* virtio and similar hang the netdev below a non-PCI device: walk up. */
  if (rn_sysfs_realpath(path, dev, sizeof(dev)) == 0)
    rn_sysfs_pci_parent(dev, t->nic.pci_path, sizeof(t->nic.pci_path), t->nic.busid,
                        sizeof(t->nic.busid));
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
  int speed = rn_sysfs_read(path, buf, sizeof(buf)) == 0 ? atoi(buf) : 0;
  t->nic.speed_mbps = speed > 0 ? speed : RN_TCP_DEFAULT_SPEED;
  t->nic.speed_unknown = speed <= 0;
  t->nic.ptr_support = NCCL_PTR_HOST;
  t->nic.reg_is_global = 1; /* a registration is a stateless token (transport.c) */
  t->nic.link = RN_LINK_ETH;
  t->nic.max_comms = 65536;
}

struct rn_tcp_if_scan {
  struct rn_tcp_if *ifs;
  int max, n;
  const char *spec;
};

/* One interface per name: IPv4 addresses come first, so an interface's
 * IPv4 address wins over its IPv6 one. */
static int rn_tcp_if_visit(void *arg, const char *ifname, unsigned flags,
                           const union rn_sockaddr *addr) {
  struct rn_tcp_if_scan *s = arg;
  (void)flags;
  if (s->n >= s->max) return 1;
  if (!rn_tcp_family_wanted(addr->sa.sa_family) || !rn_tcp_if_match(s->spec, ifname)) return 0;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->ifs[i].nic.name, ifname) == 0) return 0;
  rn_tcp_if_fill(&s->ifs[s->n++], ifname, &addr->sa);
  return 0;
}

static int rn_tcp_if_scan(struct rn_tcp_if *ifs, int max, const char *spec) {
  struct rn_tcp_if_scan s = {.ifs = ifs, .max = max, .n = 0, .spec = spec};
  if (rn_sock_each_ifaddr(rn_tcp_if_visit, &s) != 0) {
    RN_WARN("getifaddrs failed");
    return 0;
  }
  return s.n;
}

int rn_tcp_if_discover(struct rn_tcp_if *ifs, int max, char *why, size_t whylen) {
  const char *spec = rn_params()->socket_ifname;
  if (spec[0] != '\0') {
    int n = rn_tcp_if_scan(ifs, max, spec);
    snprintf(why, whylen, "%s interface filter '%s'",
             n ? "matches the" : "no interface matches the", spec);
    return n;
  }
  int n = rn_tcp_if_scan(ifs, max, "^docker,lo,virbr");
  snprintf(why, whylen, "the default filter '^docker,lo,virbr' (no socket interface filter set)");
  if (n == 0) {
    n = rn_tcp_if_scan(ifs, max, "=lo");
    snprintf(why, whylen, "only loopback is up (no socket interface filter set)");
  }
  return n;
}

struct rn_tcp_if_find {
  const union rn_sockaddr *want;
  char *name;
  size_t len;
  int found;
};

static int rn_tcp_if_find_visit(void *arg, const char *ifname, unsigned flags,
                                const union rn_sockaddr *addr) {
  struct rn_tcp_if_find *f = arg;
  (void)flags;
  if (!rn_sockaddr_same_host(f->want, addr)) return 0;
  snprintf(f->name, f->len, "%s", ifname);
  f->found = 1;
  return 1;
}

static int rn_tcp_if_running_visit(void *arg, const char *ifname, unsigned flags,
                                   const union rn_sockaddr *addr) {
  struct rn_tcp_if_find *f = arg;
  (void)ifname;
  if (!rn_sockaddr_same_host(f->want, addr)) return 0;
  f->found = (flags & IFF_RUNNING) != 0;
  return 1;
}

int rn_tcp_if_running(const union rn_sockaddr *addr) {
  struct rn_tcp_if_find f = {.want = addr, .name = NULL, .len = 0, .found = 0};
  return rn_sock_each_ifaddr(rn_tcp_if_running_visit, &f) == 0 && f.found;
}

/* Names of recent lookups: every comm names its rails at creation, and
 * asking the kernel for every address each time (getifaddrs) costs more
 * than the rest of a comm's creation over a kept connection.  A name is
 * for messages only; one a second old is asked for again. */
#define RN_TCP_NAME_CACHE 8
#define RN_TCP_NAME_TTL_MS 1000
static pthread_mutex_t rn_tcp_names_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  union rn_sockaddr addr;
  char name[32];
  int64_t when_ms;
} rn_tcp_names[RN_TCP_NAME_CACHE];
static int rn_tcp_names_next;

void rn_tcp_if_name_of(const union rn_sockaddr *addr, char *name, size_t len) {
  const int64_t now = rn_clock_ms();
  pthread_mutex_lock(&rn_tcp_names_lock);
  for (int i = 0; i < RN_TCP_NAME_CACHE; i++) {
    if (rn_tcp_names[i].when_ms == 0 || now - rn_tcp_names[i].when_ms > RN_TCP_NAME_TTL_MS ||
        !rn_sockaddr_same_host(&rn_tcp_names[i].addr, addr))
      continue;
    snprintf(name, len, "%s", rn_tcp_names[i].name);
    pthread_mutex_unlock(&rn_tcp_names_lock);
    return;
  }
  pthread_mutex_unlock(&rn_tcp_names_lock);
  char found[32];
  struct rn_tcp_if_find f = {.want = addr, .name = found, .len = sizeof(found), .found = 0};
  if (rn_sock_each_ifaddr(rn_tcp_if_find_visit, &f) != 0 || !f.found) {
    char a[64];
    snprintf(found, sizeof(found), "%s", rn_sockaddr_str(addr, a, sizeof(a)));
    char *colon = strrchr(found, ':'); /* drop the port */
    if (colon != NULL) *colon = '\0';
  }
  snprintf(name, len, "%s", found);
  pthread_mutex_lock(&rn_tcp_names_lock);
  int i = rn_tcp_names_next++ % RN_TCP_NAME_CACHE;
  rn_tcp_names[i].addr = *addr;
  snprintf(rn_tcp_names[i].name, sizeof(rn_tcp_names[i].name), "%s", found);
  rn_tcp_names[i].when_ms = now;
  pthread_mutex_unlock(&rn_tcp_names_lock);
}
