"""StepResNet_CIFAR: ResNet_CIFAR with step-size adaptors (docs/methods.md §0, §1, §4)."""
import math

import pytest
import torch
from mmpretrain.models.backbones import ResNet_CIFAR

from mmstiff.models.backbones.step_resnet_cifar import StepResNet_CIFAR
from mmstiff.models.steps import StepAdaptor
from mmstiff.registry import MODELS

SIGMOID_MINUS_ONE = 1.0 / (1.0 + math.exp(1.0))
SMALL = dict(stem_channels=8, base_channels=8, out_indices=(0, 1, 2, 3))


def randomise_norms(module, x, seed=0):
    """Random BN affine parameters, and running statistics taken from one batch ``x``.

    Statistics of real activations keep the eval-mode states at a sane scale through 50 blocks
    (arbitrary ones shrink them into denormal floats, which are slow on CPU).
    """
    gen = torch.Generator().manual_seed(seed)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in norms:
        c = m.num_features
        m.weight.data = torch.rand(c, generator=gen) + 0.5
        m.bias.data = torch.randn(c, generator=gen) * 0.1
        m.momentum = 1.0
    module.train()
    with torch.no_grad():
        module(x)
    for m in norms:
        m.momentum = 0.1
    return module


@pytest.mark.parametrize('depth', [
    18,
    pytest.param(50, marks=pytest.mark.slow),
    pytest.param(34, marks=pytest.mark.slow),
    pytest.param(101, marks=pytest.mark.slow),
    pytest.param(152, marks=pytest.mark.slow),
])
@pytest.mark.parametrize('adaptor', [None, dict(type='mmstiff.ConstantStep')])
def test_plain_steps_equal_upstream_resnet_cifar(depth, adaptor):
    torch.manual_seed(depth)
    x = torch.randn(2, 3, 16, 16)
    upstream = randomise_norms(ResNet_CIFAR(depth=depth, **SMALL), x)
    ours = StepResNet_CIFAR(depth=depth, adaptor=adaptor, **SMALL)
    ours.load_state_dict(upstream.state_dict(), strict=True)
    for training in (False, True):
        upstream.train(training), ours.train(training)
        with torch.no_grad():
            expected, got = upstream(x), ours(x)
        assert len(got) == 4
        for e, g in zip(expected, got):
            assert torch.equal(e, g)


def test_stepnet_scales_each_residual_by_sigmoid_minus_one_at_init():
    torch.manual_seed(0)
    net = StepResNet_CIFAR(depth=50, adaptor=dict(type='mmstiff.StepNetAdaptor'), **SMALL)
    net.init_weights()
    net.train()
    block = net.layer2[0]  # a projection shortcut
    x = torch.randn(3, block.in_channels, 8, 8)
    identity = block.downsample(x)
    f = block.norm3(
        block.conv3(block.relu(block.norm2(block.conv2(block.relu(block.norm1(block.conv1(x))))))))
    torch.testing.assert_close(
        block(x), torch.relu(identity + SIGMOID_MINUS_ONE * f), rtol=1e-5, atol=1e-6)


def test_upstream_checkpoint_loads_with_only_adaptor_keys_missing():
    upstream = ResNet_CIFAR(depth=18, **SMALL)
    ours = StepResNet_CIFAR(depth=18, adaptor=dict(type='mmstiff.StepNetAdaptor'),
                            adaptor_stages=(False, False, True, True),
                            adaptor_blocks=(None, None, [-1], [0]), **SMALL)
    result = ours.load_state_dict(upstream.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert {k.split('.step_adaptor.')[0] for k in result.missing_keys} == {'layer3.1', 'layer4.0'}
    assert sum(isinstance(m, StepAdaptor) for m in ours.modules()) == 2


def test_keeps_the_cifar_stem():
    net = StepResNet_CIFAR(depth=18, adaptor=dict(type='mmstiff.SEAdaptor'))
    assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
    assert not hasattr(net, 'maxpool')
    assert net(torch.randn(1, 3, 32, 32))[0].shape == (1, 512, 4, 4)
    assert MODELS.get('StepResNet_CIFAR') is StepResNet_CIFAR


@pytest.mark.parametrize('kwargs, bad', [
    (dict(depth=20), 'depth=20'),
    (dict(depth=18, adaptor='se'), "adaptor='se'"),
    (dict(depth=18, adaptor=dict(type='mmstiff.ConstantStep'),
          adaptor_stages=(True, True)), 'adaptor_stages'),
])
def test_misconfiguration_fails_early(kwargs, bad):
    with pytest.raises(ValueError) as err:
        StepResNet_CIFAR(**kwargs)
    assert bad in str(err.value)
