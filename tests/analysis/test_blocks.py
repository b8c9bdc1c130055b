"""Block discovery: backbones declare their block classes; analysis names no backbone module."""
import ast
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

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
    # a script that imports only mmstiff.analysis finds every declared block: the declaring
    # package is imported at the first lookup, not before
    proc = subprocess.run([sys.executable, '-c', SCRIPT],
                          capture_output=True,
                          text=True,
                          cwd=REPO,
                          timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))
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


def _named_modules(path):
    """Every module an analysis file imports, and every name-like string in its code."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and not any(c.isspace() for c in node.value):  # a name, not prose
            names.append(node.value)
    return names


def test_analysis_imports_and_names_no_backbone_module():
    found = []
    for name in sorted(os.listdir(ANALYSIS)):
        if name.endswith('.py'):
            for module in _named_modules(osp.join(ANALYSIS, name)):
                if module.startswith(('mmstiff.models.', 'mmpretrain', 'mmdet')) or \
                        'backbones' in module:
                    found.append(f'{name}: {module}')
    assert found == []
