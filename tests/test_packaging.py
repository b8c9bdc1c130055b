"""Packaging: what ``pip install mmstiff`` asks for, and what mmstiff needs at import time.

* ``install_requires`` holds ranges only and nothing a user's OpenMMLab environment owns (torch,
  torchvision, mmcv, setuptools); mmcv comes from the ``mim`` extra, mmdet from ``det``; every
  range admits the version ``requirements/constraints.txt`` pins for ``make env``.
* Classification, the ViT family and the diagnostics import, build and run with mmdet and
  mmcv's compiled ops made unimportable (as under ``mmcv-lite``), and building
  ``mmstiff.DetStepResNet`` there fails with one line naming ``mmstiff[det]``.
* ``pip install`` of mmstiff into a virtualenv that already holds another torch leaves that
  torch alone (marked ``install``: a real pip resolve against PyPI, about a minute).
"""
import importlib.metadata
import importlib.util
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import textwrap

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from script_modules import load_script  # tests/

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: what a user's environment owns: a plain `pip install mmstiff` must never ask for these
USER_OWNED = {'torch', 'torchvision', 'mmcv', 'mmcv-full', 'mmcv-lite', 'setuptools'}
DET_ERROR = 'mmstiff.DetStepResNet needs mmdet, which is not installed: pip install "mmstiff[det]"'


def load_setup():
    return load_script('setup.py', 'mmstiff_setup')  # setup() itself only runs under __main__


def requirements(name):
    return [Requirement(line) for line in load_setup().read_requirements(name)]


def constraint_pins():
    """``{name: version}`` of the ``name==version`` lines of requirements/constraints.txt."""
    pins = {}
    for req in requirements('constraints.txt'):
        exact = [s.version for s in req.specifier if s.operator == '==']
        if exact:
            pins[req.name.lower()] = exact[0]
    return pins


def test_install_requires_are_ranges_that_leave_the_users_stack_alone():
    runtime = requirements('runtime.txt')
    names = {r.name.lower() for r in runtime}
    assert {'mmengine', 'mmpretrain', 'numpy', 'matplotlib'} <= names
    assert not names & (USER_OWNED | {'mmdet'}), names & (USER_OWNED | {'mmdet'})
    for req in runtime:
        assert not any(s.operator in ('==', '===') for s in req.specifier), req
    for name in ('mmengine', 'mmpretrain'):  # OpenMMLab packages: bounded on both sides
        spec = next(r.specifier for r in runtime if r.name == name)
        assert {s.operator for s in spec} == {'>=', '<'}, (name, spec)


def test_extras_hold_detection_and_the_mim_mmcv_range():
    det = {r.name: r for r in requirements('det.txt')}
    assert 'mmdet' in det and det['mmdet'].specifier.contains('3.3.0')
    assert not det['mmdet'].specifier.contains('4.0.0')
    # mmdet 3.x asserts 2.0.0rc4 <= mmcv < 2.2.0 at import: the extra never pairs it with
    # an mmcv it refuses (mmcv-lite is another distribution: pip looks for mmcv itself)
    mmcv = det['mmcv'].specifier
    assert mmcv.contains('2.0.0rc4', prereleases=True) and mmcv.contains('2.1.0')
    assert not mmcv.contains('2.2.0') and not mmcv.contains('2.0.0rc3', prereleases=True)
    mim = {r.name: r.specifier for r in requirements('mminstall.txt')}
    assert set(mim) == {'mmcv', 'mmengine'}
    # mmdet 3.3.0 asserts mmcv < 2.2.0 at import; mmpretrain 1.2.0 asserts mmcv >= 2.0.0
    assert mim['mmcv'].contains('2.1.0') and not mim['mmcv'].contains('2.2.0')
    assert not mim['mmcv'].contains('1.7.2')


@pytest.mark.parametrize('name', ['runtime.txt', 'det.txt', 'mminstall.txt', 'tests.txt'])
def test_every_range_admits_the_version_make_env_pins(name):
    pins = constraint_pins()
    checked = 0
    for req in requirements(name):
        pin = pins.get(req.name.lower())
        if pin is not None:
            assert req.specifier.contains(pin, prereleases=True), (name, str(req), pin)
            checked += 1
    assert checked, f'requirements/{name} names nothing that constraints.txt pins'


