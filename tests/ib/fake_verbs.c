/* A stand-in libibverbs.so.1 for tests/ib/test_discovery.c: the entry
 * points the plugin dlopens, answering as a provider does (constructors
 * return NULL and set errno, int calls return the errno value), from a
 * machine described in the environment:
 *   FAKE_VERBS_DEVICES  "mlx5_0=eth:active:64:2,ib:down;mlx5_1=ib:active:128:2"
 *                       device=port[,port...]; a port is
 *                       link(ib|eth|none):state(active|down)[:speed:width]
 *   FAKE_VERBS_GIDS     the GID table of every port: "v2:::ffff:198.18.0.1,-,v1:fe80::1"
 *                       (v1|v2|ib):address, or "-" for an empty slot;
 *                       FAKE_VERBS_GIDS_<device> for one device's ports
 *   FAKE_VERBS_FAIL     what fails: list=ENODEV|empty, open=DEV, query_device=DEV,
 *                       query_port=DEV:PORT, pd=DEV, cq=DEV, gid=DEV,
 *                       dmabuf_probe=ERRNO (fd -1), dmabuf=ERRNO (a real fd)
 *   FAKE_VERBS_MAX_INLINE  the inline size QPs are granted (default 256)
 * Built twice: as is (rdma-core >= 34), and with FAKE_VERBS_OLD, without
 * the optional _ibv_query_gid_ex and ibv_reg_dmabuf_mr. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fake.h"

#define FAKE_MAX_DEVS 8
#define FAKE_MAX_PORTS 4
#define FAKE_MAX_GIDS 16

struct fake_port {
  enum ibv_port_state state;
  uint8_t link, speed, width;
};

struct fake_dev {
  struct ibv_device dev; /* first: the plugin holds a pointer to it */
  int index, nports;
  struct fake_port ports[FAKE_MAX_PORTS];
};

static struct fake_dev devs[FAKE_MAX_DEVS];
static struct ibv_device *dev_list[FAKE_MAX_DEVS + 1];
static int ndevs;
static struct fake_verbs_stats stats;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

void fake_verbs_stats(struct fake_verbs_stats *out);
void fake_verbs_stats(struct fake_verbs_stats *out) {
  pthread_mutex_lock(&stats_lock);
  *out = stats;
  pthread_mutex_unlock(&stats_lock);
}

static void count(int *field, int delta) {
  pthread_mutex_lock(&stats_lock);
  *field += delta;
  pthread_mutex_unlock(&stats_lock);
}

/* The value of key in FAKE_VERBS_FAIL ("key=value,..."), copied; 0 when set. */
static int fail_value(const char *key, char *out, size_t len) {
  const char *s = getenv("FAKE_VERBS_FAIL");
  size_t kl = strlen(key);
  while (s && *s) {
    const char *end = strchr(s, ',');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n > kl && strncmp(s, key, kl) == 0 && s[kl] == '=') {
      snprintf(out, len, "%.*s", (int)(n - kl - 1), s + kl + 1);
      return 0;
    }
    s = end ? end + 1 : NULL;
  }
  return -1;
}

static int fails(const char *key, const char *what) {
  char v[64];
  return fail_value(key, v, sizeof(v)) == 0 && strcmp(v, what) == 0;
}

static int errno_named(const char *name) {
  static const struct {
    const char *name;
    int value;
  } names[] = {{"EOPNOTSUPP", EOPNOTSUPP}, {"EPROTONOSUPPORT", EPROTONOSUPPORT},
               {"EBADF", EBADF},           {"EFAULT", EFAULT},
               {"EINVAL", EINVAL},         {"ENODEV", ENODEV},
               {"ENOMEM", ENOMEM}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(names[i].name, name) == 0) return names[i].value;
  return EIO;
}

static void parse_port(struct fake_port *p, char *spec) {
  char *save = NULL, *link = strtok_r(spec, ":", &save), *state = strtok_r(NULL, ":", &save);
  char *speed = strtok_r(NULL, ":", &save), *width = strtok_r(NULL, ":", &save);
  p->link = (link && strcmp(link, "ib") == 0)    ? IBV_LINK_LAYER_INFINIBAND
            : (link && strcmp(link, "eth") == 0) ? IBV_LINK_LAYER_ETHERNET
                                                 : IBV_LINK_LAYER_UNSPECIFIED;
  p->state = (state && strcmp(state, "active") == 0) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  p->speed = speed ? (uint8_t)atoi(speed) : 32;
  p->width = width ? (uint8_t)atoi(width) : 2;
}

