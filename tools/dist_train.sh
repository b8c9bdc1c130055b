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
CONFIG=$1
NPROCS=$2
shift 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
if [[ -z ${PYTHON:-} ]]; then
  if [[ -z ${VIRTUAL_ENV:-} && -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python; fi
fi
[[ $NPROCS =~ ^[1-9][0-9]*$ ]] || { echo "NUM_PROCS must be a positive integer, got '$NPROCS'" >&2; exit 2; }

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
  --nproc_per_node="$NPROCS" --master_port="$PORT" \
  "$ROOT/tools/train.py" "$CONFIG" --launcher pytorch "$@"