def test_this_environment_holds_the_pinned_versions():
    """``make env`` and ``make test-light`` install with ``-c constraints.txt``: whatever of it is
    installed here must be the pinned version (a drift means a stale environment)."""
    if not osp.isfile(osp.join(sys.prefix, '.mmstiff-env-ok')):
        pytest.skip('not an environment made by tools/setup_env.sh or tools/setup_light_env.sh')
    seen = {}
    for name, pin in constraint_pins().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[name] = installed
        assert Version(installed).base_version == Version(pin).base_version, (name, installed)
    assert {'torch', 'mmengine', 'mmpretrain'} <= set(seen), seen


@pytest.mark.det
def test_mmcv_range_is_the_one_mmdet_and_mmpretrain_both_accept():
    """Read the ranges mmdet and mmpretrain declare for mim from their installed metadata."""

    def mim_range(dist):
        for line in importlib.metadata.requires(dist):
            req = Requirement(line)
            if req.name == 'mmcv' and req.marker and req.marker.evaluate({'extra': 'mim'}):
                return req.specifier
        raise AssertionError(f'{dist} declares no mmcv for its mim extra')

    ours = next(r.specifier for r in requirements('mminstall.txt') if r.name == 'mmcv')
    upstream = [mim_range('mmdet'), mim_range('mmpretrain')]
    for version in ('2.0.0', '2.0.1', '2.1.0', '2.1.5', '2.2.0', '2.3.0', '1.7.2'):
        assert ours.contains(version) == all(s.contains(version) for s in upstream), version


# --- mmstiff without mmdet and without mmcv's compiled ops ------------------------------------

#: run first in a fresh interpreter: `mmdet`, `mmcv._ext` and `mmcv.ops` cannot be imported, as
#: where mmdet is not installed and mmcv is mmcv-lite
BLOCK = r'''
import sys

class Missing:
    names = %r

    def find_spec(self, name, path=None, target=None):
        if name in self.names or name.startswith(tuple(n + '.' for n in self.names)):
            raise ModuleNotFoundError(f'No module named {name!r}', name=name)

sys.meta_path.insert(0, Missing())
'''

CLASSIFY = r'''
import glob, json, traceback
import torch
import mmstiff, mmstiff.models, mmstiff.engine, mmstiff.datasets, mmstiff.analysis  # noqa
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmstiff.registry import HOOKS, MODELS as STIFF_MODELS

init_default_scope('mmpretrain')
out = {}
for config, size in [(sorted(glob.glob('configs/stepnet/resnet50-stepnet_*.py'))[0], 64),
                     (sorted(glob.glob('configs/vit/vit-lite-7-p4-stepnet_*cifar10.py'))[0], 32)]:
    model = MODELS.build(Config.fromfile(config).model).eval()
    with torch.no_grad():
        scores = model(torch.rand(2, 3, size, size), mode='tensor')
    out[config] = list(scores.shape)
out['hook'] = type(HOOKS.build(dict(type='mmstiff.StiffnessHook'))).__name__
try:
    STIFF_MODELS.build(dict(type='mmstiff.DetStepResNet', depth=18))
except ImportError as e:  # what a traceback would end with
    out['det_error'] = traceback.format_exception_only(type(e), e)
out['loaded'] = sorted(m for m in sys.modules
                       if m.split('.')[0] == 'mmdet' or m.startswith(('mmcv.ops', 'mmcv._ext')))
print(json.dumps(out))
'''


def run_python(code, timeout=600):
    proc = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_classification_vit_and_diagnostics_need_neither_mmdet_nor_mmcv_ops():
    out = run_python(BLOCK % (('mmdet', 'mmcv._ext', 'mmcv.ops'), ) + CLASSIFY)
    assert out.pop('loaded') == []
    assert out.pop('det_error') == [f'ImportError: {DET_ERROR}\n']  # one line, naming the extra
    assert out.pop('hook') == 'StiffnessHook'
    shapes = sorted(out.values())
    assert shapes == [[2, 10], [2, 1000]], out  # ViT-Lite on CIFAR-10, ResNet-50 on ImageNet


