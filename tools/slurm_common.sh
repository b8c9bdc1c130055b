# Sourced by slurm_train.sh and slurm_test.sh: reads GPUS, GPUS_PER_NODE, CPUS_PER_TASK and
# SRUN_ARGS, checks them, and sets SRUN_TASKS (the task layout) and SRUN_EXTRA (SRUN_ARGS split
# on spaces, as the upstream scripts do).
check_count() {  # check_count NAME: NAME must hold a positive integer
  if [[ ! ${!1} =~ ^[1-9][0-9]*$ ]]; then
    echo "$1=${!1} is not supported; expected a positive integer" >&2
    exit 2
  fi
}
GPUS=${GPUS:-8}
check_count GPUS
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}  # a single task needs no 8-GPU node
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
check_count GPUS_PER_NODE
check_count CPUS_PER_TASK
if (( GPUS_PER_NODE > GPUS )); then
  echo "GPUS_PER_NODE=$GPUS_PER_NODE is not supported with GPUS=$GPUS; expected at most GPUS" >&2
  exit 2
fi
SRUN_TASKS=(--gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE"
            --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1)
read -r -a SRUN_EXTRA <<< "${SRUN_ARGS:-}"
