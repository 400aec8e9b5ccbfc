/* Unreadable or malformed topology files fail cleanly: rc -1, and the
 * message names the file, the line and the problem.  Never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "railnet/topo.h"

static int n_tests, n_failed;

/* Under LeakSanitizer (make SAN=1): libhwloc 2.9 leaks the objects of a
 * document it rejects; that is hwloc's, and these tests reject on purpose.
 * Unused in other builds. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhwloc.so\n"; }
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
  /* hwloc XML that libhwloc 2.9 would crash or leak on: refused first,
   * with the line and what was expected. */
  expect_fail("v1 NUMANode without sets (crashes libhwloc 2.9)", "hw-v1-numa.xml",
              "<topology version=\"1.0\">\n<object type=\"Machine\" cpuset=\"0x1\">\n"
              "<object type=\"NUMANode\" os_index=\"0\"/>\n</object>\n</topology>\n",
              ":3:", "NUMANode without cpuset and nodeset");
  expect_fail("v1 NUMANode right under a Machine without a nodeset (crashes libhwloc 2.9)",
              "hw-v1-numa-top.xml",
              "<topology>\n<object type=\"Machine\" cpuset=\"0x1\">\n"
              "<object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" nodeset=\"0x1\"/>\n"
              "</object>\n</topology>\n",
              ":3:", "NUMANode under an object without a cpuset and a nodeset");
  expect_fail("hwloc object of an unknown type", "hw-type.xml",
              "<topology version=\"2.0\">\n<object type=\"Blob\" cpuset=\"0x1\"/>\n</topology>\n",
              ":2:", "unknown hwloc object type \"Blob\"");
  expect_fail("hwloc object without a type", "hw-notype.xml",
              "<topology version=\"2.0\">\n<object cpuset=\"0x1\"/>\n</topology>\n",
              ":2:", "without a type");
  expect_fail(
      "malformed hwloc bitmap", "hw-bitmap.xml",
      "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0xzz\"/>\n</topology>\n",
      ":2:", "malformed bitmap \"0xzz\"");
  expect_fail("hwloc bitmap with a leading empty word (aborts libhwloc 2.9)", "hw-comma.xml",
              "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\",0x1\"/>\n"
              "</topology>\n",
              ":2:", "malformed bitmap \",0x1\"");
  expect_fail(
      "normal hwloc object without a cpuset (leaks in libhwloc)", "hw-nocpuset.xml",
      "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\">\n"
      "<object type=\"Package\"/>\n</object>\n</topology>\n",
      ":3:", "object without a cpuset");
  expect_fail("hwloc version we cannot read", "hw-version.xml",
              "<topology version=\"9.1\">\n<object type=\"Machine\"/>\n</topology>\n",
              ":1:", "unsupported hwloc XML version");
  expect_fail("hwloc XML with two top-level objects", "hw-two.xml",
              "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" "
              "nodeset=\"0x1\"/>\n<object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\"/>\n"
              "</topology>\n",
              ":1:", "exactly one top-level");
  expect_fail("hwloc set outside its complete set (crashes libhwloc 2.9)", "hw-complete.xml",
              "<topology>\n<object type=\"Machine\" cpuset=\"0x1\" complete_cpuset=\"0x2\" "
              "nodeset=\"0x1\"/>\n</topology>\n",
              ":2:", "cpuset has bits outside complete_cpuset");
  expect_fail(
      "hwloc object outside its parent's sets (aborts libhwloc 2.9 in v1 files)", "hw-outside.xml",
      "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\">\n"
      "<object type=\"Package\" cpuset=\"0x3\" nodeset=\"0x1\"/>\n</object>\n</topology>\n",
      ":3:", "complete_cpuset has bits outside its parent's (line 2)");
  expect_fail(
      "hwloc top-level object that is no Machine", "hw-top.xml",
      "<topology version=\"2.0\">\n<object type=\"Package\" cpuset=\"0x1\" nodeset=\"0x1\"/>\n"
      "</topology>\n",
      ":2:", "must be the Machine");
  expect_fail(
      "hwloc topology without memory", "hw-nonuma.xml",
      "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\"/>\n"
      "</topology>\n",
      ":1:", "no NUMANode");
  expect_fail(
      "hwloc XML that passes our checks but not hwloc's (a Misc object with a cpuset)",
      "hw-misc.xml",
      "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\">\n"
      "<object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" nodeset=\"0x1\"/>\n"
      "<object type=\"Misc\" cpuset=\"0x1\"/>\n</object>\n</topology>\n",
      ":1:", "hwloc rejected the topology");
  /* nvidia-smi text: file, line, row, column, what was expected. */
  expect_fail("nvidia-smi cell that is no relation", "smi-cell.txt",
              "$ nvidia-smi topo -m\n\tGPU0\tNIC0\nGPU0\t X \tFOO\nNIC0\tPIX\t X \n", ":3:",
              "row GPU0, column NIC0: expected X, NV#, PIX, PXB, PHB, NODE or SYS, found \"FOO\"");
  expect_fail("nvidia-smi X off the diagonal", "smi-x.txt",
              "  GPU0  NIC0\nGPU0  X  X\nNIC0  PIX  X\n", ":2:", "X belongs on the diagonal");
  expect_fail("nvidia-smi row missing", "smi-norow.txt",
              "\tGPU0\tNIC0\nGPU0\t X \tPIX\n\nLegend:\n", ":1:", "no row for column NIC0");
  expect_fail("nvidia-smi relation not symmetric", "smi-sym.txt",
              "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tSYS\t X \n", ":2:", "not symmetric");
  expect_fail("nvidia-smi row with cells past its columns", "smi-extra.txt",
              "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-3\t7\nNIC0\tPIX\t X \n",
              ":2:", "cells after the matrix, expected at most 1");
  expect_fail("nvidia-smi affinity that is no CPU list", "smi-aff.txt",
              "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\tabc\nNIC0\tPIX\t X \n",
              ":2:", "not a CPU or NUMA list");
  expect_fail("nvidia-smi second row for one device", "smi-dup.txt",
              "\tGPU0\tNIC0\nGPU0\t X \tPIX\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n",
              ":3:", "second row for GPU0");
  expect_fail("nvidia-smi header naming a column twice", "smi-twice.txt",
              "\tGPU0\tGPU0\nGPU0\t X \tX\n", ":1:", "appears twice");
  /* A copy whose tabs were lost: two column names glued together. */
  expect_fail("nvidia-smi header with two names glued", "smi-glued.txt",
              "\tGPU0\tNIC0NIC1\nGPU0\t X \tNODENODE\nNIC0\tNODE\t X \n", ":1:",
              "header cell \"NIC0NIC1\" holds two column names");
  /* Two machines pasted together: the second's rows would be ignored. */
  expect_fail("nvidia-smi text with two topology matrices", "smi-two.txt",
              "\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t X \n\nLegend:\n  X = Self\n\n"
              "\tGPU0\tGPU1\tNIC0\nGPU0\t X \tSYS\tPIX\nGPU1\tSYS\t X \tSYS\nNIC0\tPIX\tSYS\t X \n",
              ":9:", "a second nvidia-smi matrix (its header on line 8, the first's on line 1)");
  /* A one-GPU matrix with affinity columns is a topology (a one-GPU
   * peer-to-peer matrix has none): a later matrix is a second machine. */
  expect_fail("nvidia-smi one-GPU topology, then another matrix", "smi-one-two.txt",
              "\tGPU0\tCPU Affinity\nGPU0\t X \t0-3\n\n\tGPU0\tNIC0\nGPU0\t X \tPIX\n"
              "NIC0\tPIX\t X \n",
              ":5:", "a second nvidia-smi matrix (its header on line 4, the first's on line 1)");
  const char *files[] = {"/nonexistent/a.xml", "/nonexistent/b.xml"};
  rc = rn_topo_load_files(files, 2, &t, err, sizeof(err));
  ok(rc == -1 && strstr(err, "/nonexistent/a.xml"), "merging: a missing file is named", err);
  printf("1..%d\n", n_tests);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  return n_failed ? 1 : 0;
}
