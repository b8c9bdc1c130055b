#!/usr/bin/env bash
# Create (or refresh) the project virtualenv in .venv/ with the exact stack the tests run against.
#
# The versions come from requirements/constraints.txt (`pip install -c`); mmstiff itself declares
# only ranges (setup.py), so this script is the one place that pins. Idempotent: a second run on
# the same machine only checks what is there. The mmcv wheel (built from source with its CPU ops,
# ~10 min on 2 cores) is cached outside the checkout in
# ${MMSTIFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmstiff}, keyed on mmcv, torch and Python
# versions, so a fresh clone on the same machine reuses it and a torch change rebuilds it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMSTIFF_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
CONSTRAINTS=$ROOT/requirements/constraints.txt
CACHE=${MMSTIFF_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mmstiff}
STAMP=$VENV/.mmstiff-env-ok

log() { printf '[setup_env] %s\n' "$*" >&2; }
die() { printf '[setup_env] ERROR: %s\n' "$*" >&2; exit 1; }
pin() {  # pin NAME -> the version NAME==VERSION in constraints.txt
  local v
  v=$(sed -n "s/^$1==\([^ #]*\).*/\1/p" "$CONSTRAINTS")
  [[ -n $v ]] || die "requirements/constraints.txt has no '$1==VERSION' line"
  printf '%s' "$v"
}

TORCH_VERSION=$(pin torch)
TORCHVISION_VERSION=$(pin torchvision)
MMCV_VERSION=$(pin mmcv)

# Hash of everything that decides what the environment should hold.
want=$(cat "$ROOT"/requirements/*.txt "$ROOT/setup.py" "$ROOT/MANIFEST.in" "${BASH_SOURCE[0]}" \
       | sha256sum | cut -c1-16)

if [[ -f $STAMP && $(cat "$STAMP") == "$want" ]] && "$VENV/bin/python" -c 'import mmstiff' 2>/dev/null; then
  log "environment in $VENV is up to date"
  exit 0
fi

"$PYTHON" -c 'import sys; assert sys.version_info[:2] >= (3, 9), sys.version' \
  || die "Python >= 3.9 is required (PYTHON=$PYTHON)"

if [[ ! -x $VENV/bin/python ]]; then
  log "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

have() {  # have PKG VERSION -> true if PKG==VERSION is installed in the venv
  [[ $("$VENV/bin/python" - "$1" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
print(version(sys.argv[1]).split('+')[0])
PY
) == "$2" ]]
}

# 1. torch first: mmcv builds against it without build isolation.
if ! have torch "$TORCH_VERSION" || ! have torchvision "$TORCHVISION_VERSION"; then
  log "installing torch $TORCH_VERSION, torchvision $TORCHVISION_VERSION"
  "${PIP[@]}" install -c "$CONSTRAINTS" torch torchvision
fi
"${PIP[@]}" install -q -c "$CONSTRAINTS" setuptools wheel ninja

# 2. mmcv with ops, from the per-machine cache or built from the sdist.
PYTAG=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
TORCH_FULL=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.replace("+", "_"))')
KEY="mmcv-$MMCV_VERSION-torch$TORCH_FULL-$PYTAG-$(uname -m)"
WHEEL_DIR=$CACHE/wheels/$KEY
if ! have mmcv "$MMCV_VERSION"; then
  if ! compgen -G "$WHEEL_DIR/mmcv-*.whl" >/dev/null; then
    log "building mmcv $MMCV_VERSION with CPU ops against torch $TORCH_FULL (about 10 minutes)"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "${PIP[@]}" download -q --no-deps --no-binary :all: --no-build-isolation -d "$work" "mmcv==$MMCV_VERSION"
    tar -xzf "$work"/mmcv-"$MMCV_VERSION".tar.gz -C "$work"
    src=$work/mmcv-$MMCV_VERSION
    # torch >= 2.14 headers require C++20; mmcv 2.1.0 hard-codes -std=c++17.
    sed -i 's/-std=c++17/-std=c++20/g' "$src/setup.py"
    MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      "${PIP[@]}" wheel --no-deps --no-build-isolation -w "$work/dist" "$src"
    mkdir -p "$WHEEL_DIR"
    cp "$work"/dist/mmcv-*.whl "$WHEEL_DIR"/
  else
    log "reusing cached mmcv wheel from $WHEEL_DIR"
  fi
  "${PIP[@]}" install --no-deps "$WHEEL_DIR"/mmcv-*.whl
fi

# 3. mmstiff itself (editable) with detection, the test tools and the mim extra (whose mmcv
#    range must admit the mmcv above); every version held to constraints.txt.
"${PIP[@]}" install -q -c "$CONSTRAINTS" --no-build-isolation -e "$ROOT[det,tests,mim]"

# 4. Check the result before declaring it good.
log "checking the environment"
"$VENV/bin/python" - <<'PY' || die "the environment is broken (see the traceback above); remove .venv and run 'make env' again"
import torch, mmcv, mmengine, mmdet, mmpretrain
from mmcv.ops import nms, RoIAlign  # compiled ops must be present
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]])
keep = nms(boxes, torch.tensor([0.9, 0.8]), 0.5)[1]
assert keep.tolist() == [0], keep
import mmstiff
from mmstiff.registry import MODELS
print(f'torch {torch.__version__}, mmcv {mmcv.__version__}, mmengine {mmengine.__version__}, '
      f'mmdet {mmdet.__version__}, mmpretrain {mmpretrain.__version__}, mmstiff {mmstiff.__version__}')
PY
"${PIP[@]}" check >&2 || die "pip check found broken requirements (above)"
echo "$want" > "$STAMP"
log "environment ready: $VENV"
