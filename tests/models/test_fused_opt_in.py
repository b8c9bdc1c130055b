"""The fused step is opt-in: a fresh process that trains and records SE- and StepNet-ResNets and
an SE-ViT with the default ``fused`` never imports ``mmstiff.models.steps.fused``; setting
``fused=True`` on one block imports it, and that block alone takes it."""
import json
import os.path as osp
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

SCRIPT = r'''
import json
import sys

import torch

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.models.backbones import StepResNet, StepViT


def fused_modules():
    return sorted(m for m in sys.modules if m.startswith('mmstiff.models.steps.fused'))


nets = [StepResNet(18, base_channels=4, stem_channels=4, adaptor=dict(type='mmstiff.SEAdaptor')),
        StepResNet(18, base_channels=4, stem_channels=4,
                   adaptor=dict(type='mmstiff.StepNetAdaptor')),
        StepViT(dict(embed_dims=16, num_layers=1, num_heads=2, feedforward_channels=32),
                img_size=16, patch_size=8, msa_adaptor=dict(type='mmstiff.SEAdaptor'))]
for net in nets:
    size = 16 if isinstance(net, StepViT) else 32
    with TrajectoryRecorder(net, step_sums=True):
        net.train()(torch.randn(2, 3, size, size))[-1].sum().backward()
before = fused_modules()
block = nets[0].layer1[0]
block.fused = True
nets[0](torch.randn(2, 3, 32, 32))[-1].sum().backward()
steps = {type(b.take_step).__name__ for b in nets[0].modules() if hasattr(b, 'take_step')}
print(json.dumps(dict(before=before, after=fused_modules(), taken=type(block.take_step).__name__,
                      steps=sorted(steps))))
'''


@pytest.mark.slow
def test_the_default_step_never_imports_the_fused_package():
    proc = subprocess.run([sys.executable, '-c', SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found['before'] == []
    assert 'mmstiff.models.steps.fused.step' in found['after']
    assert found['taken'] == 'FusedStep'
    assert found['steps'] == ['FusedStep', 'function']  # the other blocks: reference_step
