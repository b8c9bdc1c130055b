"""StepResNet (mmpretrain ResNet with step-size adaptors, docs/methods.md §0-§4)."""
import math
import re

import pytest
import torch
from mmengine.registry import DefaultScope
from mmengine.runner.checkpoint import load_state_dict
from mmpretrain.models.backbones import ResNet, SEResNet
from mmpretrain.registry import MODELS as PRETRAIN_MODELS
from reference_weights import assert_same_outputs, randomise_bn

from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import ConstantStep, SEAdaptor, StepNetAdaptor
from mmstiff.registry import MODELS

SIGMOID_MINUS_ONE = 1.0 / (1.0 + math.exp(1.0))
ALL_STAGES = (0, 1, 2, 3)


@pytest.mark.parametrize('depth', [
    18,
    pytest.param(34, marks=pytest.mark.slow),
    pytest.param(50, marks=pytest.mark.slow),
    pytest.param(101, marks=pytest.mark.slow),
    pytest.param(152, marks=pytest.mark.slow)
])
@pytest.mark.parametrize('adaptor', [None, dict(type='mmstiff.ConstantStep')])
def test_constant_step_equals_upstream_resnet(depth, adaptor):
    torch.manual_seed(depth)
    reference = ResNet(depth, out_indices=ALL_STAGES)
    randomise_bn(reference)
    model = StepResNet(depth, adaptor=adaptor, out_indices=ALL_STAGES)
    model.load_state_dict(reference.state_dict())  # strict: same names, no extra keys
    if adaptor is not None:
        assert isinstance(model.layer1[0].step_adaptor, ConstantStep)
    assert_same_outputs(reference, model, torch.randn(2, 3, 32, 32))


def _se_weights_to_steps(state_dict):
    return {key.replace('.se_layer.', '.step_adaptor.'): value for key, value in state_dict.items()}


@pytest.mark.slow
def test_se_adaptor_equals_mmpretrain_seresnet():
    torch.manual_seed(0)
    reference = SEResNet(50, out_indices=ALL_STAGES)
    randomise_bn(reference)
    with torch.no_grad():  # non-zero SE biases, so the test sees them
        for name, param in reference.named_parameters():
            if 'se_layer' in name:
                param.normal_(0, 0.1)
    model = StepResNet(50, adaptor=dict(type='mmstiff.SEAdaptor'), out_indices=ALL_STAGES)
    model.load_state_dict(_se_weights_to_steps(reference.state_dict()))
    # Δ ⊙ f + x_t is one fused addcmul here, two roundings upstream; in train mode the batch
    # statistics of layer4's BN (8 values per channel at 64x64) amplify that last-bit difference
    for mode, size, tol in ((False, 32, 1e-5), (True, 64, 1e-3)):
        reference.train(mode), model.train(mode)
        x = torch.randn(2, 3, size, size)
        for ref, out in zip(reference(x), model(x)):
            torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    'depth, last_norm',
    [(18, 'norm2'), pytest.param(50, 'norm3', marks=pytest.mark.slow)])
def test_initial_stepnet_block_is_upstream_block_with_scaled_last_norm(depth, last_norm):
    """Δ ≡ sigmoid(-1) at init, so a StepNet block equals the upstream block whose last norm's
    γ and β are multiplied by sigmoid(-1) (that norm's output is exactly f)."""
    torch.manual_seed(1)
    model = StepResNet(depth, adaptor=dict(type='mmstiff.StepNetAdaptor'))
    model.init_weights()
    randomise_bn(model)
    reference = ResNet(depth)
    reference.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        for m in reference.modules():
            if hasattr(m, last_norm) and hasattr(m, 'downsample'):
                getattr(m, last_norm).weight.mul_(SIGMOID_MINUS_ONE)
                getattr(m, last_norm).bias.mul_(SIGMOID_MINUS_ONE)
    reference.eval(), model.eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x)[0], reference(x)[0], rtol=1e-5, atol=1e-5)

    steps = []
    handles = [
        m.register_forward_hook(lambda mod, args, out: steps.append(out)) for m in model.modules()
        if isinstance(m, StepNetAdaptor)
    ]
    model.train()
    model(x)
    for handle in handles:
        handle.remove()
    assert len(steps) == sum(model.stage_blocks)
    for step in steps:
        torch.testing.assert_close(step, torch.full_like(step, SIGMOID_MINUS_ONE))


@pytest.mark.slow
def test_placement_builds_adaptors_only_where_chosen():
    model = StepResNet(34, adaptor=dict(type='mmstiff.StepNetAdaptor',
                                        groups=2), adaptor_stages=(False, True, True, True),
                       adaptor_blocks=(None, [-1], [0, 2], None))
    chosen = {(i, j)
              for i, name in enumerate(model.res_layers)
              for j, block in enumerate(getattr(model, name)) if block.step_adaptor is not None}
    assert chosen == {(1, 3), (2, 0), (2, 2), (3, 0), (3, 1), (3, 2)}
    assert model.layer3[2].step_adaptor.groups == 2
    assert model.layer3[2].step_adaptor.channels == 256
    keys = {k.split('.step_adaptor.')[0] for k in model.state_dict() if '.step_adaptor.' in k}
    assert keys == {'layer2.3', 'layer3.0', 'layer3.2', 'layer4.0', 'layer4.1', 'layer4.2'}
    # blocks without an adaptor hold no module for it: they are the plain upstream step
    assert 'step_adaptor' not in dict(model.layer1[0].named_children())
    model.train()
    assert [o.shape[1] for o in model(torch.randn(2, 3, 32, 32))] == [512]


