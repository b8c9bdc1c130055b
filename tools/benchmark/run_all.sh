#!/usr/bin/env bash
# Every benchmark, and the tests marked `cuda`, in one call; each writes its output to a folder.
#
#   tools/benchmark/run_all.sh [--device cuda|cpu] [--out DIR] [--tiny] [--skip-tests]
#                              [--skip-compiled] [--only STEP[,STEP...]]
#
# --device cuda (default when a GPU is present): GPU-sized settings: ResNet-50 at 224x224
#   batch 64 (StepNet and SE against plain; the reference and the fused step, in fp32, bf16 AMP
#   and fp16 AMP channels-last), the operator and kernel counts of one block's step, where the
#   step's time goes (device busy time against wall time, the kernels each adaptor adds; fp32
#   and bf16), the host time of one launch of each pass of the fused step (PyTorch's passes,
#   Triton's kernels and their launchers alone), the device time and bandwidth of each
#   full-size pass of the fused step at ResNet-50's and ViT-S's shapes (fp32 and bf16, and a
#   sweep of the Triton kernels' tiles; on the CPU the PyTorch passes only), DeiT-S batch 128
#   (AttnScale, FeatScale),
#   AlterNet-50 against ResNet-50 at 224x224 batch 64, the diagnostics hooks on ResNet-50
#   (batch 64) and on DeiT-S (batch 128),
#   the data-parallel cost of the hooks where 2 GPUs are present, the same ResNet-50 and DeiT-S
#   comparisons with torch.compile-d models (ResNet-50: the reference and the fused step, each
#   compiled; DeiT-S: AttnScale and FeatScale), the ResNet-50 comparison compiled with CUDA
#   graphs (mode reduce-overhead; the reference and the fused step) and the hooks at their defaults
#   on a compiled ResNet-50, then `pytest -m cuda tests/cuda`. On one H200 the two fp32 and
#   bf16 ResNet-50 comparisons take about 3 minutes, the CUDA tests more than 5.
# --device cpu: the same on the CPU at the benchmarks' CPU defaults (long: hours on 2 cores);
#   with --tiny, toy sizes that only check that every step runs (a minute or two; the compiled
#   steps add a few minutes of compilation).
# --skip-compiled: leave out the torch.compile steps (their compilation takes a few minutes).
# --only STEP,...: run only these steps, in this order (names as in summary.txt; a name that
#   is not a step of the device is refused before anything runs).
# --out DIR: where the outputs go (default work_dirs/benchmarks/<device>-<date>-<time>); one
#   <step>.txt per step and summary.txt with each step's exit status and duration.
# The steps run one after another; a failing step is reported and the others still run; the
# exit status is that of the first failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON=${PYTHON:-python}
# this checkout's mmstiff first, installed or not (as tools/dist_run.sh does)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

device=
out=
tiny=0
tests=1
compiled=1
only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=${2:?--device needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --tiny) tiny=1; shift ;;
    --skip-tests) tests=0; shift ;;
    --skip-compiled) compiled=0; shift ;;
    --only) only=${2:?--only needs a value}; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())') || exit 1
if [[ -z $device ]]; then
  device=$([[ $gpus -gt 0 ]] && echo cuda || echo cpu)
fi
if [[ $device != cuda && $device != cpu ]]; then
  echo "error: --device $device is not supported; expected cuda or cpu" >&2
  exit 2
fi
if [[ $device == cuda && $gpus -eq 0 ]]; then
  echo "error: --device cuda was given but torch sees no GPU" >&2
  exit 2
fi
bench=tools/benchmark
if [[ $tiny -eq 1 ]]; then
  resnet=(--device "$device" --batch-size 2 --img-size 32 --repeats 1 --iters 1 --warmup 1)
  profile=("${resnet[@]}")
  launch=(--device "$device" --calls 5 --repeats 1 --warmup 1)
  kernels=(--device "$device" --batch-size 2 --base-channels 2 --img-size 32 --calls 1
           --repeats 1)
  vit=(--device "$device" --batch-size 2 --img-size 32 --repeats 1 --iters 1)
  alternet=(--device "$device" --stem cifar --batch-size 2 --repeats 1 --iters 1 --warmup 1)
  hooks_common=(--device "$device" --batch-size 2 --repeats 1 --warmup 1 --log-interval 2)
  hooks_resnet=(--arch resnet --depth 18 --base-channels 8 --img-size 32)
  hooks_vit=(--arch vit --depth 2 --embed-dims 12 --img-size 16)
  at1=(--only @1 --iters 2)
  defaults=(--only both --iters 100 --log-interval 10)
  ddp=(--base-channels 4 --batch-size 2 --img-size 16 --iters 100 --repeats 1 --warmup 1)
