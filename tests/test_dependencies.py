"""An mmdet that cannot run beside the installed mmcv, and detection without mmcv's ops.

* ``import mmstiff`` with an mmdet whose asserted mmcv range excludes the installed mmcv warns
  once, in one line naming both packages, their versions and the fix, and makes ``import mmdet``
  an ``ImportError``, so that ``import mmpretrain.models`` (which imports mmdet and catches only
  ``ImportError``) and classification keep working; checked in fresh interpreters with a
  stand-in mmdet first on ``PYTHONPATH`` whose ``__init__`` asserts like mmdet 3.3.0's.
* :func:`mmstiff.dependencies.missing_dependency` finds the ``ImportError`` of a detection
  import through the exception's causes and names the package to install.
* ``tools/train.py`` and ``tools/test.py`` on a detection config, with mmcv's compiled ops made
  unimportable (as under mmcv-lite), end in one ``error:`` line, with no traceback.
"""
import importlib.metadata
import json
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from mmstiff.dependencies import (MMCV_OPS_HINT, UnusablePackageError, installed_mmcv,
                                  missing_dependency)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
DET_CONFIG = osp.join(REPO, 'configs', 'faster_rcnn', 'faster-rcnn_r50-stepnet_fpn_1x_coco.py')

#: mmdet 3.3.0's own check, with the range given to the stand-in
FAKE_MMDET = '''
import mmcv
from mmengine.utils import digit_version

__version__ = '{version}'
mmcv_minimum_version = '{low}'
mmcv_maximum_version = '{high}'
mmcv_version = digit_version(mmcv.__version__)
assert (mmcv_version >= digit_version(mmcv_minimum_version)
        and mmcv_version < digit_version(mmcv_maximum_version)), \\
    f'MMCV=={{mmcv.__version__}} is used but incompatible. ' \\
    f'Please install mmcv>={{mmcv_minimum_version}}, <{{mmcv_maximum_version}}.'
'''


def fake_mmdet(root, version, low, high):
    """An ``mmdet`` package (``__init__`` only) and its dist-info under ``root``."""
    os.makedirs(osp.join(root, 'mmdet'))
    with open(osp.join(root, 'mmdet', '__init__.py'), 'w') as f:
        f.write(FAKE_MMDET.format(version=version, low=low, high=high))
    info = osp.join(root, f'mmdet-{version}.dist-info')
    os.makedirs(info)
    with open(osp.join(info, 'METADATA'), 'w') as f:
        f.write(f'Metadata-Version: 2.1\nName: mmdet\nVersion: {version}\n')
    return str(root)


