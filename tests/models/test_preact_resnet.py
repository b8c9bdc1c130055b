"""Pre-activation CIFAR ResNets with step-size adaptors (docs/methods.md §0, §1, §4, §11)."""
import math

import pytest
import torch
import torch.nn.functional as F
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from mmstiff.models.backbones.preact_resnet import (PreActBasicBlock, PreActBottleneck,
                                                    PreActStepResNet, preact_arch)
from mmstiff.models.steps import StepAdaptor
from mmstiff.registry import MODELS

SIGMOID_MINUS_ONE = 1.0 / (1.0 + math.exp(1.0))


def randomise_norms(module, seed=0):
    """Give every BN non-trivial affine parameters and running statistics."""
    gen = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = torch.rand(c, generator=gen) + 0.5
            m.bias.data = torch.randn(c, generator=gen) * 0.1
            m.running_mean = torch.randn(c, generator=gen) * 0.1
            m.running_var = torch.rand(c, generator=gen) + 0.5
    return module


def ref_bn_relu(x, bn, training):
    """BN then ReLU written out with the module's tensors."""
    y = F.batch_norm(x, bn.running_mean.clone(), bn.running_var.clone(), bn.weight, bn.bias,
                     training=training, momentum=0.0, eps=bn.eps)
    return F.relu(y)


def ref_preact_basic(block, x, training):
    """He et al. 2016 pre-activation basic block, from the module's weights (Δ ≡ 1)."""
    a = ref_bn_relu(x, block.bn1, training)
    shortcut = x if block.downsample is None else F.conv2d(a, block.downsample.weight,
                                                           stride=block.stride)
    h = F.conv2d(a, block.conv1.weight, stride=block.stride, padding=1)
    h = F.conv2d(ref_bn_relu(h, block.bn2, training), block.conv2.weight, padding=1)
    return shortcut + h


def ref_preact_bottleneck(block, x, training):
    """Pre-activation bottleneck (1x1 -> 3x3 stride -> 1x1), from the module's weights."""
    a = ref_bn_relu(x, block.bn1, training)
    shortcut = x if block.downsample is None else F.conv2d(a, block.downsample.weight,
                                                           stride=block.stride)
    h = F.conv2d(a, block.conv1.weight)
    h = F.conv2d(
        ref_bn_relu(h, block.bn2, training), block.conv2.weight, stride=block.stride, padding=1)
    h = F.conv2d(ref_bn_relu(h, block.bn3, training), block.conv3.weight)
    return shortcut + h


# ---------------------------------------------------------------- depth arithmetic
@pytest.mark.parametrize('depth, block, expected', [
    (20, None, ('basic', 3)),
    (56, None, ('basic', 9)),
    (110, None, ('basic', 18)),
    (29, None, ('bottleneck', 3)),
    (164, None, ('bottleneck', 18)),
    (1001, None, ('bottleneck', 111)),
    (20, 'bottleneck', ('bottleneck', 2)),
    (164, 'basic', ('basic', 27)),
])
def test_depth_gives_block_kind_and_blocks_per_stage(depth, block, expected):
    kind, n = preact_arch(depth, block)
    assert (kind, n) == expected
    # the depth counts every conv of the residual branches plus the stem and the classifier
    convs = 2 if kind == 'basic' else 3
    assert convs * 3 * n + 2 == depth


@pytest.mark.parametrize('depth, block, bad', [
    (21, None, 'depth=21'),
    (2, None, 'depth=2'),
    (29, 'basic', 'depth=29'),
    (32, 'bottleneck', 'depth=32'),
    (20.0, None, 'depth=20.0'),
    (20, 'wide', "block='wide'"),
])
def test_unsupported_depth_or_block_names_value_and_forms(depth, block, bad):
    with pytest.raises(ValueError) as err:
        PreActStepResNet(depth=depth, block=block)
    message = str(err.value)
    assert bad in message
    assert '6n+2' in message or "'basic'" in message


