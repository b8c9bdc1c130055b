# mmstiff: one-command set-up, demo and tests. Every target creates the environment first.
VENV        ?= .venv
PY          := $(VENV)/bin/python
DEMO_CONFIG ?= configs/demo/fashion_mnist_stepnet.py
DEMO_DIR    ?= work_dirs/demo
DATA_DIR    ?= data/fashion_mnist
PYTEST_ARGS ?=

export MMSTIFF_VENV := $(abspath $(VENV))

.PHONY: env data demo test test-fast clean-env

## env: create .venv with the pinned OpenMMLab stack (idempotent; seconds when up to date)
env:
	@bash tools/setup_env.sh

## data: make the real Fashion-MNIST available in $(DATA_DIR)
data: env
	@$(PY) tools/prepare_fashion_mnist.py --dst $(DATA_DIR)

## demo: train and evaluate the demo model on Fashion-MNIST, then print where everything is
demo: data
	@$(PY) tools/demo.py --config $(DEMO_CONFIG) --work-dir $(DEMO_DIR) --data-root $(DATA_DIR)

## test: the whole test suite
test: env
	$(PY) -m pytest $(PYTEST_ARGS)

## test-fast: the test suite without the tests marked slow
test-fast: env
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

clean-env:
	rm -rf $(VENV)
