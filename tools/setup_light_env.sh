#!/usr/bin/env bash
# Create (or refresh) a second, light test environment in .venv-light/: the same torch, mmengine
# and mmpretrain as .venv, but mmcv-lite (mmcv without compiled ops) and no mmdet. It is the
# environment of a user who only classifies: `make test-light` runs the tests not marked `det`
# in it, which proves that mmstiff's classification, ViT and diagnostics need neither.
#
# torch/torchvision install from this machine's local pip index in about a minute; everything
# else is a pure-Python wheel. No mmcv build. Idempotent, like tools/setup_env.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMSTIFF_LIGHT_VENV:-$ROOT/.venv-light}
PYTHON=${PYTHON:-python3}
CONSTRAINTS=$ROOT/requirements/constraints.txt
STAMP=$VENV/.mmstiff-env-ok

log() { printf '[setup_light_env] %s\n' "$*" >&2; }
die() { printf '[setup_light_env] ERROR: %s\n' "$*" >&2; exit 1; }

want=$(cat "$ROOT"/requirements/*.txt "$ROOT/setup.py" "$ROOT/MANIFEST.in" "${BASH_SOURCE[0]}" \
       | sha256sum | cut -c1-16)
if [[ -f $STAMP && $(cat "$STAMP") == "$want" ]] && "$VENV/bin/python" -c 'import mmstiff' 2>/dev/null; then
  log "environment in $VENV is up to date"
  exit 0
fi

if [[ ! -x $VENV/bin/python ]]; then
  log "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

log "installing torch, torchvision, mmcv-lite, mmengine, mmpretrain and mmstiff[tests] (no mmdet)"
"${PIP[@]}" install -q -c "$CONSTRAINTS" torch torchvision setuptools
"${PIP[@]}" install -q -c "$CONSTRAINTS" mmcv-lite -e "$ROOT[tests]"

log "checking the environment"
"$VENV/bin/python" - <<'PY' || die "the light environment is not what it should be (see above); remove $VENV and run again"
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version

import mmcv, mmengine, mmpretrain, torch  # noqa: E401
for dist in ('mmdet', 'mmcv'):  # the light environment must hold neither
    try:
        sys.exit(f'{dist} {version(dist)} is installed; the light environment must not hold it')
    except PackageNotFoundError:
        pass
assert importlib.util.find_spec('mmcv._ext') is None, 'mmcv-lite must come without compiled ops'
import mmstiff.models  # noqa: F401
print(f'torch {torch.__version__}, mmcv-lite {version("mmcv-lite")}, mmengine '
      f'{mmengine.__version__}, mmpretrain {mmpretrain.__version__}, no mmdet')
PY
echo "$want" > "$STAMP"
log "environment ready: $VENV"
