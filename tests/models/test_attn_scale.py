"""AttnScale (docs/methods.md §6): closed form against the explicit A_LP + (1 + ω) A_HP."""
import pytest
import torch
import torch.nn as nn

from mmstiff.models.layers.attn_scale import (AttentionMapMixin, AttnScale, attn_scale_matrix,
                                              attn_scale_output, record_attention_maps)


def explicit(attn, v, omega):
    n = attn.shape[-1]
    a_lp = torch.ones(n, n) / n
    a_hp = attn - a_lp
    a_hat = a_lp + (1 + omega.view(-1, 1, 1)) * a_hp
    return a_hat, a_hat @ v


@pytest.mark.parametrize('n', [1, 5, 17])
def test_closed_form_equals_explicit_matrix(n):
    torch.manual_seed(n)
    B, H, d = 2, 3, 4
    attn = torch.randn(B, H, n, n).softmax(-1)
    v = torch.randn(B, H, n, d)
    omega = torch.randn(H)
    a_hat, expected = explicit(attn, v, omega)
    torch.testing.assert_close(attn_scale_output(attn @ v, v, omega), expected)
    torch.testing.assert_close(attn_scale_matrix(attn, omega), a_hat)


def test_closed_form_with_additive_mask_inside_the_softmax():
    # a masked softmax still has rows summing to one, so the mean of V over ALL n tokens appears
    torch.manual_seed(0)
    logits = torch.randn(2, 2, 6, 6)
    mask = torch.zeros(6, 6)
    mask[:3, 3:] = mask[3:, :3] = -100.
    attn = (logits + mask).softmax(-1)
    v = torch.randn(2, 2, 6, 3)
    omega = torch.tensor([0.7, -0.3])
    torch.testing.assert_close(attn_scale_output(attn @ v, v, omega), explicit(attn, v, omega)[1])


def test_scaled_attention_rows_still_sum_to_one():
    attn = torch.randn(1, 2, 4, 4).softmax(-1)
    a_hat = attn_scale_matrix(attn, torch.tensor([3., -2.]))
    torch.testing.assert_close(a_hat.sum(-1), torch.ones(1, 2, 4))


def test_omega_minus_one_is_the_pure_low_pass_filter():
    attn = torch.randn(1, 1, 4, 4).softmax(-1)
    v = torch.randn(1, 1, 4, 2)
    out = attn_scale_output(attn @ v, v, torch.tensor([-1.]))
    torch.testing.assert_close(out, v.mean(2, keepdim=True).expand_as(v))


def test_fresh_module_is_plain_attention():
    layer = AttnScale(3)
    assert layer.omega.shape == (3, ) and not layer.omega.any()
    out, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(layer(out, v), out)
    with pytest.raises(ValueError, match='num_heads=0'):
        AttnScale(0)


class _ToyAttention(nn.Module, AttentionMapMixin):

    def forward(self, x):
        attn = (x @ x.transpose(-2, -1)).softmax(-1)
        if self.keep_attn_map:
            self._store_attn_map(attn)
        return attn @ x


def test_record_attention_maps_fills_and_restores():
    model = nn.Sequential(_ToyAttention(), _ToyAttention())
    x = torch.randn(2, 3, 4)
    with record_attention_maps(model) as maps:
        model(x)
        assert sorted(maps) == ['0', '1']
        expected = (x @ x.transpose(-2, -1)).softmax(-1)
        torch.testing.assert_close(maps['0'], expected)
    assert not any(m.keep_attn_map for m in model)
    model(x)
    assert sorted(maps) == ['0', '1']  # later passes do not write into a closed recording


@pytest.mark.parametrize('shape', [(2, 3, 5, 4), (2, 4, 3, 5, 4)])
def test_hand_written_backward_matches_autograd_of_the_formula(shape):
    torch.manual_seed(0)
    H, n = shape[-3], shape[-2]
    args = [
        torch.randn(*shape, dtype=torch.double, requires_grad=True),
        torch.randn(*shape, dtype=torch.double, requires_grad=True),
        torch.randn(H, dtype=torch.double, requires_grad=True)
    ]
    assert torch.autograd.gradcheck(attn_scale_output, args)
    # second derivatives too (the Hessian tools differentiate the backward pass)
    assert torch.autograd.gradgradcheck(attn_scale_output, args)

    def formula(out, v, omega):  # Â V = A_LP V + (1 + ω)(A V - A_LP V)
        low_pass = (torch.ones(n, n, dtype=torch.double) / n) @ v
        return low_pass + (1 + omega.view(H, 1, 1)) * (out - low_pass)

    grad = torch.randn(*shape, dtype=torch.double)
    ours = torch.autograd.grad(attn_scale_output(*args), args, grad)
    expected = torch.autograd.grad(formula(*args), args, grad)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b)


def test_low_precision_outputs_keep_their_dtype():
    layer = AttnScale(2)
    out = torch.randn(1, 2, 3, 4, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, 2, 3, 4, dtype=torch.bfloat16, requires_grad=True)
    y = layer(out, v)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.omega.grad.dtype == torch.float32 and v.grad.dtype == torch.bfloat16
