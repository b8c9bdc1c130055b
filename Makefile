# mmstiff: one-command set-up, demo and tests. Every target creates the environment first.
VENV        ?= .venv
PY          := $(VENV)/bin/python
DEMO_CONFIG ?= configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py
DEMO_DIR    ?= work_dirs/demo
DATA_DIR    ?= data/fashion_mnist
PYTEST_ARGS ?=
LIGHT_VENV  ?= .venv-light
LINT_VENV   ?= .venv-lint
LINT_PATHS  := mmstiff tools tests configs setup.py
# what test-light runs: the library's tests (classification, the ViT family, the diagnostics,
# datasets, registries, packaging); config trainings and tools run in `make test` and
# `make test-slow` only
LIGHT_TESTS ?= tests/models tests/engine tests/analysis tests/datasets tests/test_registry.py \
               tests/test_packaging.py tests/test_package_boundaries.py tests/test_import_layers.py \
               tests/test_dependencies.py tests/test_config_checks.py

export MMSTIFF_VENV := $(abspath $(VENV))

.PHONY: env env-light data demo test test-slow test-light lint format clean-env

## env: create .venv with the pinned OpenMMLab stack (idempotent; seconds when up to date)
env:
	@bash tools/setup_env.sh

## env-light: create $(LIGHT_VENV): the same torch, mmengine and mmpretrain, but mmcv-lite (no
## compiled ops) and no mmdet, as a user who only classifies has (about 2 minutes)
env-light:
	@MMSTIFF_LIGHT_VENV=$(abspath $(LIGHT_VENV)) bash tools/setup_light_env.sh

## data: make the real Fashion-MNIST available in $(DATA_DIR); installs Debian's
## dataset-fashion-mnist with apt-get when it is missing (the tool prints the commands first)
data: env
	@$(PY) tools/prepare_fashion_mnist.py --dst $(DATA_DIR) --install-with-apt

## demo: train and evaluate the demo model on Fashion-MNIST, then print where everything is
demo: data
	@$(PY) tools/demo.py --config $(DEMO_CONFIG) --work-dir $(DEMO_DIR) --data-root $(DATA_DIR)

STUDY          ?=
JOBS           ?= 1
REPRODUCE_ARGS ?=
ifneq ($(filter reproduce,$(MAKECMDGOALS)),)
ifeq ($(STUDY),)
$(error usage: make reproduce STUDY=configs/studies/<name>.py [JOBS=N] [REPRODUCE_ARGS=...])
endif
endif
.PHONY: reproduce
## reproduce: run a reproduction study, resumable, and write docs/results/<study>/:
## make reproduce STUDY=configs/studies/<name>.py [JOBS=2] [REPRODUCE_ARGS=--report-only]
reproduce: env
	@$(PY) tools/reproduce.py $(STUDY) --jobs $(JOBS) $(REPRODUCE_ARGS)

## test: the tests not marked slow (about 12 minutes on 2 CPU cores)
test: env
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

## test-slow: the tests marked slow: config trainings, tools in fresh processes, DDP, the
## install test (about an hour on 2 CPU cores); CI runs it after `make test`
test-slow: env
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

## test-light: in $(LIGHT_VENV), the library's tests not marked det or slow: proves mmstiff needs
## no mmdet there (the slow ones run once, in $(VENV))
test-light: env-light
	$(LIGHT_VENV)/bin/python -m pytest -m "not det and not install and not slow" $(LIGHT_TESTS) \
	    $(PYTEST_ARGS)

$(LINT_VENV)/.ok: requirements/lint.txt
	@test -x $(LINT_VENV)/bin/python || python3 -m venv $(LINT_VENV)
	@$(LINT_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements/lint.txt
	@touch $@

## lint: flake8, isort and yapf as setup.cfg sets them (a small venv of its own, seconds)
lint: $(LINT_VENV)/.ok
	$(LINT_VENV)/bin/flake8 $(LINT_PATHS)
	$(LINT_VENV)/bin/isort --check-only --diff $(LINT_PATHS)
	$(LINT_VENV)/bin/yapf --diff --recursive $(LINT_PATHS)

## format: rewrite the code to the lint settings (isort, then yapf)
format: $(LINT_VENV)/.ok
	$(LINT_VENV)/bin/isort $(LINT_PATHS)
	$(LINT_VENV)/bin/yapf --in-place --recursive $(LINT_PATHS)

clean-env:
	rm -rf $(VENV) $(LIGHT_VENV) $(LINT_VENV)
