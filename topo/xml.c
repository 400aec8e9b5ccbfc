/* The one module that touches raw XML: expat events become a small
 * element/attribute tree (topo/xml.h).  Everything else in topo/ reads that
 * tree.  Reentrant: all state lives in a per-call context. */
#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "xml.h"

/* Real topology files nest < 20 deep and hold < 10k elements; the limits
 * keep fuzzed or hostile input from exhausting the stack or memory. */
#define RN_TOPO_XML_MAX_DEPTH 64
#define RN_TOPO_XML_MAX_NODES 200000
#define RN_TOPO_XML_MAX_BYTES (64u << 20)

struct rn_topo_xml_ctx {
  XML_Parser p;
  struct rn_topo_xml_node *root, *cur;
  int depth, nnodes;
  char problem[160];
  int problem_line;
};

static void rn_topo_xml_fail(struct rn_topo_xml_ctx *c, const char *what) {
  if (!c->problem[0]) {
    snprintf(c->problem, sizeof(c->problem), "%s", what);
    c->problem_line = (int)XML_GetCurrentLineNumber(c->p);
  }
  XML_StopParser(c->p, XML_FALSE);
}

static void XMLCALL rn_topo_xml_start(void *ud, const XML_Char *name, const XML_Char **atts) {
  struct rn_topo_xml_ctx *c = ud;
  int na = 0;
  if (c->depth >= RN_TOPO_XML_MAX_DEPTH) return rn_topo_xml_fail(c, "elements nested too deeply");
  if (c->nnodes >= RN_TOPO_XML_MAX_NODES) return rn_topo_xml_fail(c, "too many elements");
  if (!c->cur && c->root) return rn_topo_xml_fail(c, "more than one root element");
  while (atts[na]) na++;
  struct rn_topo_xml_node *n = calloc(1, sizeof(*n));
  if (!n) return rn_topo_xml_fail(c, "out of memory");
  n->line = (int)XML_GetCurrentLineNumber(c->p);
  n->name = strdup(name);
  n->attrs = calloc((size_t)na + 1, sizeof(char *));
  int oom = !n->name || !n->attrs;
  for (int i = 0; !oom && i < na; i++) {
    n->attrs[i] = strdup(atts[i]);
    oom = !n->attrs[i];
  }
  n->nattrs = na / 2;
  /* Link first so rn_topo_xml_free reclaims a partially built node. */
  n->parent = c->cur;
  if (!c->cur) {
    c->root = n;
  } else {
    if (c->cur->last_child)
      c->cur->last_child->next = n;
    else
      c->cur->child = n;
    c->cur->last_child = n;
  }
  c->nnodes++;
  if (oom) return rn_topo_xml_fail(c, "out of memory");
  c->cur = n;
  c->depth++;
}

static void XMLCALL rn_topo_xml_end(void *ud, const XML_Char *name) {
  struct rn_topo_xml_ctx *c = ud;
  (void)name; /* expat itself rejects mismatched end tags */
  if (c->cur) c->cur = c->cur->parent;
  c->depth--;
}

static void XMLCALL rn_topo_xml_text(void *ud, const XML_Char *s, int len) {
  struct rn_topo_xml_ctx *c = ud;
  struct rn_topo_xml_node *n = c->cur;
  if (!n || len <= 0) return;
  /* Whitespace between elements is layout, not content.  s is not
   * NUL-terminated: look at len bytes only. */
  int blank = 0;
  while (blank < len &&
         (s[blank] == ' ' || s[blank] == '\t' || s[blank] == '\r' || s[blank] == '\n'))
    blank++;
  if (!n->text && blank == len) return;
  char *t = realloc(n->text, n->textlen + (size_t)len + 1);
  if (!t) return rn_topo_xml_fail(c, "out of memory");
  memcpy(t + n->textlen, s, (size_t)len);
  n->textlen += (size_t)len;
  t[n->textlen] = '\0';
  n->text = t;
}

void rn_topo_xml_free(struct rn_topo_xml_node *root) {
  /* Iterative post-order walk: no recursion on untrusted depth. */
  struct rn_topo_xml_node *n = root;
  while (n) {
    if (n->child) {
      n = n->child;
      continue;
    }
    struct rn_topo_xml_node *next = n->next, *parent = n->parent;
    int last = n == root;
    for (int i = 0; n->attrs && n->attrs[i]; i++) free(n->attrs[i]);
    free(n->attrs);
    free(n->text);
    free(n->name);
    if (parent) parent->child = next;
    free(n);
    if (last) break;
    n = next ? next : parent;
  }
}

const char *rn_topo_xml_attr(const struct rn_topo_xml_node *n, const char *name) {
  for (int i = 0; i < n->nattrs; i++)
    if (strcmp(n->attrs[2 * i], name) == 0) return n->attrs[2 * i + 1];
  return NULL;
}

