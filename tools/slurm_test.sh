#!/usr/bin/env bash
# Evaluate a checkpoint on a Slurm cluster, one task per GPU (test.py --launcher slurm).
#
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] [PYTHON=python] \
#     tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]
set -euo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]" >&2
  exit 2
fi
PARTITION=$1 JOB_NAME=$2 CONFIG=$3 CHECKPOINT=$4
shift 4
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$TOOLS/slurm_common.sh"

export PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}"
set -x
exec srun -p "$PARTITION" --job-name="$JOB_NAME" "${SRUN_TASKS[@]}" "${SRUN_EXTRA[@]}" \
  "${PYTHON:-python}" -u "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher=slurm "$@"
