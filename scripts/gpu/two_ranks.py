"""What the torch GPU checks share: a two-rank NCCL process group, the
RESULT line scripts/gpu-check.sh reads, and the orderly end.  Imported by
torch_sendrecv.py and torch_kv.py from this folder."""

import sys

import torch
import torch.distributed as dist


def start(name, gpu):
    """Bind this rank to GPU `gpu` and join the NCCL process group (eager
    init where torch has it).  Returns (device, rank); None, with a message,
    when the world is not two ranks."""
    device = torch.device("cuda", gpu)
    torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend="nccl", device_id=device)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group(backend="nccl")
    world = dist.get_world_size()
    if world != 2:
        print(f"{name}: needs 2 ranks, got {world}", file=sys.stderr)
        return None
    return device, dist.get_rank()


def result(name, bad, **fields):
    """The line for scripts: RESULT name k=v ... verified=0|1 wrong=N."""
    kv = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"RESULT {name} {kv} verified={1 if bad == 0 else 0} wrong={bad}", flush=True)


def finish(bad):
    """Both ranks meet, leave the group; the exit status: 0 when every
    element arrived right."""
    dist.barrier()
    dist.destroy_process_group()
    return 0 if bad == 0 else 1
