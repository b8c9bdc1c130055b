"""Block discovery: blocks declare themselves through their class, upstream ones are known by
name; analysis imports no model module."""
import ast
import importlib
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmstiff.analysis.blocks import UPSTREAM_GATES
from mmstiff.analysis.zoo import zoo_specs

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ANALYSIS = osp.join(REPO, 'mmstiff', 'analysis')

SCRIPT = r'''
import json
import sys

import mmstiff.analysis as analysis

before = sorted(m for m in sys.modules if m.startswith('mmstiff.models'))
from mmdet.models.backbones.resnet import Bottleneck as DetBottleneck
from mmdet.models.backbones.swin import SwinBlock as DetSwinBlock
from mmpretrain.models.backbones.resnet import BasicBlock
from mmpretrain.models.backbones.swin_transformer import SwinBlock
from mmpretrain.models.backbones.vision_transformer import TransformerEncoderLayer
from mmpretrain.models.backbones.seresnet import SEBottleneck

kinds = {cls.__name__ + '@' + cls.__module__.split('.')[0]: analysis.block_kind(
    cls.__new__(cls)) for cls in (BasicBlock, SEBottleneck, TransformerEncoderLayer, SwinBlock,
                                  DetBottleneck, DetSwinBlock)}
from mmstiff.models.backbones.preact_resnet import PreActBottleneck
from mmstiff.models.backbones.step_resnet import StepBottleneck
kinds['PreActBottleneck'] = analysis.block_kind(PreActBottleneck.__new__(PreActBottleneck))
kinds['StepBottleneck'] = analysis.block_kind(StepBottleneck.__new__(StepBottleneck))
print(json.dumps(dict(before=before, kinds=kinds)))
'''


@pytest.mark.slow
@pytest.mark.det
def test_block_kinds_are_declared_by_the_backbones_and_found_from_analysis_alone():
    # a script that imports only mmstiff.analysis finds every block kind without importing
    # mmstiff.models: upstream blocks by name, mmstiff's by their class attribute
    proc = subprocess.run([sys.executable, '-c', SCRIPT], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report['before'] == []
    assert report['kinds'] == {
        'BasicBlock@mmpretrain': 'conv',
        'SEBottleneck@mmpretrain': 'conv',
        'TransformerEncoderLayer@mmpretrain': 'transformer',
        'SwinBlock@mmpretrain': 'transformer',
        'Bottleneck@mmdet': 'conv',
        'SwinBlock@mmdet': 'transformer',
        'PreActBottleneck': 'preact',
        'StepBottleneck': 'conv'
    }


def _imported_modules(path):
    """Every module an analysis file imports (those inside functions too)."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
    return names


def test_analysis_imports_no_model_module():
    found = []
    for name in sorted(os.listdir(ANALYSIS)):
        if name.endswith('.py'):
            for module in _imported_modules(osp.join(ANALYSIS, name)):
                if module.startswith(('mmstiff.models', 'mmpretrain', 'mmdet')):
                    found.append(f'{name}: {module}')
    assert found == []


#: the upstream blocks read by a built-in kind (the ResNet family, the Swin layers)
KIND_BLOCKS = [name for name, spec in zoo_specs().items() if spec.kind]


@pytest.mark.parametrize('table', [KIND_BLOCKS, UPSTREAM_GATES])
def test_the_upstream_names_are_real_classes(table):
    """Each full name in the tables of upstream classes is the class it names (mmdet's where it
    can be imported): a renamed upstream class would otherwise go unrecorded silently."""
    checked = 0
    for full_name in table:
        module_name, _, qualname = full_name.rpartition('.')
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # no mmdet, or mmdet without mmcv's compiled ops
            assert module_name.startswith('mmdet'), full_name
            continue
        cls = getattr(module, qualname)
        assert isinstance(cls, type) and f'{cls.__module__}.{cls.__qualname__}' == full_name
        checked += 1
    assert checked >= 1
