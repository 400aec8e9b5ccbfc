/* Unreadable or malformed topology files fail cleanly: rc -1, and the
 * message names the file, the line and the problem.  Never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "railnet/topo.h"

static int n_tests, n_failed;
static char tmpdir[64];

static void ok(int cond, const char *desc, const char *err) {
  n_tests++;
  if (!cond) n_failed++;
  printf("%sok %d - %s\n", cond ? "" : "not ", n_tests, desc);
  if (!cond) printf("# err: %s\n", err);
}

static const char *write_tmp(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return path;
}

/* Loads text as a file; checks rc, that err names the file and holds
 * every needle. */
static void expect_fail(const char *desc, const char *name, const char *text, const char *n1,
                        const char *n2) {
  char err[512] = "";
  struct rn_topo *t = NULL;
  const char *path = write_tmp(name, text);
  int rc = rn_topo_load_file(path, &t, err, sizeof(err));
  ok(rc == -1 && !t && strstr(err, path) && (!n1 || strstr(err, n1)) && (!n2 || strstr(err, n2)),
     desc, err);
  rn_topo_free(t);
}

int main(void) {
  char err[512];
  struct rn_topo *t = NULL;
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/rn-topo-err-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    printf("1..0 # SKIP cannot create a temporary directory\n");
    return 0;
  }
  int rc = rn_topo_load_file("/nonexistent/railnet/topo.xml", &t, err, sizeof(err));
  ok(rc == -1 && !t && strstr(err, "/nonexistent/railnet/topo.xml") && strstr(err, "cannot open"),
     "missing file: error names the file", err);
  expect_fail(
      "truncated NCCL XML: file, line and problem", "truncated.xml",
      "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:10:00.0\" class=", ":3:",
      "malformed XML");
  expect_fail("bad nesting: the line of the mismatched tag", "nesting.xml",
              "<system>\n<cpu numaid=\"0\">\n<pci busid=\"0000:10:00.0\">\n</cpu>\n</system>\n",
              ":4:", "mismatched tag");
  expect_fail(
      "<pci> without busid: the element's line", "nobusid.xml",
      "<system>\n  <cpu numaid=\"0\">\n\n    <pci class=\"0x030200\"/>\n  </cpu>\n</system>\n",
      ":4:", "without busid");
  expect_fail("malformed busid is named", "badbusid.xml",
              "<system><cpu><pci busid=\"zz:00.0\" class=\"0x030200\"/></cpu></system>",
              ":1:", "zz:00.0");
  expect_fail("XML that is neither hwloc nor NCCL", "other.xml",
              "<?xml version=\"1.0\"?>\n<html><body/></html>\n", ":1:", "unknown topology format");
  expect_fail("plain text that is no nvidia-smi matrix", "notes.txt", "hello\nworld\n",
              ":1:", "unknown");
  expect_fail("empty file", "empty.xml", "", ":1:", "empty");
  expect_fail("truncated hwloc XML: file and line", "hwloc-trunc.xml",
              "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\" "
              "os_index=\"0\">\n",
              ":4:", NULL);
  expect_fail("hwloc XML that hwloc rejects", "hwloc-bad.xml",
              "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<bogus/>\n</topology>\n", ":",
              "hwloc");
  expect_fail("nvidia-smi matrix with a short row", "smi-short.txt",
              "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \nNIC0\tPIX\t X \n",
              ":2:", "cells");
  expect_fail("nested elements deeper than the limit", "deep.xml",
              "<system><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><"
              "a><a><a><a>"
              "<a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a><a>"
              "<a><a><a>"
              "<a><a><a><a><a><a><a><a><a><a>",
              ":1:", "too deeply");
  const char *files[] = {"/nonexistent/a.xml", "/nonexistent/b.xml"};
  rc = rn_topo_load_files(files, 2, &t, err, sizeof(err));
  ok(rc == -1 && strstr(err, "/nonexistent/a.xml"), "merging: a missing file is named", err);
  printf("1..%d\n", n_tests);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  return n_failed ? 1 : 0;
}
