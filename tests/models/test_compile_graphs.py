"""Every mmstiff backbone compiles into one graph in training mode (``torch.compile``, which
MMEngine's ``compile=True`` applies): no graph break, so that the compiler can fuse an adaptor's
pooling, gating and residual sum with the layers around them."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from mmstiff.models import backbones

TINY_VIT = dict(
    arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=16,
    patch_size=4, drop_path_rate=0.1)
SWITCHES = dict(attn_scale_layers='all', feat_scale_layers='all')
BUILDS = {
    'StepViT': (lambda: backbones.StepViT(**TINY_VIT, **SWITCHES, msa_adaptor=dict(
        type='mmstiff.StepNetAdaptor')), 16),
    'StepSwin': (lambda: backbones.StepSwin(
        arch=dict(embed_dims=16, depths=(1, 1), num_heads=(2, 2)), img_size=32, patch_size=4,
        window_size=2, out_indices=(1, ), drop_path_rate=0.1, **SWITCHES), 32),
    'CaiT': (lambda: backbones.CaiT(
        arch=dict(embed_dims=32, num_layers=3, num_heads=4), img_size=32, patch_size=8,
        drop_path_rate=0.1, **SWITCHES), 32),
    'AlterNet':
    (lambda: backbones.AlterNet(18, stem='cifar', window_size=4, drop_path_rate=0.1), 32),
    'StepResNet': (lambda: backbones.StepResNet(18, stem_channels=8, base_channels=8, adaptor=dict(
        type='mmstiff.SEAdaptor')), 32),
    'PreActStepResNet':
    (lambda: backbones.PreActStepResNet(depth=20, adaptor=dict(type='mmstiff.StepNetAdaptor')), 16),
    'StepResNet_CIFAR': (lambda: backbones.StepResNet_CIFAR(
        depth=18, stem_channels=4, base_channels=4, adaptor=dict(type='mmstiff.StepNetAdaptor')),
                         16),
}


def _graphs_and_breaks(model, image_size):
    """The number of graphs ``torch.compile`` makes of one training forward pass, and the
    reasons of its graph breaks."""
    torch._dynamo.reset()
    counters.clear()
    backend = CompileCounter()  # counts the graphs and runs each of them eagerly
    torch.compile(model, backend=backend)(torch.randn(2, 3, image_size, image_size))
    return backend.frame_count, list(counters['graph_break'])


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(BUILDS))
def test_backbone_compiles_to_one_graph(name):
    build, image_size = BUILDS[name]
    torch.manual_seed(0)
    model = build()
    model.train()
    graphs, breaks = _graphs_and_breaks(model, image_size)
    assert (graphs, breaks) == (1, [])


@pytest.mark.slow
def test_upstream_vit_breaks_at_every_numpy_drop_path_rate():
    """The check above can fail: mmpretrain's ViT keeps NumPy drop-path rates, on which the
    compiler cannot branch; StepViT passes Python floats."""
    from mmpretrain.models.backbones import VisionTransformer
    upstream = VisionTransformer(**TINY_VIT)
    upstream.train()  # (returns None)
    graphs, breaks = _graphs_and_breaks(upstream, 16)
    assert graphs > 1 and any('drop_prob' in str(reason) for reason in breaks)
    ours = backbones.StepViT(**TINY_VIT)
    rates = [m.drop_prob for m in ours.modules() if hasattr(m, 'drop_prob')]
    assert rates and all(type(rate) is float for rate in rates)
    assert rates[-1] == pytest.approx(0.1)


@pytest.mark.parametrize('name', ['StepViT', 'StepSwin'])
def test_train_returns_the_module(name):
    """``nn.Module.train`` returns the module; mmpretrain's ``BaseBackbone`` and
    ``SwinTransformer`` return None."""
    model = BUILDS[name][0]()
    assert model.train() is model and model.training
    assert model.train(False) is model and not model.training