static void parse_devices(void) {
  const char *env = getenv("FAKE_VERBS_DEVICES");
  char *copy = strdup(env ? env : ""), *save = NULL;
  ndevs = 0;
  for (char *d = strtok_r(copy, ";", &save); d && ndevs < FAKE_MAX_DEVS;
       d = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(d, '=');
    struct fake_dev *f = &devs[ndevs];
    memset(f, 0, sizeof(*f));
    if (eq) *eq = '\0';
    snprintf(f->dev.name, sizeof(f->dev.name), "%s", d);
    snprintf(f->dev.dev_name, sizeof(f->dev.dev_name), "uverbs%d", ndevs);
    f->index = ndevs;
    char *psave = NULL;
    for (char *p = eq ? strtok_r(eq + 1, ",", &psave) : NULL; p && f->nports < FAKE_MAX_PORTS;
         p = strtok_r(NULL, ",", &psave))
      parse_port(&f->ports[f->nports++], p);
    dev_list[ndevs] = &f->dev;
    ndevs++;
  }
  dev_list[ndevs] = NULL;
  free(copy);
}

struct ibv_device **(ibv_get_device_list)(int *num) {
  char v[32];
  if (fail_value("list", v, sizeof(v)) == 0 && strcmp(v, "empty") != 0) {
    errno = errno_named(v);
    return NULL;
  }
  parse_devices();
  if (num) *num = ndevs;
  return dev_list;
}

void ibv_free_device_list(struct ibv_device **list) { (void)list; }

const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

static struct fake_dev *fake_of(struct ibv_context *context) {
  return (struct fake_dev *)context->device;
}

struct ibv_context *ibv_open_device(struct ibv_device *device) {
  count(&stats.opens, 1);
  if (fails("open", device->name)) {
    errno = ENODEV;
    return NULL;
  }
  /* abi_compat stays NULL: not an extended context, so the plugin uses the
   * exported ibv_query_port, as with an old provider. */
  struct ibv_context *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->device = device;
  c->cmd_fd = c->async_fd = -1;
  count(&stats.contexts, 1);
  return c;
}

int ibv_close_device(struct ibv_context *context) {
  free(context);
  count(&stats.contexts, -1);
  return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
  struct fake_dev *f = fake_of(context);
  if (fails("query_device", f->dev.name)) return EIO;
  memset(attr, 0, sizeof(*attr));
  attr->node_guid = htobe64(0x0002c90300a0b000ull + (uint64_t)f->index);
  attr->max_qp = 1000 + f->index;
  attr->phys_port_cnt = (uint8_t)f->nports;
  return 0;
}

/* Entry i of the GID table of the device's ports: FAKE_VERBS_GIDS_<name>
 * when set, else FAKE_VERBS_GIDS. */
static int gid_entry(const struct fake_dev *f, int i, union ibv_gid *gid, int *type, int *len) {
  char var[96];
  snprintf(var, sizeof(var), "FAKE_VERBS_GIDS_%s", f->dev.name);
  const char *env = getenv(var) ? getenv(var) : getenv("FAKE_VERBS_GIDS");
  char *copy = strdup(env ? env : ""), *save = NULL;
  int n = 0, found = -1;
  for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save), n++) {
    if (n != i) continue;
    memset(gid, 0, sizeof(*gid));
    *type = -1;
    if (strcmp(e, "-") == 0) continue;
    if (strncmp(e, "v2:", 3) == 0)
      *type = IBV_GID_TYPE_ROCE_V2;
    else if (strncmp(e, "v1:", 3) == 0)
      *type = IBV_GID_TYPE_ROCE_V1;
    else
      *type = IBV_GID_TYPE_IB;
    found = inet_pton(AF_INET6, e + 3, gid->raw) == 1 ? 0 : -1;
  }
  free(copy);
  if (len) *len = n;
  return found;
}

/* Fills the compat layout, the prefix of struct ibv_port_attr before
 * flags, as the exported symbol does for callers without the extended op. */
int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                    struct _compat_ibv_port_attr *compat) {
  struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
  struct fake_dev *f = fake_of(context);
  char want[80];
  snprintf(want, sizeof(want), "%s:%d", f->dev.name, port_num);
  if (port_num < 1 || port_num > f->nports || fails("query_port", want)) return EINVAL;
  const struct fake_port *p = &f->ports[port_num - 1];
  union ibv_gid g;
  int type, len = 0;
  (void)gid_entry(f, 0, &g, &type, &len);
  memset(attr, 0, offsetof(struct ibv_port_attr, flags));
  attr->state = p->state;
  attr->link_layer = p->link;
  attr->active_speed = p->speed;
  attr->active_width = p->width;
  attr->active_mtu = IBV_MTU_4096;
  attr->max_mtu = IBV_MTU_4096;
  attr->lid = p->link == IBV_LINK_LAYER_INFINIBAND ? (uint16_t)(0x10 + f->index) : 0;
  attr->gid_tbl_len = len > 0 ? len : 1;
  return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid) {
  struct fake_dev *f = fake_of(context);
  int type;
  if (port_num < 1 || port_num > f->nports || fails("gid", f->dev.name)) return EINVAL;
  if (gid_entry(f, index, gid, &type, NULL) != 0) memset(gid, 0, sizeof(*gid));
  return 0;
}

