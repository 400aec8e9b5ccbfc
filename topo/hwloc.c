/* hwloc into the model: the live machine (hwloc I/O discovery plus sysfs
 * for ports) and hwloc XML files (v1 layout or v2/v3, parsed by hwloc).
 *
 * NCCL builds its PCI tree from sysfs by stepping two directories up from a
 * device, so root ports and switch downstream ports never become nodes;
 * each switch is its upstream port.  In hwloc's bridge numbering the host
 * bridge is depth 0, root ports 1, switch upstream ports 2, their
 * downstream ports 3, a cascaded switch 4...: even depths >= 2 are the
 * switches NCCL sees. */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sysfs.h"
#include "xml.h"

struct rn_hw {
  hwloc_topology_t topo;
  struct rn_topo *t;
  int live;
  int gpu_gdr;
  int *pkg_node; /* package logical index -> CPU node */
  int npkg;
  int nopkg_node; /* CPU node for I/O with no package, -1 until needed */
};

static int rn_hw_cpu_node(struct rn_hw *h, hwloc_obj_t anc) {
  hwloc_obj_t pkg = NULL;
  for (hwloc_obj_t o = anc; o && !pkg; o = o->parent)
    if (o->type == HWLOC_OBJ_PACKAGE) pkg = o;
  /* v1 files put NUMANode above Package; hwloc converts them and the I/O
   * then hangs above the package: take the single package inside. */
  if (!pkg && anc->cpuset &&
      hwloc_get_nbobjs_inside_cpuset_by_type(h->topo, anc->cpuset, HWLOC_OBJ_PACKAGE) == 1)
    pkg = hwloc_get_next_obj_inside_cpuset_by_type(h->topo, anc->cpuset, HWLOC_OBJ_PACKAGE, NULL);
  if (pkg && (int)pkg->logical_index < h->npkg) return h->pkg_node[pkg->logical_index];
  if (h->nopkg_node < 0) h->nopkg_node = rn_topo_add_cpu(h->t, -1);
  return h->nopkg_node;
}

static int rn_hw_numa(hwloc_obj_t anc) {
  if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
    return hwloc_bitmap_first(anc->nodeset);
  return -1;
}

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

/* NICs of one PCI function: one per RDMA device port, linked to the
 * netdev under the same function; netdev-only functions give one NIC each. */
static int rn_hw_nics(struct rn_hw *h, hwloc_obj_t dev, int node) {
  hwloc_obj_t nets[8], ofs[8];
  int nnet = 0, nof = 0;
  for (hwloc_obj_t c = dev->io_first_child; c; c = c->next_sibling) {
    if (rn_hw_is_type(c, HWLOC_OBJ_OSDEV_NETWORK) && nnet < 8) nets[nnet++] = c;
    if (rn_hw_is_type(c, HWLOC_OBJ_OSDEV_OPENFABRICS) && nof < 8) ofs[nof++] = c;
  }
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
      /* With one netdev per port, hwloc lists them in port order. */
      hwloc_obj_t nd = nnet == np ? nets[k] : nnet ? nets[0] : NULL;
      if (nd && nd->name) snprintf(nic.netdev, sizeof(nic.netdev), "%s", nd->name);
      nic.port = ports[k];
      nic.guid = rn_hw_guid(hwloc_obj_get_info_by_name(ofs[i], "NodeGUID"));
      snprintf(key, sizeof(key), "Port%dState", ports[k]);
      const char *st = hwloc_obj_get_info_by_name(ofs[i], key);
      nic.port_state = st ? atoi(st) : 0;
      nic.link = (dev->attr->pcidev.class_id == 0x0207) ? 1 : 0;
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
      nic.link = 2;
      if (rn_topo_add_nic(h->t, node, &nic) < 0) return -1;
    }
  }
  return 0;
}

