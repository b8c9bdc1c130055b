"""Fixtures of the reliability tests: tools/train.py runs of a narrow CIFAR ResNet-18."""
import pytest
from reliability_runs import FAULT_ENV, write_config


@pytest.fixture
def train(run_tool):
    """``train(config, work_dir, *flags, check=True)``: run tools/train.py in a fresh process."""

    def run(config, work_dir, *flags, check=True, env=None):
        return run_tool('tools/train.py', str(config), '--work-dir', str(work_dir), *flags,
                        check=check, env=dict(FAULT_ENV, **(env or {})))

    return run


@pytest.fixture(scope='session')
def trained_run(tiny_data, tmp_path_factory, run_tool):
    """A finished 4-iteration run: ``(config, work_dir)`` with iter_2.pth and iter_4.pth.

    Tests copy the work dir (:func:`copy_run`) before changing it.
    """
    base = tmp_path_factory.mktemp('trained')
    config = write_config(base / 'config.py', tiny_data('cifar10'), train_cfg=dict(max_iters=4))
    run_tool('tools/train.py', config, '--work-dir', str(base / 'work'), env=FAULT_ENV)
    return config, base / 'work'
