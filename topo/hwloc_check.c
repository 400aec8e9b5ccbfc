/* What libhwloc needs before it may see an XML topology.  hwloc 2.9 trusts
 * its input in places (a v1 NUMANode without complete_cpuset or
 * complete_nodeset is dereferenced before the consistency checks run), so
 * a malformed file given through RAILNET_TOPO_FILE could crash the NCCL job
 * at plugin init.  Every hwloc XML document is therefore parsed by our own
 * reader first (topo/xml.c, with size and depth limits), checked and
 * normalised here, written back out, and only then handed to hwloc from
 * memory.  Errors name the file, the line and what was expected.
 * Owner: topo/hwloc.c is the only caller. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hwloc_check.h"
#include "model.h"

/* Object types hwloc 2.x reads, including the 1.x names it converts. */
static const char *const rn_hwc_types[] = {
    "Machine", "Misc",    "Group",   "NUMANode", "MemCache", "Package",  "Die",      "L1Cache",
    "L2Cache", "L3Cache", "L4Cache", "L5Cache",  "L1iCache", "L2iCache", "L3iCache", "Core",
    "PU",      "Bridge",  "PCIDev",  "OSDev",    "System",   "Socket",   "Cache",    "Node",
};

/* Children hwloc's importer knows; anything else is rejected by hwloc
 * itself, cleanly, so it only matters that we recurse into objects. */
static int rn_hwc_is_type(const char *t) {
  for (size_t i = 0; i < sizeof(rn_hwc_types) / sizeof(rn_hwc_types[0]); i++)
    if (strcmp(t, rn_hwc_types[i]) == 0) return 1;
  return 0;
}

/* hwloc bitmap text: comma-separated words of 1 to 8 hex digits, each
 * "0x"-prefixed, optionally led by "0xf...f" (an infinite set); a zero
 * word may be left empty between two others ("0x1,,0x2", as hwloc writes
 * it).  A leading empty word makes libhwloc 2.9 miscount the words and
 * abort; a trailing one shifts the whole set, so both are refused. */
static int rn_hwc_bitmap_ok(const char *s) {
  size_t len = strlen(s);
  if (len == 0 || s[len - 1] == ',' || s[0] == ',') return 0;
  if (strncmp(s, "0xf...f", 7) == 0) {
    s += 7;
    if (*s == '\0') return 1;
    if (*s++ != ',') return 0;
  }
  for (;;) {
    if (*s == ',') {
      s++;
      continue;
    }
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return 0;
    s += 2;
    int n = 0;
    while (isxdigit((unsigned char)*s)) s++, n++;
    if (n < 1 || n > 8) return 0;
    if (*s == '\0') return 1;
    if (*s++ != ',') return 0;
  }
}

/* Word k (0 = least significant 32 bits) of an hwloc bitmap text already
 * checked by rn_hwc_bitmap_ok; words above the text are 0, or all ones
 * after an infinite "0xf...f" prefix. */
static unsigned long rn_hwc_word(const char *s, int k) {
  int inf = strncmp(s, "0xf...f", 7) == 0, n = 1;
  const char *p = inf ? s + 7 : s;
  for (const char *q = p; *q; q++) n += *q == ',';
  if (inf && *p == ',') p++, n--;
  if (inf && *p == '\0') return 0xfffffffful;
  if (k >= n) return inf ? 0xfffffffful : 0;
  /* Words are written most significant first. */
  for (int i = 0; i < n - 1 - k; i++) p = strchr(p, ',') + 1;
  return *p == ',' || *p == '\0' ? 0 : strtoul(p, NULL, 16) & 0xfffffffful;
}

/* 1 when every bit of a is in b. */
static int rn_hwc_subset(const char *a, const char *b) {
  int n = 2;
  for (const char *q = a; *q; q++) n += *q == ',';
  for (const char *q = b; *q; q++) n += *q == ',';
  for (int k = 0; k < n; k++)
    if (rn_hwc_word(a, k) & ~rn_hwc_word(b, k)) return 0;
  return 1;
}

