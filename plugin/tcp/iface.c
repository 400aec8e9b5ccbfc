/* TCP interface discovery: which netdevs carry railnet's TCP traffic, with
 * their address, PCI function and link speed. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  t->nic.ptr_support = NCCL_PTR_HOST;
  t->nic.link = RN_LINK_ETH;
  t->nic.max_comms = 65536;
}

static int rn_tcp_if_scan(struct rn_tcp_if *ifs, int max, const char *spec) {
  struct ifaddrs *all = NULL;
  int n = 0;
  if (getifaddrs(&all) != 0) {
    RN_WARN("getifaddrs failed");
    return 0;
  }
  /* Two passes so an interface's IPv4 address wins over its IPv6 one. */
  for (int pass = 0; pass < 2; pass++) {
    int fam = pass == 0 ? AF_INET : AF_INET6;
    for (struct ifaddrs *a = all; a != NULL && n < max; a = a->ifa_next) {
      if (a->ifa_addr == NULL || a->ifa_addr->sa_family != fam) continue;
      if (!(a->ifa_flags & IFF_UP) || !rn_tcp_family_wanted(fam)) continue;
      if (fam == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr))
        continue; /* needs a scope id the peer cannot use */
      if (!rn_tcp_if_match(spec, a->ifa_name)) continue;
      int dup = 0;
      for (int i = 0; i < n; i++) dup |= strcmp(ifs[i].nic.name, a->ifa_name) == 0;
      if (dup) continue;
      rn_tcp_if_fill(&ifs[n++], a->ifa_name, a->ifa_addr);
    }
  }
  freeifaddrs(all);
  return n;
}

int rn_tcp_if_discover(struct rn_tcp_if *ifs, int max) {
  const char *spec = rn_params()->socket_ifname;
  if (spec[0] != '\0') {
    int n = rn_tcp_if_scan(ifs, max, spec);
    if (n == 0) RN_INFO(NCCL_INIT | NCCL_NET, "socket: no interface matches '%s'", spec);
    return n;
  }
  int n = rn_tcp_if_scan(ifs, max, "^docker,lo,virbr");
  if (n == 0) {
    RN_INFO(NCCL_INIT | NCCL_NET, "socket: only loopback available, using lo");
    n = rn_tcp_if_scan(ifs, max, "=lo");
  }
  return n;
}
