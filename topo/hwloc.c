/* hwloc into the model: the live machine (hwloc I/O discovery plus sysfs
 * for ports) and hwloc XML files (v1 layout or v2/v3, parsed by hwloc
 * after topo/hwloc_check.c has made sure hwloc can take them).
 *
 * NCCL builds its PCI tree from sysfs (ncclTopoGetXmlFromSys): from a
 * device it steps two directories up to the next PCI node, and stops at
 * the CPU when either step reaches the root complex.  So the PCI nodes
 * above a device are its 2nd, 4th, 6th... bridge ancestors, counted from
 * the device; usually the upstream ports of its switches, but a lone
 * bridge in front of a device shifts the count.  The CPU is the device's
 * NUMA node.  Packages only group NUMA nodes for the planner. */
#include <hwloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwloc_check.h"
#include "model.h"
#include "sysfs.h"
#include "xml.h"

/* hwloc gives a link's usable rate in GB/s (encoding removed); NCCL counts
 * lanes x 100 Mb/s units / 80 (topo.cc), about 0.76 of that for every
 * PCIe generation.  Keep NCCL's scale so paths compare with NIC speeds as
 * NCCL compares them. */
#define RN_HW_NCCL_PCI_SCALE 0.76

struct rn_hw {
  hwloc_topology_t topo;
  struct rn_topo *t;
  int gpu_gdr;
  int host;
  int *numa_cpu; /* NUMA os_index -> CPU node */
  int nnuma;
  int anycpu; /* CPU node for I/O whose NUMA node is unknown, -1 until needed */
};

static void rn_hw_busid(hwloc_obj_t o, char *out, size_t len) {
  snprintf(out, len, "%04x:%02x:%02x.%x", o->attr->pcidev.domain, o->attr->pcidev.bus,
           o->attr->pcidev.dev, o->attr->pcidev.func);
}

static void rn_hw_ids(hwloc_obj_t o, struct rn_pci_ids *ids) {
  memset(ids, 0, sizeof(*ids));
  ids->has_ids = 1;
  ids->class_code = (uint32_t)o->attr->pcidev.class_id << 8;
  ids->vendor = o->attr->pcidev.vendor_id;
  ids->device = o->attr->pcidev.device_id;
  ids->subvendor = o->attr->pcidev.subvendor_id;
  ids->subdevice = o->attr->pcidev.subdevice_id;
}

static uint64_t rn_hw_guid(const char *s) {
  uint64_t g = 0;
  for (; s && *s; s++) {
    int c = *s;
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v >= 0) g = g << 4 | (uint64_t)v;
  }
  return g;
}

static int rn_hw_is_type(hwloc_obj_t o, hwloc_obj_osdev_type_t ty) {
  return o->type == HWLOC_OBJ_OS_DEVICE && o->attr->osdev.type == ty;
}

/* A bridge between two PCI functions: the only kind NCCL's sysfs walk
 * steps through (host bridges are the root complex, not BDF directories). */
static int rn_hw_is_pci_bridge(hwloc_obj_t o) {
  return o && o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

static int rn_hw_get_node(hwloc_obj_t o) { return (int)(intptr_t)o->userdata - 1; }
static void rn_hw_set_node(hwloc_obj_t o, int node) { o->userdata = (void *)(intptr_t)(node + 1); }

/* The CPU node of a device's NUMA node (its locality's first NUMA node). */
static int rn_hw_cpu_of(struct rn_hw *h, hwloc_obj_t dev) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h->topo, dev);
  if (anc && anc->nodeset) {
    for (int i = hwloc_bitmap_first(anc->nodeset); i >= 0; i = hwloc_bitmap_next(anc->nodeset, i))
      if (i < h->nnuma && h->numa_cpu[i] > 0) return h->numa_cpu[i];
  }
  if (h->anycpu < 0) {
    int pkg = rn_topo_add_package(h->t, h->host);
    h->anycpu = pkg < 0 ? -1 : rn_topo_add_cpu(h->t, pkg, -1);
  }
  return h->anycpu;
}

/* The model node a device hangs from: NCCL's chain of every second bridge
 * above it, created top-down, the top one under the device's CPU. */