@pytest.mark.slow
def test_upstream_checkpoint_loads_with_only_adaptor_keys_missing(tmp_path, capsys):
    torch.manual_seed(2)
    upstream = ResNet(50)
    randomise_bn(upstream)
    path = tmp_path / 'resnet50.pth'
    torch.save({'state_dict': upstream.state_dict()}, path)

    model = StepResNet(50, adaptor=dict(type='mmstiff.StepNetAdaptor'),
                       init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    for name, value in upstream.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name

    adaptor_keys = {k for k in model.state_dict() if '.step_adaptor.' in k}
    assert len(adaptor_keys) == 16 * 8  # 16 blocks x (conv, 5 BN entries, W_IE, b_IE)
    # BN fills a missing num_batches_tracked itself, so neither loader reports it
    expected = {k for k in adaptor_keys if not k.endswith('num_batches_tracked')}
    result = StepResNet(50, adaptor=dict(type='mmstiff.StepNetAdaptor')).load_state_dict(
        upstream.state_dict(), strict=False)
    assert set(result.missing_keys) == expected and result.unexpected_keys == []
    capsys.readouterr()
    load_state_dict(model, upstream.state_dict(), strict=False, logger=None)
    message = capsys.readouterr().out
    missing = re.search(r'missing keys in source state_dict: (.*)', message).group(1)
    assert set(missing.split(', ')) == expected
    assert 'unexpected key' not in message


def test_frozen_stages_and_norm_eval_reach_the_adaptors():
    # adaptor_norm='follow': the adaptors' BN follows norm_eval (see tests/models/test_graft.py
    # for 'auto', which lets statistics no checkpoint held keep learning)
    model = StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor'), frozen_stages=1,
                       norm_eval=True, adaptor_norm='follow')
    model.train()
    assert not any(p.requires_grad for p in model.layer1.parameters())
    assert all(p.requires_grad for p in model.layer2[0].step_adaptor.parameters())
    assert not model.layer1[0].step_adaptor.training
    assert not model.layer3[1].step_adaptor.norm.training  # norm_eval freezes its BN too
    running_mean = model.layer3[1].step_adaptor.norm.running_mean.clone()
    model(torch.randn(2, 3, 32, 32))
    assert torch.equal(model.layer3[1].step_adaptor.norm.running_mean, running_mean)


@pytest.mark.slow
def test_checkpointed_blocks_match_and_backpropagate():
    torch.manual_seed(3)
    model = StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor'))
    cp_model = StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor'), with_cp=True)
    cp_model.load_state_dict(model.state_dict())
    model.eval(), cp_model.eval()
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    out = cp_model(x)[0]
    torch.testing.assert_close(out, model(x)[0])
    out.sum().backward()
    assert cp_model.layer2[0].step_adaptor.ie_weight.grad is not None


def test_small_three_stage_network_for_grey_28x28_images():
    model = StepResNet(18, in_channels=1, stem_channels=16, base_channels=16, num_stages=3,
                       strides=(1, 2, 2), dilations=(1, 1, 1), out_indices=(2, ),
                       adaptor=dict(type='mmstiff.StepNetAdaptor'),
                       adaptor_stages=(False, True, True))
    assert model.layer1[0].step_adaptor is None and model.layer3[1].step_adaptor.channels == 64
    model.train()
    assert model(torch.randn(2, 1, 28, 28))[0].shape == (2, 64, 2, 2)
    with pytest.raises(ValueError, match='expected 3'):
        StepResNet(18, num_stages=3, strides=(1, 2, 2), dilations=(1, 1, 1), out_indices=(2, ),
                   adaptor=dict(type='mmstiff.StepNetAdaptor'), adaptor_stages=(True, ) * 4)


def test_builds_from_mmpretrain_scope_with_unscoped_adaptor_type():
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = PRETRAIN_MODELS.build(
            dict(type='mmstiff.StepResNet', depth=18, adaptor=dict(type='SEAdaptor')))
    assert isinstance(model.layer4[1].step_adaptor, SEAdaptor)


@pytest.mark.parametrize('kwargs, message', [
    (dict(depth=26), 'depth=26'),
    (dict(depth=18, adaptor=dict(type='mmstiff.NoSuchStep')), "'mmstiff.NoSuchStep'"),
    (dict(depth=18, adaptor=dict(type='mmstiff.StepResNet')), "'mmstiff.StepResNet'"),
    (dict(depth=18, adaptor='StepNetAdaptor'), "adaptor='StepNetAdaptor'"),
    (dict(depth=18, adaptor=dict(type='mmstiff.SEAdaptor', channels=8)), "'channels'"),
    (dict(depth=18, adaptor_stages=(True, False)), r'adaptor_stages=\(True, False\)'),
    (dict(depth=18, adaptor_blocks=([0], [2], None, None)), 'adaptor_blocks\\[1\\] holds 2'),
])
def test_bad_configuration_fails_at_build_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MODELS.build(dict(type='mmstiff.StepResNet', **kwargs))
