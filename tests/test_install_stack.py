"""A user's install on mmcv-lite, in a clean virtualenv (marked ``install`` and ``slow``).

One virtualenv for the module, taken step by step as a user would; each test goes on from the
state the one before left, so run them together, in file order
(``pytest -m install tests/test_install_stack.py``):

1. torch 2.14.1 and torchvision 0.29.1 (this machine's local index), ``mmcv-lite==2.2.0`` (what
   pip picks for ``mmcv-lite``), then ``pip install .``: none of them changes, no mmcv or mmdet
   comes along, classification works, and ``python -m mmstiff.demo`` run from a folder outside
   the checkout trains, evaluates and plots on data it writes itself.
2. ``pip install ".[det]"``: the extra asks for ``mmcv>=2.0.0rc4,<2.2.0``, which PyPI has only
   as a source release that does not build here; pip stops before it installs anything, and
   classification keeps working.
3. ``pip install mmdet==3.3.0`` beside mmcv-lite 2.2.0 (what the extra prevents): a plain
   ``import mmpretrain.models`` fails on mmdet's assertion; after ``import mmstiff``, which warns
   in one line, classification works.
4. ``mmcv-lite==2.1.0`` under mmdet: a detection config run with the installed
   ``tools/train.py`` ends in one line naming the package to install.
5. mim: ``pip install openmim`` alone would downgrade setuptools to 60.2 (openxlab pins it);
   ``pip install "setuptools>=77,<82" openmim "openxlab<0.0.12"`` keeps it where torch needs it,
   and ``mim search mmstiff`` reads the installed package's model index.

Times on a 2-core machine: docs/install.md, "Tested combinations".
"""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys

import pytest
from packaging.version import Version
from test_packaging import copy_checkout

pytestmark = [pytest.mark.install, pytest.mark.slow]

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
TORCH = ('torch==2.14.1', 'torchvision==0.29.1')
MMCV_LITE = 'mmcv-lite==2.2.0'
DEMO = 'demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'
DET = 'faster_rcnn/faster-rcnn_r50-stepnet_fpn_1x_coco.py'

#: builds the demo config's model from the installed package's configs and runs it
CLASSIFY = '''
import json, sys, torch
import mmstiff
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
cfg = Config.fromfile(sys.argv[1])
init_default_scope(cfg.default_scope)
model = MODELS.build(cfg.model).eval()
with torch.no_grad():
    print(json.dumps(list(model(torch.rand(2, 1, 28, 28), mode='tensor').shape)))
'''


class Venv:

    def __init__(self, root):
        self.root = root
        subprocess.run([sys.executable, '-m', 'venv', str(root / 'venv')], check=True)
        self.python = str(root / 'venv' / 'bin' / 'python')
        self.env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
        self.env.update(
            OMP_NUM_THREADS='1',
            PATH=os.pathsep.join([str(root / 'venv' / 'bin'),
                                  os.environ.get('PATH', '')]))

    def run(self, *args, cwd=None, check=True, timeout=900):
        proc = subprocess.run(
            list(args), cwd=str(cwd or self.root), env=self.env, capture_output=True, text=True,
            timeout=timeout)
        if check:
            assert proc.returncode == 0, (f'{args} exited {proc.returncode}\n'
                                          f'{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')
        return proc

    def pip(self, *args, check=True):
        return self.run(self.python, '-m', 'pip', '--disable-pip-version-check', *args, check=check)

    def py(self, *args, check=True, cwd=None):
        return self.run(self.python, *args, check=check, cwd=cwd)

    def versions(self):
        listed = json.loads(self.pip('list', '--format=json').stdout)
        return {p['name'].lower(): p['version'] for p in listed}

    def mim_dir(self):
        code = 'import os, mmstiff; print(os.path.dirname(mmstiff.__file__))'
        return osp.join(self.py('-W', 'ignore', '-c', code).stdout.strip(), '.mim')

    def mim_dir_without_import(self):
        """The installed package's ``.mim`` folder, found without importing mmstiff."""
        code = ('import importlib.util, os; '
                "print(os.path.dirname(importlib.util.find_spec('mmstiff').origin))")
        return osp.join(self.py('-c', code).stdout.strip(), '.mim')

    def classify(self):
        config = osp.join(self.mim_dir(), 'configs', DEMO)
        proc = self.py('-c', CLASSIFY, config, cwd=self.root)
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc


@pytest.fixture(scope='module')
def user(tmp_path_factory):
    if shutil.which('git') is None:
        pytest.skip('git is needed to list the files of the checkout')
    root = tmp_path_factory.mktemp('user')
    venv = Venv(root)
    venv.pip('install', '-q', *TORCH)
    venv.pip('install', '-q', MMCV_LITE)
    venv.src = copy_checkout(str(root / 'src'))
    return venv


