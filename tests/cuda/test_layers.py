"""Adaptors, AttnScale, FeatScale and the circulant layer on the GPU and under autocast.

Each case runs a layer forward and backward on one device and precision and compares outputs
and gradients with the same layer (same weights, same inputs) in float32 on the CPU:

* ``cuda``, float32: equal within float32 tolerances (TF32 off, see conftest.py);
* ``cuda`` and ``cpu`` under ``torch.autocast`` (float16 on CUDA, bfloat16 on both): within
  the precision of the autocast dtype, finite, and the closed forms of AttnScale and FeatScale
  keep the dtype of their input (they are fed what the fused attention and the projection hand
  them under autocast: half-precision tensors).

The CPU bfloat16 variants run everywhere; the CUDA ones only where a GPU is present.
"""
import copy

import pytest
import torch

from mmstiff.models.layers import CirculantLinear
from mmstiff.models.layers.attn_scale import AttnScale
from mmstiff.models.layers.feat_scale import FeatScale
from mmstiff.registry import MODELS

#: (device, autocast dtype or None for float32): every combination but float32 on the CPU, the
#: reference itself
SETTINGS = [
    pytest.param(('cuda', None), marks=pytest.mark.cuda, id='cuda-fp32'),
    pytest.param(('cuda', torch.float16), marks=pytest.mark.cuda, id='cuda-fp16'),
    pytest.param(('cuda', torch.bfloat16), marks=pytest.mark.cuda, id='cuda-bf16'),
    pytest.param(('cpu', torch.bfloat16), id='cpu-bf16'),
]
#: relative tolerance of a result computed in each precision, against float32
RTOL = {None: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}

ADAPTORS = {
    'constant': dict(type='mmstiff.ConstantStep', step=0.5),
    'se-nchw': dict(type='mmstiff.SEAdaptor', channels=16, ratio=4),
    'se-nlc': dict(type='mmstiff.SEAdaptor', channels=16, ratio=4, layout='nlc'),
    'se-identity': dict(type='mmstiff.SEAdaptor', channels=16, ratio=4, start='identity'),
    'stepnet-nchw': dict(type='mmstiff.StepNetAdaptor', channels=16),
    'stepnet-nlc': dict(type='mmstiff.StepNetAdaptor', channels=16, layout='nlc'),
    'stepnet-iebn': dict(type='mmstiff.StepNetAdaptor', channels=16, norm='iebn'),
    'stepnet-groups': dict(type='mmstiff.StepNetAdaptor', channels=16, groups=4, start='identity'),
}


def _close(actual, expected, rtol, what):
    actual = actual.detach().float().cpu()
    expected = expected.detach().float().cpu()
    assert torch.isfinite(actual).all(), f'{what}: not finite'
    scale = expected.abs().max().clamp_min(1e-6)
    error = (actual - expected).abs().max() / scale
    assert error <= rtol, f'{what}: max error {float(error):.3g} of the largest value > {rtol}'


def _run(module, inputs, device, dtype, grad_seed=0):
    """Forward (under autocast when ``dtype``) and backward of ``module`` on ``device``: the
    output, the gradients of the inputs and of the parameters."""
    module = module.to(device)
    inputs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
        out = module(*inputs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed))
    out.backward(grad.to(device, out.dtype))
    params = {name: p.grad for name, p in module.named_parameters() if p.grad is not None}
    return out, [x.grad for x in inputs], params


def _compare(build, inputs, setting):
    device, dtype = setting
    torch.manual_seed(0)
    reference = build()
    tested = copy.deepcopy(reference)
    expected = _run(reference, inputs, 'cpu', None)
    actual = _run(tested, inputs, device, dtype)
    rtol = RTOL[dtype]
    _close(actual[0], expected[0], rtol, 'output')
    for i, (a, b) in enumerate(zip(actual[1], expected[1])):
        if b is not None:
            _close(a, b, rtol, f'gradient of input {i}')
    assert actual[2].keys() == expected[2].keys()
    for name in expected[2]:
        _close(actual[2][name], expected[2][name], rtol, f'gradient of {name}')
    return actual


class StepOf(torch.nn.Module):
    """``x_t + Δ(x_t, f) ⊙ f`` with an adaptor, the Euler step it is built for."""

    def __init__(self, cfg):
        super().__init__()
        self.adaptor = MODELS.build(cfg)

    def forward(self, x_t, f):
        step = self.adaptor(x_t, f)
        return x_t + step * f


@pytest.mark.parametrize('setting', SETTINGS)
@pytest.mark.parametrize('name', list(ADAPTORS))
def test_adaptors(name, setting):
    cfg = ADAPTORS[name]
    gen = torch.Generator().manual_seed(1)
    shape = (4, 9, 16) if cfg.get('layout') == 'nlc' else (4, 16, 5, 5)
    inputs = [torch.randn(*shape, generator=gen), torch.randn(*shape, generator=gen)]

    def build():
        step = StepOf(cfg).train()  # batch statistics in the adaptors' BN
        with torch.no_grad():  # a step size that depends on the sample
            for p in step.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
        return step

    _compare(build, inputs, setting)


