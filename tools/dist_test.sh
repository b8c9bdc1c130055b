#!/usr/bin/env bash
# Distributed evaluation with torchrun.
#
#   tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [test.py args...]
#
# Honours NNODES, NODE_RANK, MASTER_ADDR and PORT like tools/dist_train.sh.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 CONFIG CHECKPOINT NUM_PROCS [test.py args...]" >&2
  exit 2
fi
CONFIG=$1
CHECKPOINT=$2
NPROCS=$3
shift 3
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
  "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