# ---------------------------------------------------------------- blocks vs explicit reference
@pytest.mark.parametrize('training', [False, True])
@pytest.mark.parametrize('cls, ref, in_c, out_c, stride', [
    (PreActBasicBlock, ref_preact_basic, 8, 8, 1),
    (PreActBasicBlock, ref_preact_basic, 8, 16, 2),
    (PreActBottleneck, ref_preact_bottleneck, 16, 16, 1),
    (PreActBottleneck, ref_preact_bottleneck, 8, 32, 2),
])
def test_block_equals_explicit_preactivation_formula(cls, ref, in_c, out_c, stride, training):
    torch.manual_seed(0)
    block = randomise_norms(cls(in_c, out_c, stride=stride))
    block.train(training)
    x = torch.randn(3, in_c, 8, 8)
    expected = ref(block, x, training)
    torch.testing.assert_close(block(x), expected, rtol=1e-5, atol=1e-5)
    assert block(x).shape == (3, out_c, 8 // stride, 8 // stride)


def test_block_with_stepnet_scales_residual_by_sigmoid_minus_one():
    """x_{t+1} - x_t = sigmoid(-1) f at initialisation (W_IE = 0, b_IE = -1), docs/methods.md §1."""
    torch.manual_seed(0)
    net = PreActStepResNet(depth=20, block='bottleneck', base_channels=4,
                           adaptor=dict(type='mmstiff.StepNetAdaptor'))
    net.init_weights()
    net.train()
    x = torch.randn(4, 3, 16, 16)
    for block in (net.layer1[1], net.layer2[0]):  # identity and projection shortcuts
        state = torch.randn(4, block.in_channels, 16, 16)
        preact = block.relu(block.bn1(state))
        x_t = state if block.downsample is None else block.downsample(preact)
        f = block.residual(preact)
        torch.testing.assert_close(block(state) - x_t, SIGMOID_MINUS_ONE * f, rtol=1e-5, atol=1e-6)
        assert isinstance(block.step_adaptor, StepAdaptor)
    assert net(x)[0].shape == (4, 64, 4, 4)


def test_constant_step_and_no_adaptor_agree_with_reference_chain():
    """A whole stage is the composition of the explicit blocks; ConstantStep(1) changes nothing."""
    torch.manual_seed(0)
    plain = randomise_norms(PreActStepResNet(depth=20, base_channels=4, out_indices=(0, 1, 2)))
    const = PreActStepResNet(depth=20, base_channels=4, out_indices=(0, 1, 2),
                             adaptor=dict(type='mmstiff.ConstantStep'))
    const.load_state_dict(plain.state_dict())
    plain.eval(), const.eval()
    x = torch.randn(2, 3, 16, 16)
    state = F.conv2d(x, plain.conv1.weight, padding=1)
    expected = []
    for layer in (plain.layer1, plain.layer2, plain.layer3):
        for block in layer:
            state = ref_preact_basic(block, state, training=False)
        expected.append(state)
    expected[-1] = ref_bn_relu(expected[-1], plain.bn_final, training=False)
    for outs in (plain(x), const(x)):
        assert len(outs) == 3
        for out, exp in zip(outs, expected):
            torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- whole network
@pytest.mark.parametrize('depth, widths', [
    (20, (16, 32, 64)),
    (56, (16, 32, 64)),
    (29, (64, 128, 256)),
    pytest.param(164, (64, 128, 256), marks=pytest.mark.slow),
])
def test_stage_shapes_for_each_depth(depth, widths):
    net = PreActStepResNet(depth=depth, out_indices=(0, 1, 2))
    net.eval()
    with torch.no_grad():
        outs = net(torch.randn(1, 3, 32, 32))
    assert [tuple(o.shape) for o in outs] == [(1, widths[0], 32, 32), (1, widths[1], 16, 16),
                                              (1, widths[2], 8, 8)]
    assert net.feat_dim == widths[2]
    assert outs[-1].min() >= 0  # the last stage passes the final BN-ReLU


@pytest.mark.parametrize('depth, paper_params', [(20, 0.27e6), (56, 0.85e6), (164, 1.7e6)])
def test_parameter_count_matches_the_papers(depth, paper_params):
    """He et al. report 0.27M (ResNet-20), 0.85M (ResNet-56), 1.7M (pre-act ResNet-164),
    classifier included; projection shortcuts instead of zero padding add ~1%."""
    net = PreActStepResNet(depth=depth)
    count = sum(p.numel() for p in net.parameters()) + net.feat_dim * 10 + 10
    assert abs(count - paper_params) / paper_params < 0.03, count


def test_grey_input_and_base_channels():
    net = PreActStepResNet(depth=8, in_channels=1, base_channels=8, out_indices=(-1, ))
    assert net.conv1.in_channels == 1
    assert net(torch.randn(2, 1, 28, 28))[0].shape == (2, 32, 7, 7)


def test_placement_builds_adaptors_only_where_chosen():
    net = PreActStepResNet(depth=20, base_channels=4, adaptor=dict(type='mmstiff.SEAdaptor'),
                           adaptor_stages=(False, True, True), adaptor_blocks=(None, [-1], [0, 2]))
    flags = [[block.step_adaptor is not None for block in getattr(net, f'layer{i}')]
             for i in (1, 2, 3)]
    assert flags == [[False] * 3, [False, False, True], [True, False, True]]
    assert sum(isinstance(m, StepAdaptor) for m in net.modules()) == 3


def test_plain_checkpoint_loads_with_only_adaptor_keys_missing():
    plain = PreActStepResNet(depth=20, base_channels=4)
    stepnet = PreActStepResNet(depth=20, base_channels=4,
                               adaptor=dict(type='mmstiff.StepNetAdaptor'),
                               adaptor_blocks=([0], [0], [0]))
    result = stepnet.load_state_dict(plain.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert result.missing_keys and all('.step_adaptor.' in k for k in result.missing_keys)
    assert {k.split('.step_adaptor.')[0]
            for k in result.missing_keys} == {'layer1.0', 'layer2.0', 'layer3.0'}


@pytest.mark.parametrize('kwargs, bad', [
    (dict(adaptor='StepNet'), "adaptor='StepNet'"),
    (dict(adaptor=dict(type='mmstiff.NoSuchAdaptor')), 'NoSuchAdaptor'),
    (dict(adaptor=dict(type='mmstiff.ConstantStep'), adaptor_stages=(True, )), 'adaptor_stages'),
    (dict(adaptor=dict(type='mmstiff.ConstantStep'),
          adaptor_blocks=([3], None, None)), 'adaptor_blocks[0]'),
    (dict(out_indices=(3, )), 'out_indices=(3,)'),
    (dict(strides=(1, 2)), 'strides=(1, 2)'),
    (dict(in_channels=0), 'in_channels=0'),
    (dict(frozen_stages=4), 'frozen_stages=4'),
])
def test_misconfiguration_fails_early_naming_the_field(kwargs, bad):
    with pytest.raises(ValueError) as err:
        PreActStepResNet(depth=20, **kwargs)
    assert bad in str(err.value)


def test_frozen_stages_and_norm_eval():
    net = PreActStepResNet(depth=20, base_channels=4, frozen_stages=1, norm_eval=True)
    net.train()
    assert not any(p.requires_grad for p in net.conv1.parameters())
    assert not any(p.requires_grad for p in net.layer1.parameters())
    assert all(p.requires_grad for p in net.layer2.parameters())
    assert not any(m.training for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d))


def test_image_classifier_from_mmpretrain_registry_trains_one_step():
    from mmengine.registry import DefaultScope
    from mmpretrain.structures import DataSample

    import mmstiff  # noqa: F401  (mmstiff's registry must be importable by scope)

    # as a Runner with default_scope='mmpretrain' builds it (other tests' runners may have
    # left another default scope behind)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MMPRETRAIN_MODELS.build(
            dict(
                type='ImageClassifier', backbone=dict(type='mmstiff.PreActStepResNet', depth=20,
                                                      base_channels=4,
                                                      adaptor=dict(type='mmstiff.StepNetAdaptor')),
                neck=dict(type='GlobalAveragePooling'),
                head=dict(type='LinearClsHead', num_classes=10, in_channels=16,
                          loss=dict(type='CrossEntropyLoss'))))
    model.init_weights()
    samples = [DataSample().set_gt_label(i % 10) for i in range(4)]
    losses = model(torch.randn(4, 3, 16, 16), samples, mode='loss')
    losses['loss'].backward()
    assert torch.isfinite(losses['loss'])
    adaptor = model.backbone.layer1[0].step_adaptor
    assert adaptor.ie_weight.grad is not None
    assert MODELS.get('PreActStepResNet') is PreActStepResNet
