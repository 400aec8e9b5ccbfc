/* libFuzzer target for the syntaxes users type into variables: the NIC
 * filter (NCCL_IB_HCA / RAILNET_NICS), GDR levels (NCCL_NET_GDR_LEVEL /
 * RAILNET_GDR_LEVEL), CUDA_VISIBLE_DEVICES and GPU subsets.  The input is
 * split at its first NUL byte: a filter, then (optionally) a GPU list.
 * Every accepted filter is also used to plan a small fixed machine. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "railnet/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char rn_fuzz_machine[] =
    "<system><cpu numaid=\"0\">"
    "<pci busid=\"0000:10:00.0\" class=\"0x060400\">"
    "<pci busid=\"0000:11:00.0\" class=\"0x030200\"><gpu dev=\"0\" gdr=\"1\"/></pci>"
    "<pci busid=\"0000:12:00.0\" class=\"0x020700\"><nic>"
    "<net name=\"mlx5_0\" speed=\"200000\" port=\"1\"/><net name=\"mlx5_1\" speed=\"200000\" "
    "port=\"2\"/></nic></pci></pci>"
    "<pci busid=\"0000:21:00.0\" class=\"0x030200\"><gpu dev=\"1\" gdr=\"1\"/></pci>"
    "<pci busid=\"0000:22:00.0\" class=\"0x020000\"><nic><net name=\"eth0\" speed=\"100000\"/>"
    "</nic></pci></cpu></system>";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct rn_topo *t;
  char err[256];
  if (!t &&
      rn_topo_load_ncclxml_buf(rn_fuzz_machine, sizeof(rn_fuzz_machine) - 1, &t, err, sizeof(err)))
    abort(); /* the fixed machine must load */
  char *buf = malloc(size + 2);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = buf[size + 1] = '\0';
  const char *spec = buf, *gpus = buf + strlen(buf) + 1;
  if (gpus > buf + size) gpus = buf + size;
  enum rn_path lvl;
  (void)rn_gdr_level_parse(spec, 0, &lvl);
  (void)rn_gdr_level_parse(spec, 1, &lvl);
  (void)rn_topo_filter_match(spec, "mlx5_0", "ib0", 1);
  (void)rn_topo_filter_match(spec, "mlx5_0:2", "", 2);
  char subset[256], note[256];
  (void)rn_topo_cuda_visible(t, spec, subset, sizeof(subset), note, sizeof(note));
  (void)rn_topo_cuda_visible(t, gpus, subset, sizeof(subset), note, sizeof(note));
  struct rn_plan_opts o;
  struct rn_plan *p = NULL;
  rn_plan_opts_default(&o);
  if (rn_topo_filter_check(spec, err, sizeof(err)) == 0) o.nic_filter = spec;
  o.gpu_subset = gpus;
  if (rn_plan_build(t, &o, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  free(buf);
  return 0;
}
