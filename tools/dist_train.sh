#!/usr/bin/env bash
# Distributed training with torchrun (PyTorch DDP through MMEngine).
#
#   tools/dist_train.sh CONFIG NUM_PROCS [train.py args...]
#
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR and PORT on every node, as with the upstream
# scripts. On a machine without CUDA the processes use the gloo backend on the CPU.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 CONFIG NUM_PROCS [train.py args...]" >&2
  exit 2
fi
CONFIG=$1 NPROCS=$2
shift 2
exec "$(dirname "${BASH_SOURCE[0]}")/dist_run.sh" train.py "$NPROCS" "$CONFIG" "$@"