elif [[ $device == cuda ]]; then
  resnet=(--device cuda --batch-size 64 --img-size 224 --repeats 7 --iters 10)
  profile=(--device cuda --batch-size 64 --img-size 224 --repeats 3 --iters 5)
  launch=(--device cuda)
  kernels=(--device cuda)
  vit=(--device cuda --batch-size 128 --img-size 224 --repeats 5 --iters 10)
  alternet=(--device cuda --batch-size 64 --img-size 224 --repeats 5 --iters 10 --warmup 2)
  hooks_common=(--device cuda --repeats 3 --busy)
  hooks_resnet=(--arch resnet --depth 50 --img-size 224 --batch-size 64)
  hooks_vit=(--arch vit --depth 12 --embed-dims 384 --img-size 224 --patch-size 16
             --batch-size 128)
  at1=(--only @1 --iters 20)
  defaults=(--only both --iters 100)
  ddp=(--device cuda --base-channels 64 --batch-size 128 --iters 100 --repeats 3)
else
  resnet=(--device cpu)
  profile=(--device cpu)
  launch=(--device cpu)
  kernels=(--device cpu --batch-size 8 --img-size 112)
  vit=(--device cpu)
  alternet=(--device cpu)
  hooks_common=(--device cpu --repeats 3)
  hooks_resnet=(--depth 101 --base-channels 16)
  hooks_vit=(--arch vit)
  at1=(--only @1 --iters 20)
  defaults=(--only both --iters 100)
  ddp=()
fi

# add NAME COMMAND...: NAME is a step of this run, COMMAND its command; skip NAME REASON: a
# step that this machine cannot run
names=()
declare -A commands=() skipped=()
add() {
  local name=$1
  shift
  names+=("$name")
  commands[$name]=$(printf '%q ' "$@")
}
skip() {
  names+=("$1")
  skipped[$1]=$2
}

# on CUDA also the fused step on its PyTorch passes (the fold without Triton's launches); on
# the CPU the fused rows are those passes already
fused_rows=all
if [[ $device == cuda ]]; then
  fused_rows=every
fi
add bench_step_resnet "$PYTHON" $bench/bench_step_resnet.py "${resnet[@]}" --fused $fused_rows \
  --se-units
if [[ $device == cuda ]]; then
  add bench_step_resnet_bf16 "$PYTHON" $bench/bench_step_resnet.py "${resnet[@]}" \
    --fused all --amp bf16
  add bench_step_resnet_fp16_cl "$PYTHON" $bench/bench_step_resnet.py "${resnet[@]}" \
    --fused both --amp fp16 --channels-last
fi
add count_step_kernels "$PYTHON" $bench/count_step_kernels.py --device "$device"
add count_attention_kernels "$PYTHON" $bench/count_attention_kernels.py --device "$device"
add profile_step "$PYTHON" $bench/profile_step.py "${profile[@]}"
add bench_launch "$PYTHON" $bench/bench_launch.py "${launch[@]}"
add bench_kernels "$PYTHON" $bench/bench_kernels.py "${kernels[@]}"
if [[ $device == cuda ]]; then
  add bench_kernels_bf16 "$PYTHON" $bench/bench_kernels.py "${kernels[@]}" --dtype bf16
  # the tiles a change of state_blocks would pick from, and the warps a program of tile_warps
  # (a few minutes: each tile and warp count compiles anew)
  add bench_kernels_tiles "$PYTHON" $bench/bench_kernels.py "${kernels[@]}" --dtype bf16 \
    --repeats 3 --tiles 64x64,128x32,256x16,64x16,256x8,512x4,1024x4 --warps 4,16
fi
if [[ $device == cuda ]]; then
  add profile_step_bf16 "$PYTHON" $bench/profile_step.py "${profile[@]}" --amp bf16
