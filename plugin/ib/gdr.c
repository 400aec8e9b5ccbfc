/* Which GPU memory a device can register, proven rather than assumed:
 * CUDA (peermem: plain ibv_reg_mr on device pointers) when the
 * nvidia-peermem / nv_peer_mem kernel module is loaded; DMABUF when a real
 * dma-buf registration of CUDA memory succeeds on this device's PD (libcuda
 * dlopened; no libcuda or no GPU means no DMABUF). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/sysfs.h"
#include "ib.h"

/* The few driver API entry points the probe needs (CUDA driver ABI). */
typedef int rn_cu_result;
struct rn_cu {
  rn_cu_result (*init)(unsigned);
  rn_cu_result (*device_get)(int *, int);
  rn_cu_result (*primary_retain)(void **, int);
  rn_cu_result (*primary_release)(int);
  rn_cu_result (*ctx_push)(void *);
  rn_cu_result (*ctx_pop)(void **);
  rn_cu_result (*mem_alloc)(unsigned long long *, size_t);
  rn_cu_result (*mem_free)(unsigned long long);
  rn_cu_result (*get_handle)(void *, unsigned long long, size_t, int, unsigned long long);
};

static void *rn_cu_sym(void *lib, const char *v2, const char *v1) {
  void *p = v2 ? dlsym(lib, v2) : NULL;
  return p ? p : dlsym(lib, v1);
}

#define RN_CU_DMABUF_FD 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */
#define RN_CU_PROBE_BYTES (2u << 20)

/* 1 when CUDA memory registers through dma-buf on device; why says otherwise. */
static int rn_ib_dmabuf_probe(struct rn_ib_device *device, char *why, size_t len) {
  struct ibv_mr *mr = NULL;
  if (!rn_ibv_has_dmabuf()) {
    snprintf(why, len, "no DMABUF: libibverbs lacks ibv_reg_dmabuf_mr");
    return 0;
  }
  /* Kernel/provider support first, as net_ib does: fd -1 fails with EBADF
   * when dma-buf is wired up, EOPNOTSUPP/EPROTONOSUPPORT when it is not. */
  int err = rn_ibv_reg_dmabuf_mr_probe(device->pd, 0, 0, 0, -1, 0, &mr);
  if (mr) (void)rn_ibv_dereg_mr(mr);
  if (err == EOPNOTSUPP || err == EPROTONOSUPPORT) {
    snprintf(why, len, "no DMABUF: %s does not support dma-buf registration (%s)", device->name,
             strerror(err));
    return 0;
  }
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, len, "no DMABUF: libcuda.so.1 not loadable, probe skipped");
    return 0;
  }
  struct rn_cu cu;
  *(void **)&cu.init = rn_cu_sym(lib, NULL, "cuInit");
  *(void **)&cu.device_get = rn_cu_sym(lib, NULL, "cuDeviceGet");
  *(void **)&cu.primary_retain = rn_cu_sym(lib, NULL, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.primary_release =
      rn_cu_sym(lib, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
  *(void **)&cu.ctx_push = rn_cu_sym(lib, "cuCtxPushCurrent_v2", "cuCtxPushCurrent");
  *(void **)&cu.ctx_pop = rn_cu_sym(lib, "cuCtxPopCurrent_v2", "cuCtxPopCurrent");
  *(void **)&cu.mem_alloc = rn_cu_sym(lib, "cuMemAlloc_v2", "cuMemAlloc");
  *(void **)&cu.mem_free = rn_cu_sym(lib, "cuMemFree_v2", "cuMemFree");
  *(void **)&cu.get_handle = rn_cu_sym(lib, NULL, "cuMemGetHandleForAddressRange");
  int ok = 0, dev = 0, fd = -1;
  void *cuda_context = NULL;
  rn_cu_result rc = 0;
  unsigned long long dptr = 0;
  if (!cu.init || !cu.device_get || !cu.primary_retain || !cu.primary_release || !cu.ctx_push ||
      !cu.ctx_pop || !cu.mem_alloc || !cu.mem_free || !cu.get_handle) {
    snprintf(why, len, "no DMABUF: libcuda lacks cuMemGetHandleForAddressRange (driver too old)");
    goto out_close_lib;
  }
  if ((rc = cu.init(0)) != 0 || (rc = cu.device_get(&dev, 0)) != 0) {
    snprintf(why, len, "no DMABUF: no usable CUDA device (CUresult %d)", rc);
    goto out_close_lib;
  }
  if ((rc = cu.primary_retain(&cuda_context, dev)) != 0) {
    snprintf(why, len, "no DMABUF: cuDevicePrimaryCtxRetain failed (CUresult %d)", rc);
    goto out_close_lib;
  }
  if ((rc = cu.ctx_push(cuda_context)) != 0) {
    snprintf(why, len, "no DMABUF: cuCtxPushCurrent failed (CUresult %d)", rc);
    goto out_release;
  }
  if ((rc = cu.mem_alloc(&dptr, RN_CU_PROBE_BYTES)) != 0) {
    snprintf(why, len, "no DMABUF: cuMemAlloc failed (CUresult %d)", rc);
    goto out_pop;
  }
  if ((rc = cu.get_handle(&fd, dptr, RN_CU_PROBE_BYTES, RN_CU_DMABUF_FD, 0)) != 0 || fd < 0) {
    snprintf(why, len, "no DMABUF: cuMemGetHandleForAddressRange failed (CUresult %d)", rc);
    goto out_free;
  }
  err = rn_ibv_reg_dmabuf_mr_probe(
      device->pd, 0, RN_CU_PROBE_BYTES, dptr, fd,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &mr);
  if (err) {
    snprintf(why, len, "no DMABUF: ibv_reg_dmabuf_mr of CUDA memory on %s failed (%s)",
             device->name, strerror(err));
  } else {
    (void)rn_ibv_dereg_mr(mr);
    snprintf(why, len, "DMABUF: a dma-buf registration of CUDA memory on %s succeeded",
             device->name);
    ok = 1;
  }
  close(fd);
out_free:
  cu.mem_free(dptr);
out_pop:
  cu.ctx_pop(&cuda_context);
out_release:
  cu.primary_release(dev);
out_close_lib:
  /* libcuda stays loaded: unloading a CUDA driver library is not supported. */
  return ok;
}

int rn_ib_probe_ptr_support(struct rn_ib_device *device, char *why, size_t len) {
  int bits = 0;
  const char *mod = NULL;
  char dwhy[160];
  if (rn_sysfs_peermem(&mod)) bits |= NCCL_PTR_CUDA;
  if (rn_ib_dmabuf_probe(device, dwhy, sizeof(dwhy))) bits |= NCCL_PTR_DMABUF;
  snprintf(why, len, "%s%s; %s", bits & NCCL_PTR_CUDA ? "peermem: " : "no CUDA: ",
           mod ? mod : "no nvidia-peermem/nv_peer_mem module", dwhy);
  return bits;
}