static int rn_hw_walk(struct rn_hw *h, hwloc_obj_t o, int parent) {
  char busid[16];
  struct rn_pci_ids ids;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
    if (c->type == HWLOC_OBJ_BRIDGE) {
      int node = parent;
      if (c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI && c->attr->bridge.depth >= 2 &&
          c->attr->bridge.depth % 2 == 0) {
        rn_hw_busid(c, busid, sizeof(busid));
        rn_hw_ids(c, &ids);
        node = rn_topo_add_node(h->t, parent, RN_NODE_SWITCH, busid, &ids);
        if (node < 0) return -1;
      }
      if (rn_hw_walk(h, c, node)) return -1;
    } else if (c->type == HWLOC_OBJ_PCI_DEVICE) {
      rn_hw_busid(c, busid, sizeof(busid));
      rn_hw_ids(c, &ids);
      int is_gpu = (c->attr->pcidev.class_id >> 8) == 0x03 && c->attr->pcidev.vendor_id == 0x10de;
      int has_net = 0;
      for (hwloc_obj_t d = c->io_first_child; d; d = d->next_sibling)
        has_net |= rn_hw_is_type(d, HWLOC_OBJ_OSDEV_NETWORK) ||
                   rn_hw_is_type(d, HWLOC_OBJ_OSDEV_OPENFABRICS);
      if (!is_gpu && !has_net) continue;
      int node = rn_topo_add_node(h->t, parent, RN_NODE_DEV, busid, &ids);
      if (node < 0) return -1;
      if (is_gpu && rn_topo_add_gpu(h->t, node, h->gpu_gdr) < 0) return -1;
      if (!is_gpu && rn_hw_nics(h, c, node)) return -1;
    }
  }
  return 0;
}

static int rn_hw_build(struct rn_hw *h, char *err, size_t errlen) {
  int npkg = hwloc_get_nbobjs_by_type(h->topo, HWLOC_OBJ_PACKAGE);
  h->nopkg_node = -1;
  h->npkg = npkg > 0 ? npkg : 0;
  h->pkg_node = calloc((size_t)h->npkg + 1, sizeof(int));
  if (!h->pkg_node) goto out_oom;
  for (int i = 0; i < h->npkg; i++) {
    hwloc_obj_t pkg = hwloc_get_obj_by_type(h->topo, HWLOC_OBJ_PACKAGE, (unsigned)i);
    h->pkg_node[i] = rn_topo_add_cpu(h->t, rn_hw_numa(pkg));
    if (h->pkg_node[i] < 0) goto out_oom;
  }
  for (hwloc_obj_t b = hwloc_get_next_bridge(h->topo, NULL); b;
       b = hwloc_get_next_bridge(h->topo, b)) {
    if (b->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h->topo, b);
    int cpu = rn_hw_cpu_node(h, anc);
    if (cpu < 0) goto out_oom;
    char label[16];
    snprintf(label, sizeof(label), "%04x:%02x", b->attr->bridge.downstream.pci.domain,
             b->attr->bridge.downstream.pci.secondary_bus);
    int hb = rn_topo_add_node(h->t, cpu, RN_NODE_HOSTBRIDGE, label, NULL);
    if (hb < 0) goto out_oom;
    h->t->nodes[hb].numa = rn_hw_numa(anc);
    if (rn_hw_walk(h, b, hb)) goto out_oom;
  }
  free(h->pkg_node);
  h->pkg_node = NULL;
  return rn_topo_finalize(h->t, err, errlen);
out_oom:
  free(h->pkg_node);
  h->pkg_node = NULL;
  rn_topo_errf(err, errlen, "out of memory building the model");
  return -1;
}

