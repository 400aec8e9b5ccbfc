"""A 256 MB torch.distributed send/recv between two ranks over NCCL.

Rank 0 sends, rank 1 receives; every element of every iteration is
checked on the receiving GPU.  Rank 1 prints one line for scripts:

  RESULT torch_sendrecv bytes=268435456 iters=20 us_per_iter=... gbps=... verified=1

Launch with two ranks, e.g. (both ranks on GPU 0, a host id each):
  torchrun --standalone --nproc-per-node 2 --no-python scripts/gpu/rank-env.sh \
      python3 scripts/gpu/torch_sendrecv.py
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import two_ranks


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=256 * 1000 * 1000)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gpu", type=int, default=int(os.environ.get("RN_GPU", "0")),
                    help="GPU of every rank (default 0: the ranks share it)")
    a = ap.parse_args()

    started = two_ranks.start("torch_sendrecv", a.gpu)
    if started is None:
        return 2
    device, rank = started

    n = a.bytes // 4
    base = torch.arange(n, dtype=torch.int32, device=device)
    buf = torch.empty(n, dtype=torch.int32, device=device)
    bad = 0
    dist.barrier()
    torch.cuda.synchronize()
    t0 = 0.0
    for it in range(a.warmup + a.iters):
        if it == a.warmup:
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if rank == 0:
            torch.add(base, it, out=buf)
            dist.send(buf, dst=1)
        else:
            buf.fill_(-1)
            dist.recv(buf, src=0)
            # the pattern of this iteration, compared on the GPU
            bad += int((buf != base + it).sum().item())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    if rank == 1:
        us = elapsed / a.iters * 1e6
        gbps = n * 4 / (elapsed / a.iters) / 1e9
        two_ranks.result("torch_sendrecv", bad, bytes=n * 4, iters=a.iters,
                         us_per_iter=f"{us:.1f}", gbps=f"{gbps:.3f}")
    return two_ranks.finish(bad)


if __name__ == "__main__":
    sys.exit(main())