static int rn_hwc_uint_ok(const char *s) {
  if (!*s || strlen(s) > 10) return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

struct rn_hwc {
  const char *name;
  char *err;
  size_t errlen;
  int major; /* format version: 1, 2 (3 is downgraded to 2 first) */
};

static int rn_hwc_fail(struct rn_hwc *c, const struct rn_topo_xml_node *n, const char *what,
                       const char *detail) {
  rn_topo_errf(c->err, c->errlen, "%s:%d: %s%s%.60s%s", c->name, n->line, what, detail ? " \"" : "",
               detail ? detail : "", detail ? "\"" : "");
  return -1;
}

/* A set present in only one of its two forms gets the other: hwloc
 * dereferences complete_* whenever the plain set exists. */
static int rn_hwc_pair(struct rn_hwc *c, struct rn_topo_xml_node *n, const char *plain,
                       const char *complete) {
  const char *a = rn_topo_xml_attr(n, plain), *b = rn_topo_xml_attr(n, complete);
  if (a && !b && rn_topo_xml_set_attr(n, complete, a)) goto out_oom;
  if (b && !a && rn_topo_xml_set_attr(n, plain, b)) goto out_oom;
  return 0;
out_oom:
  rn_topo_errf(c->err, c->errlen, "%s: out of memory", c->name);
  return -1;
}

/* What we pass on to hwloc: the attributes and elements the model needs,
 * nothing else.  hwloc 2.9 crashes on some unknown attributes (a name with
 * a digit or a dot on the root object) and has more importers (memory
 * attributes, CPU kinds, user data) than we want to expose to a file. */
static const char *const rn_hwc_object_attrs[] = {"type",
                                                  "os_index",
                                                  "gp_index",
                                                  "cpuset",
                                                  "complete_cpuset",
                                                  "allowed_cpuset",
                                                  "nodeset",
                                                  "complete_nodeset",
                                                  "allowed_nodeset",
                                                  "name",
                                                  "subtype",
                                                  "local_memory",
                                                  "depth",
                                                  "kind",
                                                  "subkind",
                                                  "cache_size",
                                                  "cache_linesize",
                                                  "cache_associativity",
                                                  "cache_type",
                                                  "pci_busid",
                                                  "pci_type",
                                                  "pci_link_speed",
                                                  "bridge_type",
                                                  "bridge_pci",
                                                  "osdev_type",
                                                  NULL};
static const char *const rn_hwc_info_attrs[] = {"name", "value", NULL};
static const char *const rn_hwc_dist_attrs[] = {"type", "nbobjs", "kind", "name", "indexing", NULL};
static const char *const rn_hwc_len_attrs[] = {"length", NULL};
static const char *const rn_hwc_root_attrs[] = {"version", NULL};

static int rn_hwc_object(struct rn_hwc *c, struct rn_topo_xml_node *n,
                         const struct rn_topo_xml_node *parent_obj);

/* Only index and value lists carry character data in hwloc XML.  Text
 * anywhere else means nothing to hwloc, but its own minimal parser stops
 * reading an element's children at it, so that a Package loses the NUMA
 * nodes after it and libhwloc 2.9 then crashes: it is dropped. */
static void rn_hwc_no_text(struct rn_topo_xml_node *n) {
  free(n->text);
  n->text = NULL;
  n->textlen = 0;
}

/* Keeps an object's known children (objects and info pairs). */
static int rn_hwc_children(struct rn_hwc *c, struct rn_topo_xml_node *n) {
  struct rn_topo_xml_node *ch = n->child;
  while (ch) {
    struct rn_topo_xml_node *next = ch->next;
    if (strcmp(ch->name, "object") == 0) {
      if (rn_hwc_object(c, ch, n)) return -1;
    } else if (strcmp(ch->name, "info") == 0 && rn_topo_xml_attr(ch, "name") &&
               rn_topo_xml_attr(ch, "value") && !ch->child) {
      rn_topo_xml_keep_attrs(ch, rn_hwc_info_attrs);
      rn_hwc_no_text(ch);
    } else {
      rn_topo_xml_remove(ch);
    }
    ch = next;
  }
  return 0;
}

static int rn_hwc_object(struct rn_hwc *c, struct rn_topo_xml_node *n,
                         const struct rn_topo_xml_node *parent_obj) {
  rn_topo_xml_keep_attrs(n, rn_hwc_object_attrs);
  rn_hwc_no_text(n);
  static const char *const sets[] = {"cpuset",  "complete_cpuset",  "allowed_cpuset",
                                     "nodeset", "complete_nodeset", "allowed_nodeset"};
  const char *type = rn_topo_xml_attr(n, "type");
  if (!type) return rn_hwc_fail(c, n, "<object> without a type attribute", NULL);
  if (!rn_hwc_is_type(type)) return rn_hwc_fail(c, n, "unknown hwloc object type", type);
  const char *osi = rn_topo_xml_attr(n, "os_index");
  if (osi && !rn_hwc_uint_ok(osi)) return rn_hwc_fail(c, n, "os_index is not a number", osi);
  /* hwloc sets bit os_index of the machine's sets for every PU and NUMA
   * node it inserts: without an index that is bit 2^32-1 (half a gigabyte
   * and seconds of work), so both need a plausible one. */
  int indexed =
      strcmp(type, "PU") == 0 || strcmp(type, "NUMANode") == 0 || strcmp(type, "Node") == 0;
  if (indexed && (!osi || strtoul(osi, NULL, 10) > (1ul << 20)))
    return rn_hwc_fail(
        c, n, "PU or NUMANode without a plausible os_index (0 to 1048576):", osi ? osi : "none");
  for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
    const char *v = rn_topo_xml_attr(n, sets[i]);
    if (v && !rn_hwc_bitmap_ok(v)) return rn_hwc_fail(c, n, "malformed bitmap", v);
  }
  if (rn_hwc_pair(c, n, "cpuset", "complete_cpuset") ||
      rn_hwc_pair(c, n, "nodeset", "complete_nodeset"))
    return -1;
  /* A set outside its complete set crashes hwloc 2.9 (the machine with no
   * PU under it dereferences NULL). */
  static const char *const pairs[][2] = {{"cpuset", "complete_cpuset"},
                                         {"nodeset", "complete_nodeset"}};
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
    const char *a = rn_topo_xml_attr(n, pairs[i][0]), *b = rn_topo_xml_attr(n, pairs[i][1]);
    if (a && b && !rn_hwc_subset(a, b)) {
      char what[64];
      snprintf(what, sizeof(what), "%s has bits outside %s", pairs[i][0], pairs[i][1]);
      return rn_hwc_fail(c, n, what, NULL);
    }
  }
  /* Nor may an object reach outside its parent's sets (hwloc 2.9 asserts
   * on a v1 NUMA node that does, and leaks the others). */
  static const char *const complete[] = {"complete_cpuset", "complete_nodeset"};
  for (size_t i = 0; parent_obj && i < sizeof(complete) / sizeof(complete[0]); i++) {
    const char *a = rn_topo_xml_attr(n, complete[i]),
               *b = rn_topo_xml_attr(parent_obj, complete[i]);
    if (a && b && !rn_hwc_subset(a, b)) {
      char what[80];
      snprintf(what, sizeof(what), "%s has bits outside its parent's (line %d)", complete[i],
               parent_obj->line);
      return rn_hwc_fail(c, n, what, NULL);
    }
  }
  int numa = strcmp(type, "NUMANode") == 0 || strcmp(type, "Node") == 0;
  if (numa && c->major < 2) {
    /* hwloc compares a v1 NUMA node's sets with its parent's before any
     * check, and sets its bit in the nodeset of a top object it hangs
     * from directly: all of them must exist (hwloc 1.x writes them). */
    if (!rn_topo_xml_attr(n, "cpuset") || !rn_topo_xml_attr(n, "nodeset"))
      return rn_hwc_fail(c, n, "NUMANode without cpuset and nodeset", NULL);
    if (parent_obj &&
        (!rn_topo_xml_attr(parent_obj, "cpuset") || !rn_topo_xml_attr(parent_obj, "nodeset")))
      return rn_hwc_fail(c, n, "NUMANode under an object without a cpuset and a nodeset", NULL);
  }
  /* Normal objects carry both sets in every format hwloc writes; without
   * them hwloc's importer rejects the object and leaks it. */
  int io = strcmp(type, "Bridge") == 0 || strcmp(type, "PCIDev") == 0 ||
           strcmp(type, "OSDev") == 0 || strcmp(type, "Misc") == 0;
  if (!io && !rn_topo_xml_attr(n, "cpuset"))
    return rn_hwc_fail(c, n, "object without a cpuset:", type);
  if (!io && c->major >= 2 && !rn_topo_xml_attr(n, "nodeset"))
    return rn_hwc_fail(c, n, "object without a nodeset:", type);
  return rn_hwc_children(c, n);
}

