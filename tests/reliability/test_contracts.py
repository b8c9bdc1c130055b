"""Every mmstiff backbone keeps the documented contract of the class it subclasses.

Checked against the upstream twin built alongside: the error type of an unsupported depth
(upstream ``KeyError``), upgrades of old checkpoint versions (mmpretrain's ``SwinTransformer``
upgrades v1/v2 files only for its own class), load pre-hooks (position-embedding resizing),
which parameters ``frozen_stages`` freezes (those mmstiff adds included), and the zero
initialisation of the residual branches' last norms.
"""
from collections import OrderedDict

import pytest
import torch
from mmpretrain.models.backbones import ResNet, ResNet_CIFAR, SwinTransformer, VisionTransformer

from mmstiff.models.backbones import (AlterNet, PreActStepResNet, StepResNet, StepResNet_CIFAR,
                                      StepSwin, StepViT)
from mmstiff.models.utils import UnsupportedDepthError
from mmstiff.utils.checkpoint import load_checkpoint_into, load_state_dict_report

STEPNET = dict(type='mmstiff.StepNetAdaptor')
VIT = dict(
    arch=dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64), img_size=32,
    patch_size=8)
SWIN = dict(
    arch=dict(embed_dims=16, depths=(2, 2), num_heads=(1, 2)), img_size=32, window_size=2,
    out_indices=(1, ), drop_path_rate=0.1)


def det_step_resnet(**kwargs):
    pytest.importorskip('mmdet')
    from mmstiff.models.backbones import DetStepResNet
    return DetStepResNet(**kwargs)


def det_resnet(**kwargs):
    pytest.importorskip('mmdet')
    from mmdet.models.backbones import ResNet as MMDetResNet
    return MMDetResNet(**kwargs)


# ------------------------------------------------------------------ unsupported depth
@pytest.mark.parametrize(
    'build', [StepResNet, StepResNet_CIFAR, AlterNet, PreActStepResNet, det_step_resnet],
    ids=lambda b: b.__name__)
def test_unsupported_depth_is_a_key_error_as_upstream_and_a_value_error(build):
    with pytest.raises(KeyError, match='invalid depth 19'):
        ResNet(depth=19)  # upstream's type, which callers catch
    with pytest.raises(KeyError) as info:
        build(depth=19)
    assert isinstance(info.value, ValueError) and isinstance(info.value, UnsupportedDepthError)
    assert str(info.value).startswith('depth=19 is not supported')  # not quoted as KeyError's


# ------------------------------------------------------------------ checkpoint versions
def old_swin_checkpoint(upstream, version):
    """``upstream``'s state dict as a SwinTransformer of ``version`` saved it: the last norm
    named ``norm`` (before v2), ``attn_mask`` buffers (before v3)."""
    last = len(upstream.stages) - 1
    state = OrderedDict()
    for key, value in upstream.state_dict().items():
        if version < 2 and key.startswith(f'norm{last}.'):
            key = 'norm.' + key[len(f'norm{last}.'):]
        state[key] = value
    state['stages.0.blocks.1.attn.attn_mask'] = torch.zeros(4, 4, 4)
    state._metadata = OrderedDict({'': {'version': version}})
    return state


@pytest.mark.parametrize('version', [1, 2])
def test_step_swin_loads_old_swin_checkpoints_as_upstream_does(version, tmp_path):
    torch.manual_seed(0)
    source = SwinTransformer(**SWIN)
    with torch.no_grad():
        source.norm1.weight.uniform_(0.5, 1.5)
    state = old_swin_checkpoint(source, version)
    upstream, ours = SwinTransformer(**SWIN), StepSwin(**SWIN)
    upstream.load_state_dict(OrderedDict(state), strict=True)  # upstream upgrades it
    ours.load_state_dict(OrderedDict(state), strict=True)  # (failed: unexpected norm.*)
    x = torch.randn(2, 3, 32, 32)
    upstream.eval(), ours.eval(), source.eval()
    torch.testing.assert_close(ours(x)[0], upstream(x)[0])
    torch.testing.assert_close(ours(x)[0], source(x)[0])

    # the same file through the tools' strict loader, as a classifier checkpoint
    prefixed = OrderedDict((f'backbone.{k}', v) for k, v in state.items())
    prefixed._metadata = OrderedDict({'backbone': {'version': version}})
    path = str(tmp_path / 'old_swin.pth')
    torch.save({'state_dict': prefixed}, path)
    model = torch.nn.Module()
    model.backbone = StepSwin(**SWIN)
    load_checkpoint_into(model, path)
    torch.testing.assert_close(model.backbone.norm1.weight, source.norm1.weight)


def test_current_swin_checkpoints_are_not_rewritten():
    source = StepSwin(**SWIN, attn_scale_layers='all')
    state = source.state_dict()
    assert state._metadata['']['version'] == 3
    assert not load_state_dict_report(StepSwin(**SWIN, attn_scale_layers='all'), state)


def test_vit_position_embedding_is_resized_through_the_strict_loader():
    torch.manual_seed(0)
    state = StepViT(**VIT, attn_scale_layers='all').state_dict()
    larger = dict(VIT, img_size=48)
    ours, upstream = StepViT(**larger, attn_scale_layers='all'), VisionTransformer(**larger)
    assert not load_state_dict_report(ours, state)  # resized by the upstream pre-hook
    upstream.load_state_dict({k: v for k, v in state.items() if 'attn_scale' not in k})
    assert ours.pos_embed.shape == (1, 37, 32)
    torch.testing.assert_close(ours.pos_embed, upstream.pos_embed)


