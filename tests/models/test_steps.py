"""Step-size adaptors (docs/methods.md §1, §3) and their placement (§4)."""
import math

import pytest
import torch
from mmpretrain.models.utils import SELayer

from mmstiff.models.layers import IEBN
from mmstiff.models.steps import (SEAdaptor, StepNetAdaptor, adaptor_placement, apply_step,
                                  grouped_pointwise, interleave_states, pool_state)
from mmstiff.registry import MODELS

SIGMOID_MINUS_ONE = 1.0 / (1.0 + math.exp(1.0))


# ---------------------------------------------------------------- placement (LTH4SA, §4)
def test_placement_defaults_select_every_block():
    assert adaptor_placement((2, 3)) == [[True, True], [True, True, True]]


def test_placement_stage_mask_and_block_indices():
    placement = adaptor_placement((3, 4, 6, 3), adaptor_stages=(False, True, True, True),
                                  adaptor_blocks=([0], [-1], [0, -1, 5], None))
    assert placement == [[False] * 3, [False, False, False, True],
                         [True, False, False, False, False, True], [True] * 3]


@pytest.mark.parametrize('kwargs, field, bad', [
    (dict(adaptor_stages=(True, False, True)), 'adaptor_stages', '(True, False, True)'),
    (dict(adaptor_stages=(True, 1)), 'adaptor_stages', '1'),
    (dict(adaptor_stages='all'), 'adaptor_stages', "'all'"),
    (dict(adaptor_blocks=([0], )), 'adaptor_blocks', '([0],)'),
    (dict(adaptor_blocks=([0], [3])), 'adaptor_blocks[1]', '3'),
    (dict(adaptor_blocks=([-3], [0])), 'adaptor_blocks[0]', '-3'),
    (dict(adaptor_blocks=([0.5], [0])), 'adaptor_blocks[0]', '0.5'),
])
def test_placement_errors_name_field_and_value(kwargs, field, bad):
    with pytest.raises(ValueError) as err:
        adaptor_placement((2, 3), **kwargs)
    assert field in str(err.value) and bad in str(err.value)


# ---------------------------------------------------------------- StepNet (§1)
def test_interleave_pairs_each_channel():
    u = torch.tensor([[1.0, 2.0, 3.0]])
    v = torch.tensor([[10.0, 20.0, 30.0]])
    assert interleave_states(u, v).tolist() == [[1.0, 10.0, 2.0, 20.0, 3.0, 30.0]]


@pytest.mark.parametrize('layout, shape', [('nchw', (2, 3, 4, 5)), ('nlc', (2, 7, 3))])
def test_pool_state_is_the_mean_and_backpropagates_it(layout, shape):
    x = torch.randn(*shape, requires_grad=True)
    weights = torch.randn(2, 3)
    pooled = pool_state(x, layout, keepdim=False)
    dims = (2, 3) if layout == 'nchw' else (1, )
    torch.testing.assert_close(pooled, x.mean(dim=dims))
    torch.testing.assert_close(pool_state(x, layout), x.mean(dim=dims, keepdim=True))
    half = x.detach().half()  # float16: the mean itself, whose intermediate cannot overflow
    assert torch.equal(pool_state(half, layout, keepdim=False), half.mean(dim=dims))
    (pooled * weights).sum().backward()
    count = x[0].numel() / 3
    expected = weights.view(2, 3, 1, 1) if layout == 'nchw' else weights.view(2, 1, 3)
    torch.testing.assert_close(x.grad, (expected / count).expand(shape))


@pytest.mark.parametrize('groups', [6, 3, 1])
def test_grouped_pointwise_equals_the_grouped_convolution(groups):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(12, 6, kernel_size=1, groups=groups, bias=False)
    u, v = torch.randn(4, 6), torch.randn(4, 6)
    expected = conv(interleave_states(u, v)[:, :, None, None]).flatten(1)
    torch.testing.assert_close(grouped_pointwise(u, v, conv.weight, groups), expected)


@pytest.mark.parametrize('norm', ['bn_ie'])
@pytest.mark.parametrize('training', [True, False])
def test_stepnet_initial_step_is_sigmoid_minus_one(norm, training):
    torch.manual_seed(0)
    adaptor = MODELS.build(dict(type='mmstiff.StepNetAdaptor', channels=6, norm=norm))
    adaptor.init_weights()
    adaptor.train(training)
    x_t, f = torch.randn(4, 6, 5, 5), torch.randn(4, 6, 5, 5)
    step = adaptor(x_t, f)
    assert step.shape == (4, 6, 1, 1)
    torch.testing.assert_close(step, torch.full_like(step, SIGMOID_MINUS_ONE))


