"""AttnScale and FeatScale folded into the output projection (docs/methods.md §7, "Folded into
the projection"), against the three layers applied one after the other."""
import copy

import pytest
import torch
import torch.nn.functional as F

from mmstiff.models.layers.scaled_projection import (foldable_projection, scaled_projection,
                                                     token_mean)

B, N, H, D, C = 3, 5, 2, 3, 4  # K = H * D = 6 input columns, C = 4 output channels


def layered(a, v, weight, bias, omega, dc_scale, hc_scale):
    """The explicit formulas, one layer after the other, in plain tensor arithmetic."""
    y = a
    if omega is not None:
        w = omega.repeat_interleave(D)
        y = a * (1 + w) - v.mean(dim=1, keepdim=True) * w  # v (B, N, K) here
    x = y @ weight.t()
    if bias is not None:
        x = x + bias
    if dc_scale is None:
        return x
    x_dc = x.mean(dim=1, keepdim=True)
    return x_dc * (1 + dc_scale) + (x - x_dc) * (1 + hc_scale)


def inputs(dtype=torch.double, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    return dict(
        a=r(B, N, H * D), v=r(B, N, H * D), weight=r(C, H * D), bias=r(C), omega=r(H),
        dc_scale=r(C), hc_scale=r(C))


def folded(a, v, weight, bias, omega, dc_scale, hc_scale):
    attn = {} if omega is None else dict(omega=omega, v_mean=v.mean(dim=1))
    return scaled_projection(a, weight, bias, dc_scale=dc_scale, hc_scale=hc_scale, **attn)


CASES = {
    'attn': dict(dc_scale=None, hc_scale=None),
    'feat': dict(omega=None),
    'both': dict(),
    'both, no bias': dict(bias=None),
    'feat, no bias': dict(omega=None, bias=None),
}


@pytest.mark.parametrize('case', list(CASES))
def test_folded_equals_the_layers_forward_and_every_gradient(case):
    args = {**inputs(), **CASES[case]}
    leaves = {k: t for k, t in args.items() if t is not None}
    want = layered(**args)
    got = folded(**args)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, list(leaves.values()), grad, allow_unused=True)
    got_grads = torch.autograd.grad(got, list(leaves.values()), grad, allow_unused=True)
    for name, w, g in zip(leaves, want_grads, got_grads):
        if w is None:  # v without AttnScale
            assert g is None, name
        else:
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)


def test_folded_has_second_derivatives():
    args = inputs()
    leaves = [args[k] for k in ('a', 'v', 'weight', 'omega', 'dc_scale', 'hc_scale')]

    def fn(a, v, weight, omega, dc_scale, hc_scale):
        return folded(a, v, weight, args['bias'], omega, dc_scale, hc_scale)

    assert torch.autograd.gradgradcheck(fn, leaves)


def test_fresh_scales_are_the_plain_projection():
    args = inputs()
    zero = {k: torch.zeros_like(args[k]) for k in ('omega', 'dc_scale', 'hc_scale')}
    got = folded(**{**args, **zero})
    torch.testing.assert_close(got, F.linear(args['a'], args['weight'], args['bias']))


def test_half_precision_projection_keeps_its_dtype_under_autocast():
    args = {k: t.detach().float() for k, t in inputs().items()}
    with torch.autocast('cpu', dtype=torch.bfloat16):
        got = folded(**{**args, 'a': args['a'].bfloat16()})
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), layered(**args), rtol=0.05, atol=0.05)


def test_bad_input_is_refused_by_name():
    args = inputs()
    a, weight, omega = args['a'], args['weight'], args['omega']
    v_mean = args['v'].mean(dim=1)
    with pytest.raises(ValueError, match='omega given, v_mean None'):
        scaled_projection(a, weight, omega=omega)
    with pytest.raises(ValueError, match='dc_scale given, hc_scale None'):
        scaled_projection(a, weight, dc_scale=args['dc_scale'])
    with pytest.raises(ValueError, match=r'a has 5 channels .* expected the projection\'s 6'):
        scaled_projection(a[..., :5], weight)
    with pytest.raises(ValueError, match=r'omega has shape \(4,\); .* H dividing the 6'):
        scaled_projection(a, weight, omega=torch.zeros(4), v_mean=v_mean)
    with pytest.raises(ValueError, match='v_mean has 5 values per sample; expected 6'):
        scaled_projection(a, weight, omega=omega, v_mean=v_mean[:, :5])


def test_only_a_plain_linear_without_hooks_is_folded():
    proj = torch.nn.Linear(4, 4)
    assert foldable_projection(proj)

    class LoRALinear(torch.nn.Linear):
        pass

    assert not foldable_projection(LoRALinear(4, 4))
    hooked = copy.deepcopy(proj)
    hooked.register_forward_hook(lambda *args: None)
    assert not foldable_projection(hooked)
    hooked = copy.deepcopy(proj)
    hooked.register_full_backward_hook(lambda *args: None)
    assert not foldable_projection(hooked)


def test_token_mean_and_its_gradient_are_a_mean_s():
    x = torch.randn(2, 5, 3, dtype=torch.double, requires_grad=True)
    got = token_mean(x)
    torch.testing.assert_close(got, x.sum(dim=1) / 5)
    grad = torch.randn(2, 3, dtype=torch.double)
    (grad_x, ) = torch.autograd.grad(got, x, grad)
    torch.testing.assert_close(grad_x, grad.unsqueeze(1).expand(2, 5, 3) / 5)
    assert grad_x.stride(1) == 0  # a broadcast view, not written out
    assert torch.autograd.gradgradcheck(token_mean, [x])


def test_token_mean_keeps_half_precision_and_does_not_overflow():
    x = torch.full((1, 197, 4), 3e4, dtype=torch.float16, requires_grad=True)
    got = token_mean(x)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    got.sum().backward()
    assert x.grad.dtype == torch.float16