# ------------------------------------------------------------------ frozen stages
def step_vit_with_every_switch():
    return StepViT(**VIT, frozen_stages=2, attn_scale_layers='all', feat_scale_layers='all',
                   msa_adaptor=STEPNET)


TWINS = {
    'StepResNet': (lambda: StepResNet(depth=18, adaptor=STEPNET, frozen_stages=2),
                   lambda: ResNet(depth=18, frozen_stages=2), ['layer1',
                                                               'layer2'], ['layer3', 'layer4']),
    'StepResNet_CIFAR':
    (lambda: StepResNet_CIFAR(depth=18, adaptor=STEPNET, frozen_stages=1),
     lambda: ResNet_CIFAR(depth=18, frozen_stages=1), ['layer1'], ['layer2', 'layer3', 'layer4']),
    'DetStepResNet':
    (lambda: det_step_resnet(depth=18, adaptor=STEPNET, frozen_stages=1),
     lambda: det_resnet(depth=18, frozen_stages=1), ['layer1'], ['layer2', 'layer3', 'layer4']),
    'StepViT': (step_vit_with_every_switch, lambda: VisionTransformer(**VIT, frozen_stages=2),
                ['layers.0.', 'layers.1.'], ['layers.2.']),
    'StepSwin':
    (lambda: StepSwin(**SWIN, frozen_stages=0, attn_scale_layers='all', feat_scale_layers='all'),
     lambda: SwinTransformer(**SWIN, frozen_stages=0), ['stages.0.'], ['stages.1.']),
}


@pytest.mark.parametrize('name', sorted(TWINS))
def test_frozen_stages_freeze_what_upstream_freezes_and_the_added_parameters(name):
    build, build_upstream, frozen, trained = TWINS[name]
    ours, upstream = build(), build_upstream()
    ours.train(), upstream.train()  # mmdet's ResNet.train returns None
    mine = dict(ours.named_parameters())
    for key, p in upstream.named_parameters():
        assert mine[key].requires_grad == p.requires_grad, key
    added = [k for k in mine if k not in dict(upstream.named_parameters())]
    assert any(k.startswith(tuple(frozen)) for k in added), 'no added parameter to check'
    for key in added:
        assert mine[key].requires_grad == (not key.startswith(tuple(frozen))), key
        assert mine[key].requires_grad == key.startswith(tuple(trained)), key
    modules = dict(ours.named_modules())
    upstream_modules = dict(upstream.named_modules())
    for key, module in upstream_modules.items():
        assert modules[key].training == module.training, key


@pytest.mark.parametrize('build, stem', [
    (lambda: PreActStepResNet(depth=20, adaptor=STEPNET, frozen_stages=1), 'conv1'),
    (lambda: AlterNet(depth=18, stem='cifar', base_channels=8, head_dim=8, num_heads=(1, 1, 1, 1),
                      window_size=4, frozen_stages=1), 'conv1'),
])
def test_frozen_stages_of_the_backbones_without_a_twin(build, stem):
    model = build().train()
    for key, p in model.named_parameters():
        assert p.requires_grad == (not key.startswith((stem, 'layer1.'))), key
    assert not model.layer1.training and model.layer2.training


# ------------------------------------------------------------------ init_weights
@pytest.mark.slow
@pytest.mark.parametrize('ours, upstream', [
    (lambda: StepResNet(depth=18, adaptor=STEPNET), lambda: ResNet(depth=18)),
    (lambda: StepResNet(depth=50), lambda: ResNet(depth=50)),
    (lambda: StepResNet_CIFAR(depth=18), lambda: ResNet_CIFAR(depth=18)),
    (lambda: det_step_resnet(depth=50, zero_init_residual=True),
     lambda: det_resnet(depth=50, zero_init_residual=True)),
])
def test_zero_init_residual_zeroes_the_same_norms_as_upstream(ours, upstream):
    a, b = ours(), upstream()
    a.init_weights(), b.init_weights()
    zero = {
        k
        for k, v in b.state_dict().items() if k.endswith('.weight') and v.ndim == 1 and not v.any()
    }
    ours_zero = {
        k
        for k, v in a.state_dict().items()
        if k.endswith('.weight') and v.ndim == 1 and not v.any() and 'step_adaptor' not in k
    }
    assert zero and ours_zero == zero


@pytest.mark.parametrize('key, value', [('num_layers', 0), ('num_heads', 0), ('embed_dims', -8)])
def test_cait_names_an_arch_value_out_of_range(key, value):
    """A depth of 0 is named as the depth (not as an out_indices problem it leads to)."""
    from mmstiff.models.backbones import CaiT
    arch = dict(embed_dims=32, num_layers=2, num_heads=2)
    arch[key] = value
    with pytest.raises(ValueError) as err:
        CaiT(arch=arch, img_size=32, patch_size=8)
    assert str(err.value).startswith(f"arch['{key}']={value} is not supported; expected a "
                                     'positive int')
    assert 'out_indices' not in str(err.value)
