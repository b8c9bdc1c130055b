"""Shared fixtures: tiny datasets in the real on-disk formats, written once per test session."""
import os
import os.path as osp
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
os.environ.setdefault('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')  # as tools/ do for mmengine checkpoints


@pytest.fixture(scope='session')
def repo_root():
    return REPO


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory):
    """Lazily written tiny datasets: ``tiny_data('cifar10')`` returns the data_root to use."""
    from mmstiff.datasets import tiny

    base = tmp_path_factory.mktemp('tiny_data')
    writers = {
        'cifar10': lambda root: tiny.write_cifar(root, num_classes=10, num_train=20, num_test=10),
        'cifar100': lambda root: tiny.write_cifar(root, num_classes=100, num_train=20, num_test=10),
        'imagenet': lambda root: tiny.write_imagenet(root, num_classes=4, per_class=3),
        'coco': lambda root: tiny.write_coco(root, num_train=6, num_val=3),
        'mnist': lambda root: tiny.write_mnist(root, num_train=40, num_test=20),
        'stl10': lambda root: tiny.write_stl10(root, num_train=10, num_test=10),
    }
    written = {}

    def get(kind):
        if kind not in writers:
            raise KeyError(f'no tiny-data writer for {kind!r}; known: {sorted(writers)}')
        if kind not in written:
            root = str(base / kind)
            writers[kind](root)
            written[kind] = root
        return written[kind]

    return get


def _run_tool(*args, env=None, check=True, timeout=900):
    """Run a script of tools/ as a user would: a fresh Python process, from the repo root."""
    import subprocess
    cmd = list(args)
    if cmd[0].endswith('.py'):
        cmd = [sys.executable, osp.join(REPO, cmd[0])] + cmd[1:]
    else:
        cmd = [osp.join(REPO, cmd[0])] + cmd[1:]
    full_env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1')
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f'{" ".join(cmd)} exited {proc.returncode}\n--- stdout\n'
                             f'{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}')
    return proc


@pytest.fixture(scope='session')
def run_tool():
    """``run_tool('tools/train.py', CONFIG, ...)``: run a tool in a fresh process; see _run_tool."""
    return _run_tool