class AttnScaleOnAttention(torch.nn.Module):
    """The ``qkv`` projection, fused attention, then AttnScale's closed form: as StepViT computes
    it (under autocast, the projection and the attention hand half-precision tensors on)."""

    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(channels, 3 * channels)
        self.attn_scale = AttnScale(heads)
        with torch.no_grad():
            self.attn_scale.omega.copy_(torch.linspace(-0.5, 1.5, heads))

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        scaled = self.attn_scale(out, v)
        assert scaled.dtype == out.dtype  # the closed form keeps the dtype it is given
        return scaled


@pytest.mark.parametrize('setting', SETTINGS)
def test_attn_scale_closed_form_and_backward(setting):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 17, 24, generator=gen)
    out, _, grads = _compare(lambda: AttnScaleOnAttention(24, 3), [x], setting)
    assert 'attn_scale.omega' in grads
    if setting[1] is not None:
        assert out.dtype == setting[1]


@pytest.mark.parametrize('setting', SETTINGS)
def test_attn_scale_does_not_overflow_in_half_precision(setting):
    # values near what float16 holds: the token mean must not be a sum that overflows
    device, dtype = setting
    gen = torch.Generator().manual_seed(3)
    out = (3e4 * torch.rand(1, 2, 197, 8, generator=gen)).to(device, dtype or torch.float32)
    v = (3e4 * torch.rand(1, 2, 197, 8, generator=gen)).to(device, dtype or torch.float32)
    layer = AttnScale(2).to(device)
    with torch.no_grad():
        layer.omega.fill_(0.5)
    y = layer(out, v)
    assert y.dtype == out.dtype and torch.isfinite(y).all()
    expected = 1.5 * out.double() - 0.5 * v.double().mean(dim=-2, keepdim=True)
    _close(y, expected, RTOL[dtype], 'output')


class FeatScaleOnProjection(torch.nn.Module):
    """A linear projection (half precision under autocast), then FeatScale's closed form."""

    def __init__(self, channels):
        super().__init__()
        self.proj = torch.nn.Linear(channels, channels)
        self.feat_scale = FeatScale(channels)
        with torch.no_grad():
            self.feat_scale.dc_scale.copy_(torch.linspace(-0.5, 0.5, channels))
            self.feat_scale.hc_scale.copy_(torch.linspace(0.8, -0.2, channels))

    def forward(self, x):
        h = self.proj(x)
        y = self.feat_scale(h)
        assert y.dtype == h.dtype
        return y


@pytest.mark.parametrize('setting', SETTINGS)
def test_feat_scale_closed_form_and_backward(setting):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 17, 12, generator=gen)
    out, _, _ = _compare(lambda: FeatScaleOnProjection(12), [x], setting)
    if setting[1] is not None:
        assert out.dtype == setting[1]


class FoldedAttention(torch.nn.Module):
    """StepViT's attention with AttnScale and FeatScale folded into its output projection."""

    def __init__(self, channels, heads):
        super().__init__()
        from mmstiff.models.backbones.step_vit import StepMultiheadAttention
        self.attn = StepMultiheadAttention(channels, heads, attn_scale=True, feat_scale=True)
        with torch.no_grad():
            self.attn.attn_scale.omega.copy_(torch.linspace(-0.5, 1.5, heads))
            self.attn.feat_scale.dc_scale.copy_(torch.linspace(-0.5, 0.5, channels))
            self.attn.feat_scale.hc_scale.copy_(torch.linspace(0.8, -0.2, channels))

    def forward(self, x):
        return self.attn(x)


@pytest.mark.parametrize('setting', SETTINGS)
def test_folded_scales_against_the_layers_in_float32_on_the_cpu(setting):
    device, dtype = setting
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 17, 24, generator=gen)
    torch.manual_seed(0)
    layered = FoldedAttention(24, 3)
    folded = copy.deepcopy(layered)
    layered.attn.fold_scales = False
    expected = _run(layered, [x], 'cpu', None)
    actual = _run(folded, [x], device, dtype)
    rtol = RTOL[dtype]
    _close(actual[0], expected[0], rtol, 'output')
    _close(actual[1][0], expected[1][0], rtol, 'gradient of x')
    assert actual[2].keys() == expected[2].keys()
    for name in expected[2]:
        _close(actual[2][name], expected[2][name], rtol, f'gradient of {name}')
    if dtype is not None:
        assert actual[0].dtype == dtype


@pytest.mark.parametrize('setting', SETTINGS)
def test_feat_scale_does_not_overflow_in_half_precision(setting):
    device, dtype = setting
    gen = torch.Generator().manual_seed(5)
    x = (3e4 * torch.rand(1, 197, 8, generator=gen)).to(device, dtype or torch.float32)
    layer = FeatScale(8).to(device)
    y = layer(x)  # s = t = 0: the identity
    assert y.dtype == x.dtype and torch.isfinite(y).all()
    _close(y, x, RTOL[dtype], 'output')


@pytest.mark.parametrize('setting', SETTINGS)
@pytest.mark.parametrize('features', [(16, 24), (24, 16)])
def test_circulant_linear(features, setting):
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(5, 7, features[0], generator=gen)
    out, _, grads = _compare(lambda: CirculantLinear(*features, num_blocks=4), [x], setting)
    assert set(grads) == {'weight_vectors', 'bias'}
    if setting[1] is not None:
        assert out.dtype == setting[1]  # F.linear runs in the autocast dtype