/* An NVLinkBandwidth distance matrix (the only one the model reads), with
 * its index and value lists; other matrices are dropped. */
static void rn_hwc_distances(struct rn_topo_xml_node *n) {
  const char *name = rn_topo_xml_attr(n, "name");
  if (strcmp(n->name, "distances2") != 0 || !name || strcmp(name, "NVLinkBandwidth") != 0) {
    rn_topo_xml_remove(n);
    return;
  }
  rn_topo_xml_keep_attrs(n, rn_hwc_dist_attrs);
  rn_hwc_no_text(n);
  struct rn_topo_xml_node *ch = n->child;
  while (ch) {
    struct rn_topo_xml_node *next = ch->next;
    if ((strcmp(ch->name, "indexes") == 0 || strcmp(ch->name, "u64values") == 0) && !ch->child)
      rn_topo_xml_keep_attrs(ch, rn_hwc_len_attrs);
    else
      rn_topo_xml_remove(ch);
    ch = next;
  }
}

/* hwloc 3.0 made osdev_type a bitmask (STORAGE 1, MEMORY 2, GPU 4, COPROC 8,
 * NETWORK 16, OPENFABRICS 32, DMA 64); hwloc 2.x reads an enum (BLOCK 0,
 * GPU 1, NETWORK 2, OPENFABRICS 3, DMA 4, COPROC 5, MEMORY 6). */
