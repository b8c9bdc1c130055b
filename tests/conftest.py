"""Shared fixtures: tiny datasets in the real on-disk formats, written once per test session."""
import os
import os.path as osp
import re
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


@pytest.fixture(scope='session')
def repo_root():
    return REPO


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory):
    """Lazily written tiny datasets: ``tiny_data('cifar10')`` returns the data_root to use."""
    from mmstiff.testing import write_cifar, write_coco, write_imagenet, write_mnist, write_stl10

    base = tmp_path_factory.mktemp('tiny_data')
    writers = {
        'cifar10': lambda root: write_cifar(root, num_classes=10, num_train=20, num_test=10),
        'cifar100': lambda root: write_cifar(root, num_classes=100, num_train=20, num_test=10),
        'imagenet': lambda root: write_imagenet(root, num_classes=4, per_class=3),
        'coco': lambda root: write_coco(root, num_train=6, num_val=3),
        'mnist': lambda root: write_mnist(root, num_train=40, num_test=20),
        'stl10': lambda root: write_stl10(root, num_train=10, num_test=10),
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
    # the checkout's mmstiff first, also where another copy is installed
    path = [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    full_env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1',
                    PYTHONPATH=os.pathsep.join(path))
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


def det_available():
    """True where mmdet and mmcv's compiled ops are installed (what ``det`` tests need)."""
    import importlib.util
    return (importlib.util.find_spec('mmdet') is not None
            and importlib.util.find_spec('mmcv._ext') is not None)


def builds_on_mmdet(value, _seen=None):
    """Whether a test parameter stands for mmdet: the scope ``'mmdet'``, an ``mmdet::`` config,
    or a config of the repository whose own text or relative ``_base_`` chain uses those."""
    if not isinstance(value, str):
        return False
    if value == 'mmdet' or value.startswith('mmdet::'):
        return True
    path = value if osp.isabs(value) else osp.join(REPO, value)
    if not value.endswith('.py') or not osp.isfile(path):
        return False
    with open(path) as f:
        text = f.read()
    if re.search(r"""['"]mmdet(::|['"])""", text):
        return True
    seen = _seen if _seen is not None else set()
    for base in re.findall(r"""['"](\.{1,2}/[^'"]+\.py)['"]""", text):
        base = osp.normpath(osp.join(osp.dirname(path), base))
        if base not in seen:
            seen.add(base)
            if builds_on_mmdet(base, seen):
                return True
    return False


def pytest_collection_modifyitems(config, items):
    """Mark ``det`` the tests parametrized with mmdet's scope or with a config built on mmdet;
    then, where mmdet or mmcv's ops are missing (a user's mmcv-lite environment), skip every
    ``det`` test saying why. ``make test-light`` deselects them with ``-m "not det"``."""
    for item in items:
        params = getattr(getattr(item, 'callspec', None), 'params', {})
        if any(builds_on_mmdet(v) for v in params.values()):
            item.add_marker(pytest.mark.det)
    if det_available():
        return
    skip = pytest.mark.skip(reason='needs mmdet and mmcv with compiled ops: '
                            'pip install "mmstiff[det]"')
    for item in items:
        if item.get_closest_marker('det') is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def mmpretrain_default_scope():
    """Start every test in the mmpretrain scope, whatever scope an earlier test left current.

    A Runner built from an mmdet config makes ``mmdet`` the current default scope for the rest
    of the process; upstream classes built afterwards by bare name (``ImageClassifier`` and its
    ``LinearClsHead``) would then be looked up in mmdet's registry.
    """
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield
