"""The folded projection's weight and bias in one autograd node, against autograd of the same
closed forms (docs/methods.md §7, "Folded into the projection")."""
import pytest
import torch

from mmstiff.models.layers.scaled_weights import INPUTS, scaled_weights, scaled_weights_reference

B, H, D, C = 3, 2, 3, 4


def inputs(drop=(), dtype=torch.double):
    g = torch.Generator().manual_seed(0)
    shapes = dict(
        weight=(C, H * D), bias=(C, ), omega=(H, ), v_mean=(B, H * D), a_mean=(B, H * D),
        dc_scale=(C, ), hc_scale=(C, ))
    return {
        name:
        None if name in drop else torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()
        for name, shape in shapes.items()
    }


CASES = {
    'both': (),
    'both, no bias': ('bias', ),
    'attn': ('a_mean', 'dc_scale', 'hc_scale'),
    'attn, no bias': ('bias', 'a_mean', 'dc_scale', 'hc_scale'),
    'feat': ('omega', 'v_mean'),
    'feat, no bias': ('omega', 'v_mean', 'bias'),
}


@pytest.mark.parametrize('case', list(CASES))
def test_one_node_equals_autograd_of_the_closed_forms(case):
    args = inputs(CASES[case])
    want = scaled_weights_reference(**args)
    got = scaled_weights(**args)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    names = [n for n in INPUTS if args[n] is not None]
    leaves = [args[n] for n in names]
    out_grads = [torch.randn_like(t) for t in want]
    want_grads = torch.autograd.grad(want, leaves, out_grads)
    got_grads = torch.autograd.grad(got, leaves, out_grads)
    for w, g, name in zip(want_grads, got_grads, names):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize('case', ['both', 'feat, no bias'])
def test_one_node_has_second_derivatives(case):
    args = inputs(CASES[case])
    names = [n for n in INPUTS if args[n] is not None]

    def fn(*leaves):
        return scaled_weights(**dict(zip(names, leaves)))

    assert torch.autograd.gradgradcheck(fn, [args[n] for n in names])


def test_autocast_leaves_the_small_arithmetic_in_the_weights_dtype():
    args = {k: None if t is None else t.detach().float() for k, t in inputs().items()}
    args['v_mean'], args['a_mean'] = args['v_mean'].bfloat16(), args['a_mean'].bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        weight, beta = scaled_weights(**args)
    assert weight.dtype == beta.dtype == torch.float32
    want = scaled_weights_reference(**{
        k: None if t is None else t.float()
        for k, t in args.items()
    })
    torch.testing.assert_close(beta, want[1])
