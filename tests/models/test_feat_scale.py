"""FeatScale (docs/methods.md §7): X <- X_DC (1 + s) + X_HC (1 + t)."""
import pytest
import torch

from mmstiff.models.layers.feat_scale import FeatScale, feat_scale, split_frequencies


def test_feat_scale_equals_the_dc_hc_formula():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 5)
    s, t = torch.randn(5), torch.randn(5)
    x_dc = x.sum(dim=1, keepdim=True) / 7
    x_hc = x - x_dc
    expected = x_dc * (1 + s) + x_hc * (1 + t)
    torch.testing.assert_close(feat_scale(x, s, t), expected)


def test_hand_computed_case():
    # two tokens, one channel: DC = 2, HC = (-1, +1); s = 1 doubles DC, t = -0.5 halves HC
    x = torch.tensor([[[1.], [3.]]])
    out = feat_scale(x, torch.tensor([1.]), torch.tensor([-0.5]))
    assert out.flatten().tolist() == [3.5, 4.5]


def test_split_frequencies():
    x = torch.tensor([[[1., 0.], [3., 4.]]])
    x_dc, x_hc = split_frequencies(x)
    assert x_dc.tolist() == [[[2., 2.]]]
    assert x_hc.tolist() == [[[-1., -2.], [1., 2.]]]


def test_fresh_feat_scale_is_identity_and_learns():
    layer = FeatScale(4)
    x = torch.randn(2, 6, 4)
    torch.testing.assert_close(layer(x), x)
    layer(x).pow(2).sum().backward()
    assert layer.dc_scale.grad.abs().sum() > 0 and layer.hc_scale.grad.abs().sum() > 0


def test_extreme_scales_keep_one_band():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4)
    only_dc = feat_scale(x, torch.zeros(4), -torch.ones(4))  # t = -1 removes HC
    torch.testing.assert_close(only_dc, x.mean(1, keepdim=True).expand_as(x))
    only_hc = feat_scale(x, -torch.ones(4), torch.zeros(4))  # s = -1 removes DC
    torch.testing.assert_close(only_hc.mean(1), torch.zeros(2, 4), atol=1e-6, rtol=0)


def test_bad_channels():
    with pytest.raises(ValueError, match='channels=0'):
        FeatScale(0)


def test_hand_written_backward_matches_autograd_of_the_formula():
    torch.manual_seed(0)
    args = [
        torch.randn(3, 5, 4, dtype=torch.double, requires_grad=True),
        torch.randn(4, dtype=torch.double, requires_grad=True),
        torch.randn(4, dtype=torch.double, requires_grad=True)
    ]
    assert torch.autograd.gradcheck(feat_scale, args)
    # second derivatives too (the Hessian tools differentiate the backward pass)
    assert torch.autograd.gradgradcheck(feat_scale, args)

    def formula(x, s, t):
        x_dc = x.mean(1, keepdim=True)
        return x_dc * (1 + s) + (x - x_dc) * (1 + t)

    grad = torch.randn(3, 5, 4, dtype=torch.double)
    ours = torch.autograd.grad(feat_scale(*args), args, grad)
    expected = torch.autograd.grad(formula(*args), args, grad)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b)


def test_low_precision_tokens_keep_their_dtype():
    layer = FeatScale(4)
    x = torch.randn(2, 3, 4, dtype=torch.bfloat16, requires_grad=True)
    y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.hc_scale.grad.dtype == torch.float32 and x.grad.dtype == torch.bfloat16
