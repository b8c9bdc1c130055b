"""IEBN (docs/methods.md §2): its formula on a hand-built case, and its use as a norm layer."""
import math

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.layers import IEBN


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_iebn_matches_formula_on_hand_built_case():
    # Two samples, one channel, 1x2 maps: every number below is worked out by hand.
    x = torch.tensor([[[[1.0, 3.0]]], [[[5.0, 7.0]]]])  # (B=2, C=1, 1, 2)
    layer = IEBN(1, eps=1e-3)
    with torch.no_grad():
        layer.weight.fill_(2.0)  # γ
        layer.bias.fill_(0.5)  # β
        layer.ie_weight.fill_(0.25)  # w
        layer.ie_bias.fill_(-1.0)  # b
    layer.train()
    y = layer(x)
    # batch mean 4, biased variance ((9 + 1 + 1 + 9) / 4) = 5
    x_hat = [[(v - 4.0) / math.sqrt(5.0 + 1e-3) for v in row] for row in ([1.0, 3.0], [5.0, 7.0])]
    gaps = [2.0, 6.0]  # GAP of each sample
    gates = [_sigmoid(0.25 * g - 1.0) for g in gaps]
    expected = torch.tensor([[[[xh * 2.0 * a + 0.5 for xh in row]]]
                             for row, a in zip(x_hat, gates)])
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
    # running statistics follow BatchNorm2d: mean 0.1 * 4, unbiased var 0.9 + 0.1 * 20 / 3
    torch.testing.assert_close(layer.running_mean, torch.tensor([0.4]))
    torch.testing.assert_close(layer.running_var, torch.tensor([0.9 + 0.1 * 20.0 / 3.0]))


def test_iebn_eval_uses_running_statistics():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, 5)
    layer = IEBN(4)
    with torch.no_grad():
        layer.running_mean.copy_(torch.randn(4))
        layer.running_var.copy_(torch.rand(4) + 0.5)
        layer.weight.copy_(torch.randn(4))
        layer.bias.copy_(torch.randn(4))
        layer.ie_weight.copy_(torch.randn(4))
        layer.ie_bias.copy_(torch.randn(4))
    layer.eval()
    mean, var = layer.running_mean.view(1, 4, 1, 1), layer.running_var.view(1, 4, 1, 1)
    x_hat = (x - mean) / torch.sqrt(var + layer.eps)
    gate = torch.sigmoid(
        layer.ie_weight.view(1, 4, 1, 1) * x.mean((2, 3), keepdim=True) +
        layer.ie_bias.view(1, 4, 1, 1))
    expected = x_hat * (layer.weight.view(1, 4, 1, 1) * gate) + layer.bias.view(1, 4, 1, 1)
    torch.testing.assert_close(layer(x), expected)


def test_iebn_initial_gate_is_sigmoid_minus_one():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 4)
    layer, bn = IEBN(3), nn.BatchNorm2d(3)
    assert torch.equal(layer.ie_weight, torch.zeros(3))
    assert torch.equal(layer.ie_bias, torch.full((3, ), -1.0))
    torch.testing.assert_close(layer(x), bn(x) * _sigmoid(-1.0))
    layer.reset_parameters()
    assert torch.equal(layer.ie_bias, torch.full((3, ), -1.0))


def test_iebn_is_a_registered_norm_layer_with_bn_names():
    name, layer = build_norm_layer(dict(type='mmstiff.IEBN', requires_grad=False), 8, postfix=2)
    assert name == 'bn2'
    assert isinstance(layer, IEBN) and isinstance(layer, _BatchNorm)
    assert not any(p.requires_grad for p in layer.parameters())
    # a BatchNorm2d checkpoint loads with only the gate parameters missing
    result = layer.load_state_dict(nn.BatchNorm2d(8).state_dict(), strict=False)
    assert sorted(result.missing_keys) == ['ie_bias', 'ie_weight']
    assert result.unexpected_keys == []


def test_resnet_with_iebn_norm_layers_loads_a_bn_checkpoint():
    from mmpretrain.models.backbones import ResNet

    torch.manual_seed(0)
    bn_resnet = ResNet(18)
    iebn_resnet = ResNet(18, norm_cfg=dict(type='mmstiff.IEBN'))
    result = iebn_resnet.load_state_dict(bn_resnet.state_dict(), strict=False)
    gates = {k for k in iebn_resnet.state_dict() if k.endswith(('ie_weight', 'ie_bias'))}
    assert len(gates) == 2 * 20  # stem 1 + 8 blocks x 2 + 3 downsample norms, 2 gates each
    assert set(result.missing_keys) == gates and result.unexpected_keys == []
    iebn_resnet.train()
    assert iebn_resnet(torch.randn(2, 3, 32, 32))[0].shape == (2, 512, 1, 1)