static int rn_hw_parent_of(struct rn_hw *h, hwloc_obj_t dev) {
  hwloc_obj_t chain[64];
  int n = 0;
  hwloc_obj_t a = dev->parent;
  /* Ancestors A1, A2, ...: keep A2, A4, ... while both steps are bridges. */
  while (rn_hw_is_pci_bridge(a) && rn_hw_is_pci_bridge(a->parent) && n < 64) {
    chain[n++] = a->parent;
    a = a->parent->parent;
  }
  int parent = rn_hw_cpu_of(h, dev);
  if (parent < 0) return -1;
  for (int i = n - 1; i >= 0; i--) {
    int node = rn_hw_get_node(chain[i]);
    if (node < 0) {
      char busid[16];
      struct rn_pci_ids ids;
      rn_hw_busid(chain[i], busid, sizeof(busid));
      rn_hw_ids(chain[i], &ids);
      node = rn_topo_add_node(h->t, parent, RN_NODE_SWITCH, busid, &ids);
      if (node < 0) return -1;
      h->t->nodes[node].up_bw = chain[i]->attr->pcidev.linkspeed * RN_HW_NCCL_PCI_SCALE;
      rn_hw_set_node(chain[i], node);
    }
    parent = node;
  }
  return parent;
}

/* NICs of one PCI function: one per RDMA device port, linked to the
 * netdev under the same function; netdev-only functions give one NIC each. */
static int rn_hw_nics(struct rn_hw *h, hwloc_obj_t dev, int node) {
  hwloc_obj_t nets[8], ofs[8];
  int nnet = 0, nof = 0;
  for (hwloc_obj_t c = dev->io_first_child; c; c = c->next_sibling) {
    if (rn_hw_is_type(c, HWLOC_OBJ_OSDEV_NETWORK) && nnet < 8) nets[nnet++] = c;
    if (rn_hw_is_type(c, HWLOC_OBJ_OSDEV_OPENFABRICS) && nof < 8) ofs[nof++] = c;
  }
  int cls = dev->attr->pcidev.class_id;
  struct rn_topo_nic nic;
  for (int i = 0; i < nof; i++) {
    int ports[8], np = 0;
    char key[32];
    for (int p = 1; p <= 8; p++) {
      snprintf(key, sizeof(key), "Port%dState", p);
      if (hwloc_obj_get_info_by_name(ofs[i], key)) ports[np++] = p;
    }
    if (np == 0) ports[np++] = 1;
    for (int k = 0; k < np; k++) {
      memset(&nic, 0, sizeof(nic));
      snprintf(nic.name, sizeof(nic.name), "%s", ofs[i]->name ? ofs[i]->name : "rdma?");
      snprintf(nic.device, sizeof(nic.device), "%s", nic.name);
      /* With one netdev per port, hwloc lists them in port order. */
      hwloc_obj_t nd = nnet == np ? nets[k] : nnet ? nets[0] : NULL;
      if (nd && nd->name) snprintf(nic.netdev, sizeof(nic.netdev), "%s", nd->name);
      nic.port = ports[k];
      nic.guid = rn_hw_guid(hwloc_obj_get_info_by_name(ofs[i], "NodeGUID"));
      snprintf(key, sizeof(key), "Port%dState", ports[k]);
      const char *st = hwloc_obj_get_info_by_name(ofs[i], key);
      nic.port_state = st ? atoi(st) : 0;
      /* InfiniBand class, or an RDMA device on an Ethernet function (RoCE). */
      nic.link = cls == 0x0207 ? RN_TOPO_LINK_IB : cls == 0x0200 ? RN_TOPO_LINK_ETH : 0;
      nic.rdma = 1;
      nic.gdr = 1;
      if (rn_topo_add_nic(h->t, node, &nic) < 0) return -1;
    }
  }
  if (nof == 0) {
    for (int i = 0; i < nnet; i++) {
      memset(&nic, 0, sizeof(nic));
      snprintf(nic.name, sizeof(nic.name), "%s", nets[i]->name ? nets[i]->name : "net?");
      snprintf(nic.netdev, sizeof(nic.netdev), "%.31s", nic.name);
      nic.port = 1;
      nic.link = RN_TOPO_LINK_ETH;
      if (rn_topo_add_nic(h->t, node, &nic) < 0) return -1;
    }
  }
  return 0;
}

