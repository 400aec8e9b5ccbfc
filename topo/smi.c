/* `nvidia-smi topo -m` text into the model. */
#include "model.h"

int rn_topo_load_smi(const char *path, struct rn_topo **out, char *err, size_t errlen)
{
  *out = NULL;
  rn_topo_errf(err, errlen, "%s:1: nvidia-smi topo -m text is not supported yet", path);
  return -1;
}
