#!/usr/bin/env bash
# Train on a Slurm cluster: srun starts one task per GPU and MMEngine reads its rank, world size
# and master address from the Slurm environment (train.py --launcher slurm).
#
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] [PYTHON=python] \
#     tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args...]
#
# e.g. 16 GPUs on two nodes: GPUS=16 tools/slurm_train.sh gpu stepnet-r50 \
#        configs/stepnet/resnet50-stepnet_8xb32-120e_in1k.py work_dirs/stepnet-r50
set -euo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py args...]" >&2
  exit 2
fi
PARTITION=$1 JOB_NAME=$2 CONFIG=$3 WORK_DIR=$4
shift 4
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$TOOLS/slurm_common.sh"

export PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}"
set -x
exec srun -p "$PARTITION" --job-name="$JOB_NAME" "${SRUN_TASKS[@]}" "${SRUN_EXTRA[@]}" \
  "${PYTHON:-python}" -u "$TOOLS/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm "$@"