@pytest.mark.slow
@pytest.mark.det
def test_det_error_names_mmcv_lite_when_mmdet_has_no_ops():
    out = run_python(BLOCK % (('mmcv._ext', ), ) + textwrap.dedent('''
        import json
        from mmstiff.registry import MODELS
        try:
            MODELS.build(dict(type='mmstiff.DetStepResNet', depth=18))
        except ImportError as e:
            print(json.dumps(str(e)))
    '''))
    assert 'mmcv-lite' in out and 'mim install "mmcv>=2.0.0rc4,<2.2.0"' in out, out
    assert '\n' not in out


@pytest.mark.slow
@pytest.mark.det
def test_det_step_resnet_placeholder_builds_and_hands_over_to_the_real_class():
    from mmdet.models.backbones import ResNet

    from mmstiff.registry import MODELS
    model = MODELS.build(dict(type='mmstiff.DetStepResNet', depth=18))
    assert isinstance(model, ResNet)
    real = type(model)
    assert real.__module__ == 'mmstiff.models.backbones.det_step_resnet'
    assert MODELS.get('DetStepResNet') is real
    from mmstiff.models.backbones import DetStepResNet
    assert DetStepResNet is real


# --- a real pip install into a virtualenv that already holds a torch ---------------------------


def copy_checkout(dst):
    """Copy the files git would commit (tracked or not ignored) of the checkout to ``dst``."""
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split('\0')
    for name in filter(None, files):
        src = osp.join(REPO, name)
        if osp.isfile(src):
            os.makedirs(osp.join(dst, osp.dirname(name)), exist_ok=True)
            shutil.copy2(src, osp.join(dst, name))
    return dst


@pytest.mark.slow
@pytest.mark.install
def test_pip_install_leaves_the_installed_torch_alone(tmp_path):
    """``pip install /path/to/mmstiff`` into a venv with torch 2.13.0 (CPU): pip resolves
    mmengine, mmpretrain and the rest from the index and keeps that torch; the installed package
    then resolves a ``mmstiff::`` base config from its own ``.mim/configs``."""
    if shutil.which('git') is None:
        pytest.skip('git is needed to list the files of the checkout')
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
    py = str(venv / 'bin' / 'python')

    def pip(*args):
        proc = subprocess.run([py, '-m', 'pip', '--disable-pip-version-check', *args],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    pip('install', '-q', 'torch==2.13.0')
    torch_before = subprocess.run([py, '-c', 'import torch; print(torch.__version__)'],
                                  capture_output=True, text=True, check=True).stdout.strip()
    src = copy_checkout(str(tmp_path / 'src'))
    pip('install', src)
    listed = json.loads(pip('list', '--format=json'))
    versions = {p['name'].lower(): p['version'] for p in listed}
    assert versions['torch'] == torch_before
    assert 'mmstiff' in versions and 'mmpretrain' in versions and 'mmengine' in versions
    assert not {'mmcv', 'mmcv-lite', 'mmdet', 'torchvision'} & set(versions)
    assert not osp.exists(osp.join(src, 'mmstiff', '.mim'))  # the wheel copied, the tree stayed
    # mmcv is the user's to choose, as the README's Install says (import mmstiff names it when
    # it is missing): the classification one
    pip('install', '-q', 'mmcv-lite>=2.0.0,<2.2.0')
    assert subprocess.run([py, '-c', 'import torch; print(torch.__version__)'], capture_output=True,
                          text=True, check=True).stdout.strip() == torch_before

    config = tmp_path / 'mine.py'
    base = sorted(n for n in os.listdir(osp.join(REPO, 'configs', 'stepnet'))
                  if n.endswith('.py'))[0]
    config.write_text(f"_base_ = 'mmstiff::stepnet/{base}'\n")
    code = ('import sys; import mmstiff; from mmengine.config import Config; '
            'cfg = Config.fromfile(sys.argv[1]); print(cfg.model.backbone.type)')
    proc = subprocess.run(
        [py, '-W', 'ignore', '-c', code, str(config)], capture_output=True, text=True,
        cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mmengine.config import Config
    expected = Config.fromfile(osp.join(REPO, 'configs', 'stepnet', base)).model.backbone.type
    assert proc.stdout.strip().splitlines()[-1] == expected