int rn_topo_xml_parse_buf(const char *buf, size_t len, const char *name,
                          struct rn_topo_xml_node **root, char *err, size_t errlen) {
  struct rn_topo_xml_ctx c;
  memset(&c, 0, sizeof(c));
  *root = NULL;
  if (len > RN_TOPO_XML_MAX_BYTES) {
    rn_topo_errf(err, errlen, "%s: file too large (%zu bytes)", name, len);
    return -1;
  }
  c.p = XML_ParserCreate(NULL);
  if (!c.p) {
    rn_topo_errf(err, errlen, "%s: out of memory", name);
    return -1;
  }
  XML_SetUserData(c.p, &c);
  XML_SetElementHandler(c.p, rn_topo_xml_start, rn_topo_xml_end);
  XML_SetCharacterDataHandler(c.p, rn_topo_xml_text);
  /* Never fetch external entities or DTDs (the default, made explicit). */
  XML_SetParamEntityParsing(c.p, XML_PARAM_ENTITY_PARSING_NEVER);
  enum XML_Status st = XML_Parse(c.p, buf, (int)len, XML_TRUE);
  int rc = 0;
  if (st != XML_STATUS_OK || c.problem[0]) {
    if (c.problem[0])
      rn_topo_errf(err, errlen, "%s:%d: %s", name, c.problem_line, c.problem);
    else
      rn_topo_errf(err, errlen, "%s:%lu: malformed XML: %s", name,
                   (unsigned long)XML_GetCurrentLineNumber(c.p),
                   XML_ErrorString(XML_GetErrorCode(c.p)));
    rc = -1;
  } else if (!c.root) {
    rn_topo_errf(err, errlen, "%s:1: no XML element", name);
    rc = -1;
  }
  XML_ParserFree(c.p);
  if (rc) {
    rn_topo_xml_free(c.root);
    return -1;
  }
  *root = c.root;
  return 0;
}

