"""A KV-cache transfer in torch: one tensor per layer per request, prefill
rank 0 -> decode rank 1 over NCCL, as disaggregated inference moves it.

  ungrouped: a send per layer tensor, the stream synchronized after each
             (vLLM's P2P NCCL connector does this per tensor);
  grouped:   every layer of the request in one batch_isend_irecv (one NCCL
             group).

Sizes per layer and rank: 70b-tp8 (Llama-3-70B at TP8) 512 B per token over
80 layers; 8b (Llama-3-8B at TP1) 4 KiB per token over 32 layers.  Every
byte is checked on the receiving GPU.  Rank 1 prints, per mode:

  RESULT torch_kv model=70b-tp8 tokens=12288 mode=ungrouped layers=80 request_bytes=...
         requests=3 p50_ms=... min_ms=... gbps=... verified=1
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import two_ranks

MODELS = {"70b-tp8": (80, 512), "8b": (32, 4096)}  # layers, bytes per token per layer


def pattern(layer, request, n, device):
    """int16 words unique to (layer, request, index); sent as bfloat16 bytes."""
    idx = torch.arange(n, dtype=torch.int32, device=device)
    return ((idx * 31 + layer * 7919 + request * 104729) % 65521 - 32760).to(torch.int16)


def transfer(rank, mode, tensors):
    """One request: every layer tensor from rank 0 to rank 1."""
    if mode == "grouped":
        ops = [dist.P2POp(dist.isend if rank == 0 else dist.irecv, t, 1 - rank) for t in tensors]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        torch.cuda.synchronize()
    else:
        for t in tensors:
            if rank == 0:
                dist.send(t, dst=1)
            else:
                dist.recv(t, src=0)
            torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="70b-tp8")
    ap.add_argument("--tokens", type=int, default=12288)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--modes", default="ungrouped,grouped")
    ap.add_argument("--gpu", type=int, default=int(os.environ.get("RN_GPU", "0")))
    a = ap.parse_args()

    started = two_ranks.start("torch_kv", a.gpu)
    if started is None:
        return 2
    device, rank = started
    layers, bpt = MODELS[a.model]
    n = a.tokens * bpt // 2  # int16 words per layer tensor
    tensors = [torch.empty(n, dtype=torch.int16, device=device) for _ in range(layers)]
    wire = [t.view(torch.bfloat16) for t in tensors]  # what a KV cache holds
    bad = 0
    for mode in a.modes.split(","):
        times = []
        for req in range(a.requests + 1):  # request 0 warms up (communicator setup)
            if rank == 0:
                for layer, t in enumerate(tensors):
                    t.copy_(pattern(layer, req, n, device))
            else:
                for t in tensors:
                    t.fill_(0)
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.perf_counter()
            transfer(rank, mode, wire)
            dt = time.perf_counter() - t0
            if rank == 1:
                for layer, t in enumerate(tensors):
                    bad += int((t != pattern(layer, req, n, device)).sum().item())
                if req > 0:
                    times.append(dt)
        if rank == 1:
            times.sort()
            p50 = times[len(times) // 2]
            total = n * 2 * layers
            two_ranks.result("torch_kv", bad, model=a.model, tokens=a.tokens, mode=mode,
                             layers=layers, request_bytes=total, requests=a.requests,
                             p50_ms=f"{p50 * 1e3:.2f}", min_ms=f"{times[0] * 1e3:.2f}",
                             gbps=f"{total / p50 / 1e9:.3f}")
    return two_ranks.finish(bad)


if __name__ == "__main__":
    sys.exit(main())