static int rn_hw_device(struct rn_hw *h, hwloc_obj_t c) {
  char busid[16];
  struct rn_pci_ids ids;
  int is_gpu = (c->attr->pcidev.class_id >> 8) == 0x03 && c->attr->pcidev.vendor_id == 0x10de;
  int has_net = 0;
  for (hwloc_obj_t d = c->io_first_child; d; d = d->next_sibling)
    has_net |=
        rn_hw_is_type(d, HWLOC_OBJ_OSDEV_NETWORK) || rn_hw_is_type(d, HWLOC_OBJ_OSDEV_OPENFABRICS);
  if (!is_gpu && !has_net) return 0;
  int parent = rn_hw_parent_of(h, c);
  if (parent < 0) return -1;
  rn_hw_busid(c, busid, sizeof(busid));
  rn_hw_ids(c, &ids);
  int node = rn_topo_add_node(h->t, parent, RN_NODE_DEV, busid, &ids);
  if (node < 0) return -1;
  h->t->nodes[node].up_bw = c->attr->pcidev.linkspeed * RN_HW_NCCL_PCI_SCALE;
  rn_hw_set_node(c, node);
  if (!is_gpu) return rn_hw_nics(h, c, node);
  int g = rn_topo_add_gpu(h->t, node, h->gpu_gdr);
  if (g < 0) return -1;
  for (hwloc_obj_t d = c->io_first_child; d; d = d->next_sibling) {
    const char *uuid =
        d->type == HWLOC_OBJ_OS_DEVICE ? hwloc_obj_get_info_by_name(d, "NVIDIAUUID") : NULL;
    if (uuid) snprintf(h->t->gpus[g].pub.uuid, sizeof(h->t->gpus[g].pub.uuid), "%s", uuid);
  }
  return 0;
}

/* GPU memory onlined as a NUMA node (hwloc subtype "GPUMemory", with the
 * GPU's PCIBusID) means the GPU is cache-coherent with its CPU: over
 * NVLink-C2C on Grace (on POWER9 the same shows NVLink to the CPU, which
 * NCCL does not treat as C2C). */
static void rn_hw_c2c(struct rn_hw *h) {
  hwloc_obj_t root = hwloc_get_root_obj(h->topo);
  const char *arch = root ? hwloc_obj_get_info_by_name(root, "Architecture") : NULL;
  if (arch && strncmp(arch, "ppc", 3) == 0) return;
  int n = 0;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, NULL); o;
       o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, o)) {
    const char *bus = hwloc_obj_get_info_by_name(o, "PCIBusID");
    if (!o->subtype || strcmp(o->subtype, "GPUMemory") != 0 || !bus) continue;
    char norm[16];
    if (rn_topo_busid_norm(bus, norm, sizeof(norm))) continue;
    for (int g = 0; g < h->t->ngpus; g++)
      if (strcmp(h->t->gpus[g].pub.busid, norm) == 0 && !h->t->gpus[g].pub.c2c) {
        h->t->gpus[g].pub.c2c = 1;
        n++;
      }
  }
  if (n) rn_topo_add_note(h->t, "%d GPU(s) with GPU memory NUMA nodes: NVLink-C2C to their CPU", n);
}

/* The PCI device behind an object of an NVLink distance matrix (a GPU's
 * OS device, or an NVSwitch's PCI function). */