def test_stepnet_initial_step_tokens():
    torch.manual_seed(0)
    adaptor = StepNetAdaptor(channels=8, layout='nlc')
    x_t, f = torch.randn(3, 7, 8), torch.randn(3, 7, 8)
    step = adaptor(x_t, f)
    assert step.shape == (3, 1, 8)
    torch.testing.assert_close(step, torch.full_like(step, SIGMOID_MINUS_ONE))


def _randomise(adaptor):
    with torch.no_grad():
        for param in adaptor.parameters():
            param.copy_(torch.randn_like(param))
        adaptor.norm.running_mean.copy_(torch.randn(adaptor.channels))
        adaptor.norm.running_var.copy_(torch.rand(adaptor.channels) + 0.5)


def test_stepnet_matches_per_channel_formula_in_eval():
    torch.manual_seed(1)
    channels = 3
    adaptor = StepNetAdaptor(channels)
    _randomise(adaptor)
    adaptor.eval()
    x_t, f = torch.randn(2, channels, 4, 4), torch.randn(2, channels, 4, 4)
    step = adaptor(x_t, f)
    w = adaptor.conv.weight.view(channels, 2)  # groups=C: (w_c0, w_c1) per channel
    bn = adaptor.norm
    for b in range(2):
        for c in range(channels):
            u = x_t[b, c].mean().item()
            v = (x_t[b, c] + f[b, c]).mean().item()
            z = w[c, 0].item() * u + w[c, 1].item() * v
            z = (z - bn.running_mean[c].item()) / math.sqrt(bn.running_var[c].item() + bn.eps)
            z = z * bn.weight[c].item() + bn.bias[c].item()
            z = adaptor.ie_weight[c].item() * z + adaptor.ie_bias[c].item()
            assert step[b, c, 0, 0].item() == pytest.approx(1 / (1 + math.exp(-z)), rel=1e-5)


def test_stepnet_train_uses_batch_statistics_of_pooled_states():
    torch.manual_seed(2)
    channels, groups = 4, 1
    adaptor = StepNetAdaptor(channels, groups=groups)
    _randomise(adaptor)
    adaptor.train()
    x_t, f = torch.randn(5, channels, 3, 3), torch.randn(5, channels, 3, 3)
    u, v = x_t.mean((2, 3)), (x_t + f).mean((2, 3))
    # groups=1: every output channel sees all of interleave(u, v) through one (C, 2C) matrix
    pairs = torch.stack((u, v), dim=2).reshape(5, 2 * channels)
    z = pairs @ adaptor.conv.weight.view(channels, 2 * channels).T
    z = (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + adaptor.norm.eps)
    z = z * adaptor.norm.weight + adaptor.norm.bias
    expected = torch.sigmoid(adaptor.ie_weight * z + adaptor.ie_bias)
    torch.testing.assert_close(adaptor(x_t, f).view(5, channels), expected)


def test_stepnet_tokens_equal_maps():
    torch.manual_seed(3)
    maps, tokens = StepNetAdaptor(8, groups=2), StepNetAdaptor(8, layout='nlc', groups=2)
    _randomise(maps)
    tokens.load_state_dict(maps.state_dict())
    x_t, f = torch.randn(3, 10, 8), torch.randn(3, 10, 8)
    as_maps = lambda t: t.transpose(1, 2).reshape(3, 8, 5, 2)  # noqa: E731
    for mode in (True, False):
        maps.train(mode), tokens.train(mode)
        torch.testing.assert_close(tokens(x_t, f), maps(as_maps(x_t), as_maps(f)).view(3, 1, 8))