#ifndef FAKE_VERBS_OLD
int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size) {
  struct fake_dev *f = fake_of(context);
  int type;
  (void)flags;
  if (entry_size < sizeof(*entry)) return EINVAL;
  if (port_num < 1 || (int)port_num > f->nports) return EINVAL;
  memset(entry, 0, sizeof(*entry));
  if (gid_entry(f, (int)gid_index, &entry->gid, &type, NULL) != 0) return ENODATA;
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = (uint32_t)type;
  return 0;
}
#endif

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
  if (fails("pd", fake_of(context)->dev.name)) {
    errno = ENOMEM;
    return NULL;
  }
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (!pd) return NULL;
  pd->context = context;
  count(&stats.pds, 1);
  return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  count(&stats.pds, -1);
  return 0;
}

static struct ibv_mr *new_mr(struct ibv_pd *pd, void *addr, size_t len) {
  struct ibv_mr *mr = calloc(1, sizeof(*mr));
  if (!mr) return NULL;
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = len;
  mr->lkey = mr->rkey = 0x100;
  count(&stats.mrs, 1);
  return mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access) {
  (void)access;
  return new_mr(pd, addr, length);
}

#ifndef FAKE_VERBS_OLD
/* fd -1 is the plugin's support probe: EBADF where dma-buf is wired up, as
 * the kernel answers, else the configured error. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                 int fd, int access) {
  char v[32];
  if (fd < 0) {
    count(&stats.dmabuf_probe_calls, 1);
    errno = fail_value("dmabuf_probe", v, sizeof(v)) == 0 ? errno_named(v) : EBADF;
    return NULL;
  }
  char link[64] = "", path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  link[n > 0 ? n : 0] = '\0';
  pthread_mutex_lock(&stats_lock);
  stats.dmabuf_calls++;
  stats.dmabuf_fd_ok = strstr(link, FAKE_DMABUF_NAME) != NULL;
  stats.dmabuf_iova = iova;
  stats.dmabuf_len = length;
  stats.dmabuf_access = access;
  pthread_mutex_unlock(&stats_lock);
  if (offset != 0 || !strstr(link, FAKE_DMABUF_NAME)) {
    errno = EINVAL;
    return NULL;
  }
  if (fail_value("dmabuf", v, sizeof(v)) == 0) {
    errno = errno_named(v);
    return NULL;
  }
  return new_mr(pd, (void *)(uintptr_t)iova, length);
}
#endif

int ibv_dereg_mr(struct ibv_mr *mr) {
  free(mr);
  count(&stats.mrs, -1);
  return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector) {
  (void)channel, (void)comp_vector;
  if (fails("cq", fake_of(context)->dev.name)) {
    errno = ENOMEM;
    return NULL;
  }
  struct ibv_cq *cq = calloc(1, sizeof(*cq));
  if (!cq) return NULL;
  cq->context = context;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  count(&stats.cqs, 1);
  return cq;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
  free(cq);
  count(&stats.cqs, -1);
  return 0;
}

/* Grants FAKE_VERBS_MAX_INLINE bytes to a QP asking for no more, and
 * rejects a larger request (EINVAL), as mlx5 does. */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  const char *m = getenv("FAKE_VERBS_MAX_INLINE");
  uint32_t max_inline = m ? (uint32_t)atoi(m) : 256;
  if (attr->cap.max_inline_data > max_inline) {
    errno = EINVAL;
    return NULL;
  }
  struct ibv_qp *qp = calloc(1, sizeof(*qp));
  if (!qp) return NULL;
  attr->cap.max_inline_data = max_inline;
  qp->context = pd->context;
  qp->pd = pd;
  qp->qp_type = attr->qp_type;
  qp->qp_num = 0x40;
  count(&stats.qps, 1);
  return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  (void)qp, (void)attr, (void)mask;
  return EOPNOTSUPP; /* no data path here */
}

int ibv_destroy_qp(struct ibv_qp *qp) {
  free(qp);
  count(&stats.qps, -1);
  return 0;
}

const char *ibv_wc_status_str(enum ibv_wc_status status) {
  (void)status;
  return "fake status";
}
