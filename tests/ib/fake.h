/* What the stand-in libibverbs.so.1 (tests/ib/fake_verbs.c) and
 * libcuda.so.1 (tests/ib/fake_cuda.c) report to test_discovery: objects
 * still alive and the arguments of the dma-buf calls.  The test reaches
 * them with dlopen(RTLD_NOLOAD) + dlsym, in the process the plugin loaded
 * them into.  Owner: the two stand-ins; nothing here is linked into the
 * plugin. */
#ifndef RN_TEST_FAKE_H
#define RN_TEST_FAKE_H

#include <stddef.h>
#include <stdint.h>

struct fake_verbs_stats {
  int contexts, pds, mrs, cqs, qps; /* alive now */
  int opens;                        /* ibv_open_device calls */
  int dmabuf_calls;                 /* ibv_reg_dmabuf_mr calls with a real fd */
  int dmabuf_probe_calls;           /* ... with fd -1 */
  int dmabuf_fd_ok;                 /* the last real fd was the fake CUDA's dma-buf */
  uint64_t dmabuf_iova;
  size_t dmabuf_len;
  int dmabuf_access;
};
typedef void (*fake_verbs_stats_fn)(struct fake_verbs_stats *);

struct fake_cuda_stats {
  int inits;
  int retained; /* primary contexts retained and not released */
  int pushed;   /* contexts pushed and not popped */
  int allocs;   /* device allocations not freed */
  int handles;  /* dma-buf fds handed out */
  unsigned long long last_dptr;
};
typedef void (*fake_cuda_stats_fn)(struct fake_cuda_stats *);

/* The name the fake CUDA gives its dma-buf fds (a memfd), so the fake
 * verbs can tell one apart and the test can find any left open. */
#define FAKE_DMABUF_NAME "fake-cuda-dmabuf"

#endif