static hwloc_obj_t rn_hw_pci_of(hwloc_obj_t o) {
  while (o && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
  return o && o->type == HWLOC_OBJ_PCI_DEVICE ? o : NULL;
}

/* NVLinks from hwloc's "NVLinkBandwidth" distances: GPU-GPU links, and
 * links to NVSwitches (PCI class 0680 of NVIDIA). */
static void rn_hw_nvlinks(struct rn_hw *h) {
  struct hwloc_distances_s *d[4];
  unsigned nr = 4;
  if (hwloc_distances_get_by_name(h->topo, "NVLinkBandwidth", &nr, d, 0) != 0) return;
  for (unsigned k = 0; k < nr && k < 4; k++) {
    unsigned n = d[k]->nbobjs;
    for (unsigned i = 0; i < n; i++) {
      hwloc_obj_t a = rn_hw_pci_of(d[k]->objs[i]);
      int an = a ? rn_hw_get_node(a) : -1;
      if (an < 0) continue;
      int ga = -1;
      for (int g = 0; g < h->t->ngpus && ga < 0; g++)
        if (h->t->gpus[g].node == an) ga = g;
      if (ga < 0) continue;
      for (unsigned j = 0; j < n; j++) {
        if (i == j || d[k]->values[i * n + j] == 0) continue;
        hwloc_obj_t b = rn_hw_pci_of(d[k]->objs[j]);
        if (!b) continue;
        if (b->attr->pcidev.vendor_id == 0x10de && b->attr->pcidev.class_id == 0x0680) {
          h->t->gpus[ga].nvswitch = 1;
        } else if ((b->attr->pcidev.class_id >> 8) == 0x03) {
          char busid[16];
          rn_hw_busid(b, busid, sizeof(busid));
          (void)rn_topo_add_nvlink(h->t, an, busid, -1);
        }
      }
    }
    hwloc_distances_release(h->topo, d[k]);
  }
}

static int rn_hw_build(struct rn_hw *h, int live, char *err, size_t errlen) {
  h->anycpu = -1;
  h->host = rn_topo_host(h->t, "");
  if (h->host < 0) goto out_oom;
  int npkg = hwloc_get_nbobjs_by_type(h->topo, HWLOC_OBJ_PACKAGE);
  int *pkg_node = calloc((size_t)(npkg > 0 ? npkg : 1), sizeof(int));
  int maxnuma = 0;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, NULL); o;
       o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, o))
    if (o->os_index < 4096 && (int)o->os_index + 1 > maxnuma) maxnuma = (int)o->os_index + 1;
  h->nnuma = maxnuma;
  h->numa_cpu = calloc((size_t)maxnuma + 1, sizeof(int));
  if (!pkg_node || !h->numa_cpu) {
    free(pkg_node);
    goto out_oom;
  }
  for (int i = 0; i < (npkg > 0 ? npkg : 1); i++) {
    pkg_node[i] = rn_topo_add_package(h->t, h->host);
    if (pkg_node[i] < 0) {
      free(pkg_node);
      goto out_oom;
    }
  }
  /* One CPU node per NUMA node with memory for CPUs (GPU memory nodes
   * are not CPUs), under the package that holds it. */
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, NULL); o;
       o = hwloc_get_next_obj_by_type(h->topo, HWLOC_OBJ_NUMANODE, o)) {
    /* Unknown (HWLOC_UNKNOWN_INDEX) or absurd NUMA numbers are skipped:
     * devices there fall back to an anonymous CPU node. */
    if (o->os_index >= (unsigned)maxnuma) continue;
    if (o->subtype && strcmp(o->subtype, "GPUMemory") == 0) continue;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(h->topo, HWLOC_OBJ_PACKAGE, o);
    if (!pkg && o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
      pkg = hwloc_get_next_obj_covering_cpuset_by_type(h->topo, o->cpuset, HWLOC_OBJ_PACKAGE, NULL);
    int pi = pkg && (int)pkg->logical_index < npkg ? (int)pkg->logical_index : 0;
    int cpu = rn_topo_add_cpu(h->t, pkg_node[pi], (int)o->os_index);
    if (cpu < 0) {
      free(pkg_node);
      goto out_oom;
    }
    h->numa_cpu[o->os_index] = cpu;
  }
  free(pkg_node);
  for (hwloc_obj_t o = hwloc_get_next_pcidev(h->topo, NULL); o;
       o = hwloc_get_next_pcidev(h->topo, o))
    o->userdata = NULL;
  for (hwloc_obj_t o = hwloc_get_next_bridge(h->topo, NULL); o;
       o = hwloc_get_next_bridge(h->topo, o))
    o->userdata = NULL;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(h->topo, NULL); o;
       o = hwloc_get_next_pcidev(h->topo, o))
    if (rn_hw_device(h, o)) goto out_oom;
  rn_hw_c2c(h);
  rn_hw_nvlinks(h);
  free(h->numa_cpu);
  h->numa_cpu = NULL;
  /* Port rates and link layers first: paths weigh NIC speeds. */
  if (live) rn_topo_sysfs_enrich_nics(h->t, rn_topo_sysfs_root());
  return rn_topo_finalize(h->t, err, errlen);
out_oom:
  free(h->numa_cpu);
  h->numa_cpu = NULL;
  rn_topo_errf(err, errlen, "out of memory building the model");
  return -1;
}