int rn_topo_xml_read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t len = 0, cap = 0;
  *out = NULL;
  *outlen = 0;
  if (!f) {
    rn_topo_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  for (;;) {
    if (cap - len < 65536) {
      if (cap >= RN_TOPO_XML_MAX_BYTES) {
        rn_topo_errf(err, errlen, "%s: file too large (over %u bytes)", path,
                     RN_TOPO_XML_MAX_BYTES);
        goto out_free_buf;
      }
      char *nb = realloc(buf, cap + 65536 + 1);
      if (!nb) {
        rn_topo_errf(err, errlen, "%s: out of memory", path);
        goto out_free_buf;
      }
      buf = nb;
      cap += 65536;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  if (ferror(f)) {
    rn_topo_errf(err, errlen, "%s: read error", path);
    goto out_free_buf;
  }
  fclose(f);
  buf[len] = '\0';
  *out = buf;
  *outlen = len;
  return 0;
out_free_buf:
  free(buf);
  fclose(f);
  return -1;
}

int rn_topo_xml_parse_file(const char *path, struct rn_topo_xml_node **root, char *err,
                           size_t errlen) {
  char *buf;
  size_t len;
  *root = NULL;
  if (rn_topo_xml_read_file(path, &buf, &len, err, errlen)) return -1;
  int rc = rn_topo_xml_parse_buf(buf, len, path, root, err, errlen);
  free(buf);
  return rc;
}

struct rn_topo_xml_peek {
  XML_Parser p;
  char *out;
  size_t outlen;
};

static void XMLCALL rn_topo_xml_peek_start(void *ud, const XML_Char *name, const XML_Char **atts) {
  struct rn_topo_xml_peek *k = ud;
  (void)atts;
  snprintf(k->out, k->outlen, "%s", name);
  XML_StopParser(k->p, XML_FALSE);
}

void rn_topo_xml_root_name(const char *buf, size_t len, char *out, size_t outlen) {
  struct rn_topo_xml_peek k = {XML_ParserCreate(NULL), out, outlen};
  out[0] = '\0';
  if (!k.p) return;
  XML_SetUserData(k.p, &k);
  XML_SetElementHandler(k.p, rn_topo_xml_peek_start, NULL);
  XML_SetParamEntityParsing(k.p, XML_PARAM_ENTITY_PARSING_NEVER);
  /* A prefix: not final, so a cut-off document is not an error here. */
  (void)XML_Parse(k.p, buf, (int)len, XML_FALSE);
  XML_ParserFree(k.p);
}

int rn_topo_xml_set_attr(struct rn_topo_xml_node *n, const char *name, const char *value) {
  char *v = strdup(value);
  if (!v) return -1;
  for (int i = 0; i < n->nattrs; i++) {
    if (strcmp(n->attrs[2 * i], name) == 0) {
      free(n->attrs[2 * i + 1]);
      n->attrs[2 * i + 1] = v;
      return 0;
    }
  }
  char *k = strdup(name);
  char **na = realloc(n->attrs, (size_t)(2 * n->nattrs + 3) * sizeof(char *));
  if (!k || !na) {
    free(k);
    free(v);
    if (na) n->attrs = na;
    return -1;
  }
  n->attrs = na;
  n->attrs[2 * n->nattrs] = k;
  n->attrs[2 * n->nattrs + 1] = v;
  n->attrs[2 * n->nattrs + 2] = NULL;
  n->nattrs++;
  return 0;
}

void rn_topo_xml_keep_attrs(struct rn_topo_xml_node *n, const char *const *keep) {
  int w = 0;
  for (int i = 0; i < n->nattrs; i++) {
    int ok = 0;
    for (int k = 0; keep[k] && !ok; k++) ok = strcmp(n->attrs[2 * i], keep[k]) == 0;
    if (!ok) {
      free(n->attrs[2 * i]);
      free(n->attrs[2 * i + 1]);
      continue;
    }
    n->attrs[2 * w] = n->attrs[2 * i];
    n->attrs[2 * w + 1] = n->attrs[2 * i + 1];
    w++;
  }
  n->nattrs = w;
  n->attrs[2 * w] = NULL;
}

void rn_topo_xml_remove(struct rn_topo_xml_node *child) {
  struct rn_topo_xml_node *p = child->parent, *prev = NULL;
  if (p) {
    for (struct rn_topo_xml_node *c = p->child; c && c != child; c = c->next) prev = c;
    if (prev)
      prev->next = child->next;
    else
      p->child = child->next;
    if (p->last_child == child) p->last_child = prev;
  }
  child->parent = NULL;
  child->next = NULL;
  rn_topo_xml_free(child);
}

struct rn_topo_xml_out {
  char *buf;
  size_t len, cap;
  int oom;
};

static void rn_topo_xml_put(struct rn_topo_xml_out *o, const char *s, size_t n) {
  if (o->oom) return;
  if (o->len + n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (o->len + n + 1 > cap) cap *= 2;
    char *b = realloc(o->buf, cap);
    if (!b) {
      o->oom = 1;
      return;
    }
    o->buf = b;
    o->cap = cap;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = '\0';
}

static void rn_topo_xml_puts(struct rn_topo_xml_out *o, const char *s) {
  rn_topo_xml_put(o, s, strlen(s));
}

static void rn_topo_xml_put_escaped(struct rn_topo_xml_out *o, const char *s) {
  char tmp[16];
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '&')
      rn_topo_xml_puts(o, "&amp;");
    else if (c == '<')
      rn_topo_xml_puts(o, "&lt;");
    else if (c == '>')
      rn_topo_xml_puts(o, "&gt;");
    else if (c == '"')
      rn_topo_xml_puts(o, "&quot;");
    else if (c < 0x20) {
      snprintf(tmp, sizeof(tmp), "&#x%x;", c);
      rn_topo_xml_puts(o, tmp);
    } else
      rn_topo_xml_put(o, s, 1);
  }
}

/* Recursion is bounded by RN_TOPO_XML_MAX_DEPTH, enforced when parsing. */
static void rn_topo_xml_write_node(struct rn_topo_xml_out *o, const struct rn_topo_xml_node *n) {
  rn_topo_xml_puts(o, "<");
  rn_topo_xml_puts(o, n->name);
  for (int i = 0; i < n->nattrs; i++) {
    rn_topo_xml_puts(o, " ");
    rn_topo_xml_puts(o, n->attrs[2 * i]);
    rn_topo_xml_puts(o, "=\"");
    rn_topo_xml_put_escaped(o, n->attrs[2 * i + 1]);
    rn_topo_xml_puts(o, "\"");
  }
  if (!n->child && !n->text) {
    rn_topo_xml_puts(o, "/>\n");
    return;
  }
  rn_topo_xml_puts(o, ">");
  if (n->text) rn_topo_xml_put_escaped(o, n->text);
  if (n->child) rn_topo_xml_puts(o, "\n");
  for (const struct rn_topo_xml_node *c = n->child; c; c = c->next) rn_topo_xml_write_node(o, c);
  rn_topo_xml_puts(o, "</");
  rn_topo_xml_puts(o, n->name);
  rn_topo_xml_puts(o, ">\n");
}

int rn_topo_xml_write(const struct rn_topo_xml_node *root, const char *prolog, char **buf,
                      size_t *len) {
  struct rn_topo_xml_out o = {NULL, 0, 0, 0};
  if (prolog) rn_topo_xml_puts(&o, prolog);
  rn_topo_xml_write_node(&o, root);
  if (o.oom) {
    free(o.buf);
    return -1;
  }
  *buf = o.buf;
  *len = o.len;
  return 0;
}
