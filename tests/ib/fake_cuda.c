/* A stand-in libcuda.so.1 for tests/ib/test_discovery.c: the driver API
 * entry points the plugin's dma-buf probe dlopens, answering as the CUDA
 * driver does, with one of them failing when FAKE_CUDA_FAIL names it:
 *   FAKE_CUDA_FAIL  init|device_get|retain|push|alloc|handle[=CUresult]
 * (the default result is 100, CUDA_ERROR_NO_DEVICE, for init and
 * device_get, else 2, CUDA_ERROR_OUT_OF_MEMORY).  A dma-buf handle is a
 * memfd named FAKE_DMABUF_NAME, so the fake verbs can recognise it and the
 * test can see that the plugin closed it.  Built twice: as is (a driver
 * with cuMemGetHandleForAddressRange, CUDA 11.7+), and with FAKE_CUDA_OLD,
 * without it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fake.h"

typedef int CUresult;
#define FAKE_DMABUF_FD_TYPE 1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */

static struct fake_cuda_stats stats;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int context_token;

void fake_cuda_stats(struct fake_cuda_stats *out);
void fake_cuda_stats(struct fake_cuda_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  pthread_mutex_unlock(&lock);
}

/* The CUresult call should fail with, 0 when it should succeed. */
static CUresult fail_result(const char *call) {
  const char *s = getenv("FAKE_CUDA_FAIL");
  size_t n = strlen(call);
  if (!s || strncmp(s, call, n) != 0 || (s[n] != '\0' && s[n] != '=')) return 0;
  if (s[n] == '=') return atoi(s + n + 1);
  return strcmp(call, "init") == 0 || strcmp(call, "device_get") == 0 ? 100 : 2;
}

static void count(int *field, int delta) {
  pthread_mutex_lock(&lock);
  *field += delta;
  pthread_mutex_unlock(&lock);
}

/* The prototypes are the driver API's (cuda.h), with plain C types. */
CUresult cuInit(unsigned flags);
CUresult cuDeviceGet(int *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device);
CUresult cuDevicePrimaryCtxRelease_v2(int device);
CUresult cuCtxPushCurrent_v2(void *ctx);
CUresult cuCtxPopCurrent_v2(void **ctx);
CUresult cuMemAlloc_v2(unsigned long long *dptr, size_t bytes);
CUresult cuMemFree_v2(unsigned long long dptr);
CUresult cuMemGetHandleForAddressRange(void *handle, unsigned long long dptr, size_t size, int type,
                                       unsigned long long flags);

CUresult cuInit(unsigned flags) {
  if (flags != 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
  count(&stats.inits, 1);
  return fail_result("init");
}

CUresult cuDeviceGet(int *device, int ordinal) {
  CUresult r = fail_result("device_get");
  if (r) return r;
  if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *device = 0;
  return 0;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
  CUresult r = fail_result("retain");
  if (r) return r;
  if (device != 0) return 101;
  *ctx = &context_token;
  count(&stats.retained, 1);
  return 0;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  if (device != 0) return 101;
  count(&stats.retained, -1);
  return 0;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
  CUresult r = fail_result("push");
  if (r) return r;
  if (ctx != &context_token) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  count(&stats.pushed, 1);
  return 0;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
  if (ctx) *ctx = &context_token;
  count(&stats.pushed, -1);
  return 0;
}

CUresult cuMemAlloc_v2(unsigned long long *dptr, size_t bytes) {
  CUresult r = fail_result("alloc");
  if (r) return r;
  if (bytes == 0) return 1;
  pthread_mutex_lock(&lock);
  stats.allocs++;
  /* a device address: not host memory, aligned as the driver aligns */
  stats.last_dptr = 0x7f0000200000ull + 0x200000ull * (unsigned)stats.handles;
  *dptr = stats.last_dptr;
  pthread_mutex_unlock(&lock);
  return 0;
}

CUresult cuMemFree_v2(unsigned long long dptr) {
  if (dptr == 0) return 1;
  count(&stats.allocs, -1);
  return 0;
}

#ifndef FAKE_CUDA_OLD
CUresult cuMemGetHandleForAddressRange(void *handle, unsigned long long dptr, size_t size, int type,
                                       unsigned long long flags) {
  CUresult r = fail_result("handle");
  if (r) return r;
  if (type != FAKE_DMABUF_FD_TYPE || flags != 0 || dptr == 0 || size == 0) return 1;
  int fd = memfd_create(FAKE_DMABUF_NAME, MFD_CLOEXEC);
  if (fd < 0) return 999; /* CUDA_ERROR_UNKNOWN */
  *(int *)handle = fd;
  count(&stats.handles, 1);
  return 0;
}
#endif
