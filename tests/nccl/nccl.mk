# Real-NCCL program (tests/nccl/sendrecv.c): built whenever the CUDA
# toolkit with NCCL's header is installed (compile-only in CI); run by
# tests/nccl/sendrecv.sh only where a GPU is present.  No sanitizers: it
# links libcudart and libnccl.
CUDA_HOME ?= /usr/local/cuda
NCCL_SENDRECV := $(BUILD)/tests/nccl-sendrecv

ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
NCCL_LIBDIR := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib/libnccl.so)) $(CUDA_HOME)/lib64/)
$(NCCL_SENDRECV): tests/nccl/sendrecv.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -g -O2 $(WARN) -isystem $(CUDA_HOME)/include -o $@ $< \
	  -L$(NCCL_LIBDIR) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(NCCL_LIBDIR) -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart

all: $(NCCL_SENDRECV)
endif

TEST_SCRIPTS += tests/nccl/sendrecv.sh
