#!/bin/sh
# Per-rank environment for several ranks on one host: each rank gets an
# NCCL host id of its own, so NCCL treats the ranks as separate hosts and
# moves every byte between them through the network plugin (also when the
# ranks share one GPU).  Works under torchrun (LOCAL_RANK) and Open MPI.
#   torchrun --standalone --nproc-per-node 2 --no-python scripts/gpu/rank-env.sh python3 X.py
#   mpirun -np 2 scripts/gpu/rank-env.sh ./sendrecv_perf ...
r=${LOCAL_RANK:-${OMPI_COMM_WORLD_LOCAL_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}}}
NCCL_HOSTID="${RN_HOSTID_PREFIX:-railnet-gpucheck}-rank$r"
export NCCL_HOSTID
exec "$@"