static const char *rn_hwc_osdev_v2(unsigned long mask) {
  if (mask & 32) return "3";
  if (mask & 16) return "2";
  if (mask & 8) return "5";
  if (mask & 4) return "1";
  if (mask & 64) return "4";
  if (mask & 2) return "6";
  return "0";
}

static int rn_hwc_downgrade_v3(struct rn_topo_xml_node *n) {
  for (; n; n = n->next) {
    const char *ty = rn_topo_xml_attr(n, "osdev_type");
    if (ty && strcmp(n->name, "object") == 0) {
      char *end;
      unsigned long mask = strtoul(ty, &end, 10);
      if (*end == '\0' && rn_topo_xml_set_attr(n, "osdev_type", rn_hwc_osdev_v2(mask))) return -1;
    }
    if (n->child && rn_hwc_downgrade_v3(n->child)) return -1;
  }
  return 0;
}

static int rn_hwc_has_numa(const struct rn_topo_xml_node *n) {
  for (const struct rn_topo_xml_node *ch = n->child; ch; ch = ch->next) {
    const char *ty = strcmp(ch->name, "object") == 0 ? rn_topo_xml_attr(ch, "type") : NULL;
    if (ty && (strcmp(ty, "NUMANode") == 0 || strcmp(ty, "Node") == 0)) return 1;
    if (rn_hwc_has_numa(ch)) return 1;
  }
  return 0;
}

int rn_hwloc_xml_check(struct rn_topo_xml_node *root, const char *name, char *err, size_t errlen) {
  struct rn_hwc c = {name, err, errlen, 1};
  if (strcmp(root->name, "topology") != 0 && strcmp(root->name, "root") != 0)
    return rn_hwc_fail(&c, root, "not hwloc XML: expected <topology>, found", root->name);
  const char *ver = rn_topo_xml_attr(root, "version");
  if (ver) {
    char *end;
    long major = strtol(ver, &end, 10);
    if (end == ver || major < 1 || major > 3)
      return rn_hwc_fail(&c, root, "unsupported hwloc XML version", ver);
    c.major = (int)major;
    if (major == 3) {
      /* The installed hwloc (2.x) refuses version="3.0" documents.  Their
       * objects are the same apart from osdev_type. */
      if (rn_topo_xml_set_attr(root, "version", "2.0") || rn_hwc_downgrade_v3(root->child)) {
        rn_topo_errf(err, errlen, "%s: out of memory", name);
        return -1;
      }
      c.major = 2;
    }
  }
  rn_topo_xml_keep_attrs(root, rn_hwc_root_attrs);
  rn_hwc_no_text(root);
  int nobj = 0;
  struct rn_topo_xml_node *ch = root->child;
  while (ch) {
    struct rn_topo_xml_node *next = ch->next;
    if (strcmp(ch->name, "object") == 0) {
      if (nobj++ == 0) {
        if (rn_hwc_object(&c, ch, NULL)) return -1;
        /* hwloc writes the machine as the root (v1 files may say System). */
        const char *ty = rn_topo_xml_attr(ch, "type");
        if (strcmp(ty, "Machine") != 0 && strcmp(ty, "System") != 0)
          return rn_hwc_fail(&c, ch, "the top-level object must be the Machine, not", ty);
      }
    } else {
      rn_hwc_distances(ch);
    }
    ch = next;
  }
  if (nobj != 1) return rn_hwc_fail(&c, root, "expected exactly one top-level <object>", NULL);
  /* hwloc 2 refuses a machine without memory (and says so on stderr).
   * hwloc 1 wrote no NUMANode on a machine of one node (the memory is the
   * Machine's local_memory); hwloc's importer makes that node itself. */
  if (c.major >= 2 && !rn_hwc_has_numa(root))
    return rn_hwc_fail(&c, root, "no NUMANode object in the topology", NULL);
  return 0;
}