static int rn_hw_init(hwloc_topology_t *topo, int keep_all) {
  if (hwloc_topology_init(topo)) return -1;
  /* NCCL reads a device's numa_node from sysfs, which no cgroup narrows.
   * Without this flag hwloc drops the NUMA nodes a cpuset (cpuset.mems)
   * disallows and hangs their devices off the machine: they would lose
   * their CPU node, and two of them on different NUMA nodes would meet
   * at one anonymous CPU (PHB) instead of crossing SYS. */
  (void)hwloc_topology_set_flags(*topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  /* I/O objects are filtered out by default; the rail plan needs them. */
  hwloc_topology_set_io_types_filter(
      *topo, keep_all ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return 0;
}

int rn_topo_load_hwloc_xml_buf(const char *buf, size_t len, const char *name, struct rn_topo **out,
                               char *err, size_t errlen) {
  struct rn_topo_xml_node *root = NULL;
  struct rn_hw h;
  char *norm = NULL;
  size_t normlen = 0;
  memset(&h, 0, sizeof(h));
  *out = NULL;
  /* Our reader first: limits, line numbers, and the checks hwloc skips. */
  if (rn_topo_xml_parse_buf(buf, len, name, &root, err, errlen)) return -1;
  int rc = rn_hwloc_xml_check(root, name, err, errlen);
  if (rc == 0 &&
      rn_topo_xml_write(root, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", &norm, &normlen)) {
    rn_topo_errf(err, errlen, "%s: out of memory", name);
    rc = -1;
  }
  rn_topo_xml_free(root);
  if (rc) return -1;
  if (rn_hw_init(&h.topo, 1)) {
    free(norm);
    rn_topo_errf(err, errlen, "%s: hwloc init failed", name);
    return -1;
  }
  int bad =
      hwloc_topology_set_xmlbuffer(h.topo, norm, (int)normlen + 1) || hwloc_topology_load(h.topo);
  free(norm);
  if (bad) {
    hwloc_topology_destroy(h.topo);
    rn_topo_errf(err, errlen, "%s:1: hwloc rejected the topology (inconsistent hwloc XML)", name);
    return -1;
  }
  h.t = rn_topo_alloc("hwloc-xml");
  if (!h.t) {
    hwloc_topology_destroy(h.topo);
    rn_topo_errf(err, errlen, "out of memory");
    return -1;
  }
  /* A file carries no GDR flag: an NVIDIA GPU next to an RDMA NIC is
   * assumed capable (the path level still decides). */
  h.gpu_gdr = 1;
  rc = rn_hw_build(&h, 0, err, errlen);
  hwloc_topology_destroy(h.topo);
  if (rc) {
    rn_topo_free(h.t);
    return -1;
  }
  *out = h.t;
  return 0;
}

int rn_topo_load_hwloc_xml(const char *path, struct rn_topo **out, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  *out = NULL;
  if (rn_topo_xml_read_file(path, &buf, &len, err, errlen)) return -1;
  int rc = rn_topo_load_hwloc_xml_buf(buf, len, path, out, err, errlen);
  free(buf);
  return rc;
}

int rn_topo_load_live(struct rn_topo **out, char *err, size_t errlen) {
  struct rn_hw h;
  char why[128];
  const char *root = rn_topo_sysfs_root();
  memset(&h, 0, sizeof(h));
  *out = NULL;
  if (rn_hw_init(&h.topo, 0)) {
    rn_topo_errf(err, errlen, "live: hwloc init failed");
    return -1;
  }
  /* hwloc's Linux backend reads the PCI tree from sysfs, as NCCL does; the
   * libpciaccess component would only add vendor names, and it keeps its
   * whole PCI id database allocated (300 KB LeakSanitizer reports at exit). */
  (void)hwloc_topology_set_components(h.topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (hwloc_topology_load(h.topo)) {
    hwloc_topology_destroy(h.topo);
    rn_topo_errf(err, errlen, "live: hwloc could not discover this machine");
    return -1;
  }
  h.t = rn_topo_alloc("live");
  if (!h.t) {
    hwloc_topology_destroy(h.topo);
    rn_topo_errf(err, errlen, "out of memory");
    return -1;
  }
  h.gpu_gdr = rn_topo_sysfs_gdr_probe(root, why, sizeof(why));
  int rc = rn_hw_build(&h, 1, err, errlen);
  hwloc_topology_destroy(h.topo);
  if (rc) {
    rn_topo_free(h.t);
    return -1;
  }
  if (h.t->ngpus) rn_topo_add_note(h.t, "GPUDirect RDMA: %s", why);
  *out = h.t;
  return 0;
}
