"""Export, as deployment takes it: every backbone family, with ``fused`` off and on, exports
through ``torch.onnx.export`` and onnxruntime computes what the model computes eagerly (under
export every block takes the reference step); the dynamo exporter, ``torch.export`` and
TorchScript's trace take the fused backbones too.
"""
import copy

import pytest
import torch
import torch.nn as nn

from mmstiff.models.backbones import (AlterNet, CaiT, PreActStepResNet, StepResNet,
                                      StepResNet_CIFAR, StepSwin, StepViT)
from mmstiff.models.steps import reference_step
from mmstiff.models.steps.fused import FusedStep

onnx = pytest.importorskip('onnx', reason='needs onnx (the tests requirements)')
ort = pytest.importorskip('onnxruntime', reason='needs onnxruntime (the tests requirements)')

STEPNET = dict(type='mmstiff.StepNetAdaptor')
SE = dict(type='mmstiff.SEAdaptor', squeeze_channels=4)
VIT_ARCH = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
SCALES = dict(attn_scale_layers='all', feat_scale_layers='all')


def _det(fused):
    pytest.importorskip('mmdet.models', reason='needs mmdet: pip install "mmstiff[det]"')
    from mmstiff.models.backbones import DetStepResNet
    return DetStepResNet(18, base_channels=4, stem_channels=4, adaptor=STEPNET, fused=fused,
                         norm_eval=False)


#: family -> (build from ``fused``, image size)
BACKBONES = {
    'resnet-stepnet':
    (lambda fused: StepResNet(50, base_channels=2, stem_channels=4, adaptor=STEPNET, fused=fused),
     32),
    'resnet-se':
    (lambda fused: StepResNet(18, base_channels=4, stem_channels=4, adaptor=SE, fused=fused), 32),
    'cifar':
    (lambda fused: StepResNet_CIFAR(18, base_channels=4, stem_channels=4, adaptor=SE, fused=fused),
     16),
    'preact':
    (lambda fused: PreActStepResNet(20, base_channels=4, adaptor=STEPNET, fused=fused), 16),
    'det': (_det, 32),
    'vit': (lambda fused: StepViT(VIT_ARCH, img_size=16, patch_size=8, msa_adaptor=STEPNET,
                                  mlp_adaptor=SE, fused=fused, **SCALES), 16),
    'swin': (lambda fused: StepSwin(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=32, window_size=4,
        out_indices=(0, 1), fused=fused, **SCALES), 32),
    'cait': (lambda fused: CaiT(
        arch=dict(embed_dims=16, num_layers=2, num_heads=2), img_size=16, patch_size=8, fused=fused,
        **SCALES), 16),
    'alternet': (lambda fused: AlterNet(18, stem='cifar', base_channels=4, num_heads=(1, 1, 1, 1),
                                        head_dim=4, window_size=2, fused=fused), 16),
}


class Outputs(nn.Module):
    """A backbone whose output is the flat tuple of its output tensors."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, x):
        flat, todo = [], [self.backbone(x)]
        while todo:
            item = todo.pop(0)
            if torch.is_tensor(item):
                flat.append(item)
            else:
                todo = list(item) + todo
        return tuple(flat)


def _model(name, fused):
    """The family's backbone with random weights and statistics (every adaptor matters), in
    eval mode, as exported for deployment."""
    build, size = BACKBONES[name]
    torch.manual_seed(0)
    model = build(fused)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return Outputs(model).eval(), torch.randn(2, 3, size, size)


def _onnx_outputs(model, images, path, dynamo=False):
    if dynamo:
        torch.onnx.export(copy.deepcopy(model), (images, ), dynamo=True).save(str(path))
    else:
        torch.onnx.export(model, (images, ), str(path), input_names=['images'], dynamo=False)
    onnx.checker.check_model(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    return session.run(None, {session.get_inputs()[0].name: images.numpy()})


@pytest.mark.slow
@pytest.mark.parametrize('fused', [False, True], ids=['reference', 'fused'])
@pytest.mark.parametrize('name', list(BACKBONES))
def test_onnxruntime_computes_what_the_model_computes(name, fused, tmp_path):
    model, images = _model(name, fused)
    steps = [m.take_step for m in model.modules() if 'take_step' in m.__dict__]
    if name not in ('swin', 'cait'):  # the families whose fused switch is only the folding
        assert steps and all(
            isinstance(s, FusedStep) if fused else s is reference_step for s in steps)
    with torch.no_grad():
        expected = model(images)
    got = _onnx_outputs(model, images, tmp_path / 'model.onnx')
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        torch.testing.assert_close(torch.from_numpy(b), a, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['resnet-stepnet', 'preact', 'vit', 'alternet'])
def test_the_dynamo_exporter_takes_the_fused_backbones(name, tmp_path):
    pytest.importorskip('onnxscript', reason='the dynamo exporter needs onnxscript')
    model, images = _model(name, True)
    with torch.no_grad():
        expected = model(images)
    got = _onnx_outputs(model, images, tmp_path / 'model.onnx', dynamo=True)
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        torch.testing.assert_close(torch.from_numpy(b), a, rtol=1e-4, atol=1e-4)


def test_under_export_a_fused_block_takes_the_reference_step(tmp_path, monkeypatch):
    """The fused step's passes are not traced into the graph: no autograd Function of theirs
    runs while ``torch.onnx.export`` or ``torch.export`` traces, and the graph computes the
    eager values."""
    from mmstiff.models.steps.fused import step as fused_step
    model, images = _model('resnet-se', True)
    calls = []
    apply = fused_step.EulerUpdate.apply
    monkeypatch.setattr(fused_step.EulerUpdate, 'apply', lambda *a: calls.append(1) or apply(*a))
    with torch.no_grad():
        expected = model(images)
    assert len(calls) == 8  # eagerly, every block takes the fused step
    calls.clear()
    _onnx_outputs(model, images, tmp_path / 'model.onnx')
    exported = torch.export.export(copy.deepcopy(model), (images, ))
    # (check_trace would run the model again eagerly, where it takes the fused step)
    traced = torch.jit.trace(copy.deepcopy(model), (images, ), check_trace=False)
    assert calls == []
    for a, b, c in zip(expected, exported.module()(images), traced(images)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-5)
    assert calls == []  # the traced graph holds the reference step's operators