def test_stepnet_literal_iebn_variant():
    torch.manual_seed(4)
    adaptor = StepNetAdaptor(4, norm='iebn')
    assert isinstance(adaptor.norm, IEBN) and not hasattr(adaptor, 'ie_weight')
    _randomise(adaptor)
    adaptor.eval()
    x_t, f = torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3)
    u, v = x_t.mean((2, 3)), (x_t + f).mean((2, 3))
    w = adaptor.conv.weight.view(4, 2)
    z = (w[:, 0] * u + w[:, 1] * v)[:, :, None, None]
    torch.testing.assert_close(adaptor(x_t, f), torch.sigmoid(adaptor.norm(z)))
    norm = adaptor.norm
    x_hat = (z.flatten(1) - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps)
    gate = torch.sigmoid(norm.ie_weight * z.flatten(1) + norm.ie_bias)  # GAP of (1, 1) = z
    expected = torch.sigmoid(x_hat * norm.weight * gate + norm.bias)
    torch.testing.assert_close(adaptor(x_t, f).flatten(1), expected)


@pytest.mark.parametrize('norm', ['bn_ie', 'iebn'])
def test_stepnet_single_sample_train_uses_running_statistics(norm):
    torch.manual_seed(5)
    adaptor = StepNetAdaptor(4, norm=norm)
    _randomise(adaptor)
    stats = [adaptor.norm.running_mean.clone(), adaptor.norm.running_var.clone()]
    x_t, f = torch.randn(1, 4, 3, 3, requires_grad=True), torch.randn(1, 4, 3, 3)
    adaptor.train()
    step = adaptor(x_t, f)
    assert adaptor.training and adaptor.norm.training
    assert torch.equal(adaptor.norm.running_mean, stats[0])
    assert torch.equal(adaptor.norm.running_var, stats[1])
    adaptor.eval()
    torch.testing.assert_close(step, adaptor(x_t, f))
    step.sum().backward()
    assert x_t.grad is not None and x_t.grad.abs().sum() > 0
    # with two samples, train mode updates the running statistics
    adaptor.train()
    adaptor(torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3))
    assert not torch.equal(adaptor.norm.running_mean, stats[0])


def test_stepnet_step_depends_on_state_not_only_on_residual():
    torch.manual_seed(6)
    adaptor = StepNetAdaptor(4)
    _randomise(adaptor)
    adaptor.eval()
    f = torch.randn(2, 4, 3, 3)
    assert not torch.allclose(
        adaptor(torch.randn(2, 4, 3, 3), f), adaptor(torch.randn(2, 4, 3, 3), f))


@pytest.mark.parametrize('kwargs, message', [
    (dict(channels=6, groups=4), 'groups=4'),
    (dict(channels=6, norm='ln'), "norm='ln'"),
    (dict(channels=6, layout='nhwc'), "layout='nhwc'"),
    (dict(channels=0), 'channels=0'),
])
def test_stepnet_bad_configuration_names_field(kwargs, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(')):
        MODELS.build(dict(type='mmstiff.StepNetAdaptor', **kwargs))


# ---------------------------------------------------------------- SE (§3)
@pytest.mark.parametrize('channels', [64, 256])
def test_se_matches_mmpretrain_selayer_with_copied_weights(channels):
    torch.manual_seed(7)
    reference = SELayer(channels, ratio=16)
    with torch.no_grad():
        for param in reference.parameters():
            param.copy_(torch.randn_like(param) * 0.1)
    adaptor = MODELS.build(dict(type='mmstiff.SEAdaptor', channels=channels))
    adaptor.load_state_dict(reference.state_dict())  # strict: same names and shapes
    x_t, f = torch.randn(2, channels, 4, 4), torch.randn(2, channels, 4, 4)
    torch.testing.assert_close(apply_step(x_t, adaptor(x_t, f), f), reference(f) + x_t)


def test_se_matches_its_formula_on_tokens():
    torch.manual_seed(8)
    adaptor = SEAdaptor(32, layout='nlc', divisor=1)
    assert adaptor.squeeze_channels == 2
    f = torch.randn(2, 5, 32)
    w1, b1 = adaptor.conv1.conv.weight.view(2, 32), adaptor.conv1.conv.bias
    w2, b2 = adaptor.conv2.conv.weight.view(32, 2), adaptor.conv2.conv.bias
    expected = torch.sigmoid(torch.relu(f.mean(1) @ w1.T + b1) @ w2.T + b2)
    torch.testing.assert_close(adaptor(torch.randn(2, 5, 32), f), expected[:, None, :])


def test_se_bad_ratio_names_field():
    with pytest.raises(ValueError, match='ratio=0'):
        SEAdaptor(16, ratio=0)