def test_pip_install_on_mmcv_lite_then_the_first_run_outside_the_checkout(user):
    before = user.versions()
    assert before['mmcv-lite'] == '2.2.0'
    user.pip('install', user.src)
    after = user.versions()
    for name in ('torch', 'torchvision', 'mmcv-lite', 'setuptools'):
        assert after[name] == before[name], name
    assert 'mmstiff' in after and not {'mmcv', 'mmdet'} & set(after)
    assert Version(after['mmpretrain']) >= Version('1.2.0')
    shape, _ = user.classify()
    assert shape == [2, 10]

    first = user.root / 'elsewhere'
    first.mkdir()
    proc = user.py('-m', 'mmstiff.demo', cwd=first)
    work = first / 'work_dirs' / 'demo-quick'
    metrics = json.loads((work / 'test_metrics.json').read_text())
    assert f"accuracy/top1: {metrics['accuracy/top1']:.2f}" in proc.stdout
    assert f"config:      {osp.join(user.mim_dir(), 'configs', DEMO)}" in proc.stdout
    assert (work / 'plots' / 'training' / 'stiffness_nsi.png').read_bytes()[:4] == b'\x89PNG'
    assert sorted(os.listdir(work / 'data')) == [
        't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte', 'train-images-idx3-ubyte',
        'train-labels-idx1-ubyte'
    ]


def test_det_extra_on_mmcv_lite_stops_before_changing_anything(user):
    before = user.versions()
    proc = user.pip('install', f'{user.src}[det]', check=False)
    assert proc.returncode != 0
    assert 'Collecting mmcv<2.2.0,>=2.0.0rc4' in proc.stdout, proc.stdout[-3000:]
    assert user.versions() == before  # nothing installed, nothing removed
    shape, _ = user.classify()
    assert shape == [2, 10]


def test_mmdet_beside_mmcv_lite_2_2_warns_once_and_classification_works(user):
    user.pip('install', '-q', 'mmdet==3.3.0')
    assert user.versions()['mmcv-lite'] == '2.2.0'
    plain = user.py('-c', 'import mmpretrain.models', check=False)
    assert plain.returncode != 0
    assert ('AssertionError: MMCV==2.2.0 is used but incompatible. Please install '
            'mmcv>=2.0.0rc4, <2.2.0.') in plain.stderr
    shape, proc = user.classify()
    assert shape == [2, 10]
    warned = [line for line in proc.stderr.splitlines() if 'DetStackWarning' in line]
    assert len(warned) == 1 and warned[0].endswith(
        'DetStackWarning: mmdet 3.3.0 cannot run with mmcv-lite 2.2.0 (it needs '
        'mmcv>=2.0.0rc4,<2.2.0), so detection is off in this process; pip install '
        '"mmcv-lite>=2.0.0rc4,<2.2.0" to classify, or install mmcv>=2.0.0rc4,<2.2.0 with its '
        'compiled ops for detection (docs/install.md), or pip uninstall mmdet'), warned


def test_detection_with_mmcv_lite_ends_in_one_line(user):
    user.pip('install', '-q', 'mmcv-lite==2.1.0')
    mim = user.mim_dir()
    proc = user.py(
        osp.join(mim, 'tools', 'train.py'), osp.join(mim, 'configs', DET), '--work-dir',
        str(user.root / 'det'), check=False)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr and 'DetStackWarning' not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: this config needs mmdet, and mmdet needs mmcv with its compiled ops, which '
        'mmcv-lite 2.1.0 does not have: pip uninstall mmcv-lite, then install '
        'mmcv>=2.0.0rc4,<2.2.0 with its compiled ops (mim install "mmcv>=2.0.0rc4,<2.2.0", or '
        'build it: docs/install.md)')
    shape, _ = user.classify()
    assert shape == [2, 10]


def test_mim_installs_without_downgrading_setuptools(user):
    report = user.root / 'plain-openmim.json'
    user.pip('install', '--dry-run', '--quiet', '--report', str(report), 'openmim')
    planned = {
        i['metadata']['name'].lower(): i['metadata']['version']
        for i in json.loads(report.read_text())['install']
    }
    assert Version(planned['setuptools']) < Version('77')  # what the docs warn about

    user.pip('install', '-q', 'setuptools>=77,<82', 'openmim', 'openxlab<0.0.12')
    versions = user.versions()
    assert Version('77') <= Version(versions['setuptools']) < Version('82')
    assert versions['torch'].startswith('2.14.1')
    found = user.root / 'search.json'
    user.run(str(user.root / 'venv' / 'bin' / 'mim'), 'search', 'mmstiff', '--json', str(found))
    assert osp.splitext(osp.basename(DEMO))[0] in found.read_text()


@pytest.fixture(scope='module')
def no_torch(tmp_path_factory):
    """A clean virtualenv following the README's Install lines without installing torch:
    mmcv-lite, then mmstiff from the checkout (which declares no torch)."""
    if shutil.which('git') is None:
        pytest.skip('git is needed to list the files of the checkout')
    root = tmp_path_factory.mktemp('no_torch')
    venv = Venv(root)
    venv.pip('install', '-q', 'mmcv-lite>=2.0.0,<2.2.0')
    venv.pip('install', '-q', copy_checkout(str(root / 'src')))
    assert 'torch' not in venv.versions()
    return venv


@pytest.mark.parametrize('command', [
    ('-c', 'import mmstiff'),
    ('-m', 'mmstiff.demo'),
    ('TOOL', 'train.py', 'x.py'),
    ('TOOL', 'analysis/tns.py', 'x.py', 'x.pth'),
])
def test_without_torch_every_entry_point_says_what_to_install(no_torch, command):
    if command[0] == 'TOOL':
        command = (osp.join(no_torch.mim_dir_without_import(), 'tools', command[1]), *command[2:])
    proc = no_torch.py(*command, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith('error: mmstiff needs PyTorch (torch), which is not installed')
    assert 'pip install torch torchvision' in lines[-1]