fi
add bench_vit "$PYTHON" $bench/bench_vit.py "${vit[@]}" --fused both
add bench_vit_attention "$PYTHON" $bench/bench_vit.py "${vit[@]}" --fused both --scope attention \
  --variants attnscale featscale both
add bench_alternet "$PYTHON" $bench/bench_alternet.py "${alternet[@]}"
add hooks_resnet_at1 "$PYTHON" $bench/bench_hooks.py "${hooks_common[@]}" "${hooks_resnet[@]}" \
  "${at1[@]}"
add hooks_resnet_defaults "$PYTHON" $bench/bench_hooks.py "${hooks_common[@]}" \
  "${hooks_resnet[@]}" "${defaults[@]}"
add hooks_vit_at1 "$PYTHON" $bench/bench_hooks.py "${hooks_common[@]}" "${hooks_vit[@]}" \
  "${at1[@]}"
add hooks_vit_defaults "$PYTHON" $bench/bench_hooks.py "${hooks_common[@]}" "${hooks_vit[@]}" \
  "${defaults[@]}"
if [[ $compiled -eq 1 ]]; then
  add bench_step_resnet_compiled "$PYTHON" $bench/bench_step_resnet.py "${resnet[@]}" \
    --compile --fused both
  if [[ $device == cuda ]]; then
    add bench_step_resnet_cudagraphs "$PYTHON" $bench/bench_step_resnet.py "${resnet[@]}" \
      --compile --compile-mode reduce-overhead --fused both
  fi
  add bench_vit_compiled "$PYTHON" $bench/bench_vit.py "${vit[@]}" --compile \
    --variants attnscale featscale
  add hooks_resnet_defaults_compiled "$PYTHON" $bench/bench_hooks.py "${hooks_common[@]}" \
    "${hooks_resnet[@]}" "${defaults[@]}" --compile
fi
if [[ $device == cpu || $gpus -ge 2 ]]; then
  add bench_ddp "$PYTHON" $bench/bench_ddp.py "${ddp[@]}"
else
  skip bench_ddp "needs 2 GPUs, $gpus found"
fi
if [[ $tests -eq 1 ]]; then
  # the fused step's kernels and a ResNet-50 on both CUDA paths against the CPU reference,
  # the hooks' kernels against the CPU's operators, and the folded AttnScale and FeatScale
  # under autocast (about a tenth of the CUDA tests: what a short GPU session checks first)
  step_tests='takes_the_triton or triton_step_equals or equal_the_cpu_reference'
  step_tests+=' or _kernel_on_cuda or folded_scales'
  add tests_cuda_step "$PYTHON" -m pytest tests/cuda/test_fused_step_cuda.py \
    tests/cuda/test_hooks.py tests/cuda/test_layers.py -q -p no:cacheprovider --durations=5 \
    -k "$step_tests"
  add tests_cuda "$PYTHON" -m pytest tests/cuda -q -p no:cacheprovider
fi

if [[ -n $only ]]; then
  IFS=, read -ra chosen <<< "$only"
  for name in "${chosen[@]}"; do
    if [[ ! " ${names[*]} " == *" $name "* ]]; then
      echo "error: --only $name is not a step of --device $device here; expected one of:" \
        "${names[*]}" >&2
      exit 2
    fi
  done
else
  chosen=("${names[@]}")
fi

out=${out:-work_dirs/benchmarks/$device-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || exit 1
summary=$out/summary.txt
: > "$summary"
status=0

# step NAME COMMAND...: run it, its output to $out/NAME.txt (and the console), timed
step() {
  local name=$1 start rc
  shift
  echo "== $name: $*" | tee "$out/$name.txt"
  start=$(date +%s)
  "$@" 2>&1 | tee -a "$out/$name.txt"
  rc=${PIPESTATUS[0]}
  printf '%-24s exit %-3s %5ss  %s\n' "$name" "$rc" "$(( $(date +%s) - start ))" "$*" \
    | tee -a "$summary"
  if [[ $rc -ne 0 && $status -eq 0 ]]; then status=$rc; fi
}

for name in "${chosen[@]}"; do
  if [[ -n ${skipped[$name]:-} ]]; then
    printf '%-24s skipped: %s\n' "$name" "${skipped[$name]}" | tee -a "$summary"
  else
    eval "step $name ${commands[$name]}"
  fi
done
echo "outputs in $out"
cat "$summary"
exit $status