def run_fresh(code, site=None):
    """Run ``code`` in a fresh interpreter, ``site`` first on its path; return the process."""
    path = [p for p in (site, REPO, os.environ.get('PYTHONPATH')) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def mmcv_now():
    dist, version = installed_mmcv()
    return dist, version


CLASSIFY = '''
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import mmstiff
from mmstiff.dependencies import DetStackWarning
out = dict(warnings=[str(w.message) for w in caught if w.category is DetStackWarning])
import importlib.util
out['found'] = importlib.util.find_spec('mmdet') is not None  # still looks installed
try:
    import mmdet
    out['mmdet'] = 'imported'
except ImportError as e:
    out['mmdet'] = f'{type(e).__name__}: {e}'
import torch
import mmpretrain.models  # imports mmdet.models when mmdet can be imported
from mmengine.registry import MODELS, init_default_scope
init_default_scope('mmpretrain')
model = MODELS.build(dict(type='ImageClassifier', backbone=dict(type='mmstiff.StepResNet',
                     depth=18), neck=dict(type='GlobalAveragePooling'),
                     head=dict(type='LinearClsHead', num_classes=3, in_channels=512)))
out['scores'] = list(model.eval()(torch.rand(2, 3, 32, 32), mode='tensor').shape)
from mmstiff.registry import MODELS as STIFF
try:
    STIFF.build(dict(type='mmstiff.DetStepResNet', depth=18))
except ImportError as e:
    out['det'] = str(e)
print(json.dumps(out))
'''


@pytest.mark.slow
def test_mmdet_refusing_the_mmcv_warns_once_and_classification_keeps_working(tmp_path):
    dist, version = mmcv_now()
    high = version  # the installed mmcv is just outside the stand-in mmdet's range
    site = fake_mmdet(tmp_path, '3.3.0', '2.0.0rc4', high)
    # without mmstiff, the stand-in breaks mmpretrain as the real mmdet 3.3.0 does
    plain = run_fresh('import mmpretrain.models', site)
    assert plain.returncode != 0
    assert (f'AssertionError: MMCV=={version} is used but incompatible. Please install '
            f'mmcv>=2.0.0rc4, <{high}.') in plain.stderr

    proc = run_fresh(CLASSIFY, site)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    line = (f'mmdet 3.3.0 cannot run with {dist} {version} (it needs mmcv>=2.0.0rc4,<{high}), '
            'so detection is off in this process; ')
    assert len(out['warnings']) == 1 and out['warnings'][0].startswith(line), out['warnings']
    assert '\n' not in out['warnings'][0] and 'pip uninstall mmdet' in out['warnings'][0]
    assert f'install mmcv>=2.0.0rc4,<{high} with its compiled ops' in out['warnings'][0]
    assert out['mmdet'] == f"UnusablePackageError: {out['warnings'][0]}"
    assert out['found'] is True
    assert out['scores'] == [2, 3]
    assert out['det'] == f"mmstiff.DetStepResNet needs mmdet, but {out['warnings'][0]}"


def test_mmcv_lite_fix_is_named_for_mmcv_lite(tmp_path):
    """With mmcv-lite installed, the line also says which mmcv-lite keeps classification."""
    (tmp_path / 'mmcv').mkdir()
    (tmp_path / 'mmcv' / '__init__.py').write_text("from .version import __version__\n")
    (tmp_path / 'mmcv' / 'version.py').write_text("__version__ = '2.2.0'\n")
    info = tmp_path / 'mmcv_lite-2.2.0.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: mmcv-lite\nVersion: 2.2.0\n')
    fake_mmdet(tmp_path, '3.3.0', '2.0.0rc4', '2.2.0')
    proc = run_fresh(
        '''
        import json
        from mmstiff.dependencies import det_stack_conflict, installed_mmcv, has_compiled_ops
        print(json.dumps([installed_mmcv(), has_compiled_ops(), det_stack_conflict()]))
    ''', str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    found, ops, line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == ['mmcv-lite', '2.2.0'] and ops is False
    assert line == ('mmdet 3.3.0 cannot run with mmcv-lite 2.2.0 (it needs mmcv>=2.0.0rc4,<2.2.0), '
                    'so detection is off in this process; pip install "mmcv-lite>=2.0.0rc4,<2.2.0" '
                    'to classify, or install mmcv>=2.0.0rc4,<2.2.0 with its compiled ops for '
                    'detection (docs/install.md), or pip uninstall mmdet')


@pytest.mark.slow
def test_mmdet_in_range_is_left_alone(tmp_path):
    _, version = mmcv_now()
    site = fake_mmdet(tmp_path, '3.3.0', '2.0.0rc4', '9.0.0')
    proc = run_fresh(
        '''
        import json, warnings
        warnings.simplefilter('error', UserWarning)
        import mmstiff, mmdet
        from mmstiff.dependencies import det_stack_conflict
        print(json.dumps([mmdet.__file__, det_stack_conflict()]))
    ''', site)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, conflict = json.loads(proc.stdout.strip().splitlines()[-1])
    assert where == osp.join(site, 'mmdet', '__init__.py') and conflict is None


def test_missing_dependency_reads_the_import_error_and_its_causes():
    dist, version = installed_mmcv() or ('mmcv', '?')
    ops = ModuleNotFoundError("No module named 'mmcv._ext'", name='mmcv._ext')
    assert missing_dependency(ops, 'this config') == (
        'this config needs mmdet, and mmdet needs mmcv with its compiled ops, which '
        f'{dist} {version} does not have: {MMCV_OPS_HINT}')
    assert 'pip uninstall mmcv-lite' in MMCV_OPS_HINT
    no_mmdet = ModuleNotFoundError("No module named 'mmdet'", name='mmdet.models')
    assert missing_dependency(no_mmdet, 'mmstiff.CocoDataset') == (
        'mmstiff.CocoDataset needs mmdet, which is not installed: pip install "mmstiff[det]"')
    unusable = UnusablePackageError('mmdet 3.3.0 cannot run with mmcv 2.2.0', name='mmdet')
    assert missing_dependency(unusable, 'X') == 'X needs mmdet, but mmdet 3.3.0 cannot run ' \
        'with mmcv 2.2.0'
    # found as the cause of a wrapping error (MMEngine re-raises some errors), never for others
    try:
        try:
            raise ops
        except ImportError as inner:
            raise RuntimeError('while building') from inner
    except RuntimeError as outer:
        assert missing_dependency(outer, 'this config').startswith('this config needs mmdet')
    assert missing_dependency(
        ModuleNotFoundError('mmdet is not installed, please install '
                            'mmdet manually'),
        'Y') == ('Y needs mmdet, which is not installed: pip install "mmstiff[det]"')
    assert missing_dependency(ModuleNotFoundError('x', name='scipy')) is None
    assert missing_dependency(ValueError('mmdet')) is None


#: first on the path of the tool's process: mmcv without its compiled ops, as under mmcv-lite
NO_OPS_SITE = '''
import sys


class NoOps:
    def find_spec(self, name, path=None, target=None):
        if name in ('mmcv._ext', 'mmcv.ops') or name.startswith('mmcv.ops.'):
            raise ModuleNotFoundError(f'No module named {name!r}', name=name)


sys.meta_path.insert(0, NoOps())
'''


@pytest.mark.slow
@pytest.mark.parametrize('tool', ['train.py', 'test.py'])
def test_detection_config_without_mmcv_ops_ends_in_one_line(tool, tmp_path):
    (tmp_path / 'site').mkdir()
    (tmp_path / 'site' / 'sitecustomize.py').write_text(NO_OPS_SITE)
    args = [DET_CONFIG, '--work-dir', str(tmp_path / 'work')]
    if tool == 'test.py':
        checkpoint = tmp_path / 'model.pth'
        checkpoint.write_bytes(b'never read')
        args.insert(1, str(checkpoint))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / 'site'), REPO]),
               OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, osp.join(REPO, 'tools', tool), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-4000:]
    last = proc.stderr.strip().splitlines()[-1]
    try:
        importlib.metadata.version('mmdet')
    except importlib.metadata.PackageNotFoundError:
        # the config's `mmdet::` base is where it stops, before the Runner
        assert last == (f'error: config file {DET_CONFIG!r} needs mmdet, which is not '
                        'installed: pip install "mmstiff[det]"'), last
    else:
        dist, version = installed_mmcv()
        assert last == ('error: this config needs mmdet, and mmdet needs mmcv with its compiled '
                        f'ops, which {dist} {version} does not have: {MMCV_OPS_HINT}'), last
    assert not (tmp_path / 'work').exists() or not any((tmp_path / 'work').rglob('*.pth'))
