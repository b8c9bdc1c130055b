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
CONFIG=$1 CHECKPOINT=$2 NPROCS=$3
shift 3
exec "$(dirname "${BASH_SOURCE[0]}")/dist_run.sh" test.py "$NPROCS" "$CONFIG" "$CHECKPOINT" "$@"
