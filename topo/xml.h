/* Private to topo/: a small element/attribute tree, the only way topo/
 * code sees XML.  Owner: topo/xml.c, the only expat user. */
#ifndef RN_TOPO_XML_H
#define RN_TOPO_XML_H

#include <stddef.h>

struct rn_topo_xml_node {
  char *name;
  int line; /* line of the start tag */
  int nattrs;
  char **attrs; /* name, value, name, value ... */
  char *text;   /* character data directly inside, or NULL */
  size_t textlen;
  struct rn_topo_xml_node *parent, *child, *last_child, *next;
};

/* Parses a whole file / buffer into a tree.  On failure -1 and err reads
 * "<name>:<line>: <problem>".  Limits nesting and size so hostile input
 * cannot exhaust the stack or memory. */
int rn_topo_xml_parse_file(const char *path, struct rn_topo_xml_node **root, char *err,
                           size_t errlen);
int rn_topo_xml_parse_buf(const char *buf, size_t len, const char *name,
                          struct rn_topo_xml_node **root, char *err, size_t errlen);
void rn_topo_xml_free(struct rn_topo_xml_node *root);
/* Reads a whole file (at most the parser's size limit) into a malloc'd,
 * NUL-terminated buffer.  0 ok, -1 with err naming the file. */
int rn_topo_xml_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);
/* Value of attribute name, NULL when absent. */
const char *rn_topo_xml_attr(const struct rn_topo_xml_node *n, const char *name);
/* Replaces (or adds) attribute name.  0 ok, -1 out of memory. */
int rn_topo_xml_set_attr(struct rn_topo_xml_node *n, const char *name, const char *value);
/* Drops every attribute of n whose name is not in keep (NULL-terminated). */
void rn_topo_xml_keep_attrs(struct rn_topo_xml_node *n, const char *const *keep);
/* Unlinks child from its parent and frees it with its subtree. */
void rn_topo_xml_remove(struct rn_topo_xml_node *child);
/* Serialises the tree (elements, attributes, text) after
 * prolog.  *buf is malloc'd.  0 ok, -1 out of memory. */
int rn_topo_xml_write(const struct rn_topo_xml_node *root, const char *prolog, char **buf,
                      size_t *len);
/* Name of the root element of buf (format detection), "" when there is
 * none in the first len bytes or the prefix is not XML. */
void rn_topo_xml_root_name(const char *buf, size_t len, char *out, size_t outlen);

#endif