static int rn_hw_init(hwloc_topology_t *topo, int keep_all) {
  if (hwloc_topology_init(topo)) return -1;
  /* I/O objects are filtered out by default; the rail plan needs them. */
  hwloc_topology_set_io_types_filter(
      *topo, keep_all ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  return 0;
}

/* hwloc 3.0 made osdev_type a bitmask (STORAGE 1, MEMORY 2, GPU 4, COPROC 8,
 * NETWORK 16, OPENFABRICS 32, DMA 64); hwloc 2.x reads an enum (BLOCK 0,
 * GPU 1, NETWORK 2, OPENFABRICS 3, DMA 4, COPROC 5, MEMORY 6). */
static const char *rn_hw_osdev_v2(unsigned long mask) {
  if (mask & 32) return "3";
  if (mask & 16) return "2";
  if (mask & 8) return "5";
  if (mask & 4) return "1";
  if (mask & 64) return "4";
  if (mask & 2) return "6";
  return "0";
}

static int rn_hw_downgrade_v3(struct rn_topo_xml_node *n) {
  for (; n; n = n->next) {
    const char *ty = rn_topo_xml_attr(n, "osdev_type");
    if (ty && strcmp(n->name, "object") == 0) {
      char *end;
      unsigned long mask = strtoul(ty, &end, 10);
      if (*end == '\0' && rn_topo_xml_set_attr(n, "osdev_type", rn_hw_osdev_v2(mask))) return -1;
    }
    if (n->child && rn_hw_downgrade_v3(n->child)) return -1;
  }
  return 0;
}

/* The installed hwloc (2.x) refuses version="3.0" documents.  Their
 * objects are the same apart from osdev_type, so translate the tree and let
 * hwloc read the result.  Returns 0 with *buf set, 1 if not a v3 file (err
 * then says why hwloc failed), -1 on error. */
static int rn_hw_xml_v3_as_v2(const char *path, char **buf, size_t *len, char *err, size_t errlen) {
  struct rn_topo_xml_node *root = NULL;
  if (rn_topo_xml_parse_file(path, &root, err, errlen)) return -1;
  const char *ver = rn_topo_xml_attr(root, "version");
  int rc = 1;
  if (strcmp(root->name, "topology") != 0 || !ver || strtol(ver, NULL, 10) != 3) {
    rn_topo_errf(err, errlen, "%s:%d: hwloc rejected the topology (not a valid hwloc XML document)",
                 path, root->line);
    goto out_free_tree;
  }
  rc = -1;
  if (rn_topo_xml_set_attr(root, "version", "2.0") || rn_hw_downgrade_v3(root->child) ||
      rn_topo_xml_write(root, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", buf, len)) {
    rn_topo_errf(err, errlen, "%s: out of memory", path);
    goto out_free_tree;
  }
  rc = 0;
out_free_tree:
  rn_topo_xml_free(root);
  return rc;
}

int rn_topo_load_hwloc_xml(const char *path, struct rn_topo **out, char *err, size_t errlen) {
  struct rn_hw h;
  char *v2 = NULL;
  size_t v2len = 0;
  memset(&h, 0, sizeof(h));
  *out = NULL;
  if (rn_hw_init(&h.topo, 1)) {
    rn_topo_errf(err, errlen, "%s: hwloc init failed", path);
    return -1;
  }
  if (hwloc_topology_set_xml(h.topo, path) || hwloc_topology_load(h.topo)) {
    /* hwloc does not say where it failed; our XML reader does. */
    hwloc_topology_destroy(h.topo);
    if (rn_hw_xml_v3_as_v2(path, &v2, &v2len, err, errlen)) return -1;
    if (rn_hw_init(&h.topo, 1)) {
      free(v2);
      rn_topo_errf(err, errlen, "%s: hwloc init failed", path);
      return -1;
    }
    int bad =
        hwloc_topology_set_xmlbuffer(h.topo, v2, (int)v2len + 1) || hwloc_topology_load(h.topo);
    free(v2);
    if (bad) {
      hwloc_topology_destroy(h.topo);
      rn_topo_errf(err, errlen, "%s:1: hwloc rejected the hwloc 3.0 topology", path);
      return -1;
    }
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
  int rc = rn_hw_build(&h, err, errlen);
  hwloc_topology_destroy(h.topo);
  if (rc) {
    rn_topo_free(h.t);
    return -1;
  }
  *out = h.t;
  return 0;
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
  h.live = 1;
  h.gpu_gdr = rn_topo_sysfs_gdr_probe(root, why, sizeof(why));
  int rc = rn_hw_build(&h, err, errlen);
  hwloc_topology_destroy(h.topo);
  if (rc) {
    rn_topo_free(h.t);
    return -1;
  }
  rn_topo_sysfs_enrich_nics(h.t, root);
  if (h.t->ngpus) rn_topo_add_note(h.t, "GPUDirect RDMA: %s", why);
  *out = h.t;
  return 0;
}
