#!/usr/bin/env bash
# Shared torchrun launcher of dist_train.sh and dist_test.sh:
#
#   tools/dist_run.sh TOOL.py NUM_PROCS [tool args...]
#
# NNODES, NODE_RANK, MASTER_ADDR and PORT as in the upstream scripts; PYTHON picks the
# interpreter (default: the project's .venv when no virtualenv is active).
set -euo pipefail
TOOL=$1 NPROCS=$2
shift 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $NPROCS =~ ^[1-9][0-9]*$ ]] || { echo "NUM_PROCS must be a positive integer, got '$NPROCS'" >&2; exit 2; }
if [[ -z ${PYTHON:-} ]]; then
  if [[ -z ${VIRTUAL_ENV:-} && -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python; fi
fi
# the master's port must be free: torchrun would fail with a DistNetworkError traceback
if [[ ${NODE_RANK:-0} == 0 ]]; then
  "$PYTHON" "$ROOT/tools/misc/check_port.py" "${MASTER_ADDR:-127.0.0.1}" "${PORT:-29500}" || exit 2
fi
# a user's mistake ends in rank 0's one error: line, without torchrun's report after it
# (tools/misc/torchrun_report.py; any other failure keeps the report)
set +e
{ PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --nproc_per_node="$NPROCS" --master_port="${PORT:-29500}" \
    "$ROOT/tools/$TOOL" "$@" --launcher pytorch 2>&1 1>&3 3>&- \
  | "$PYTHON" "$ROOT/tools/misc/torchrun_report.py" >&2; } 3>&1
exit "${PIPESTATUS[0]}"
