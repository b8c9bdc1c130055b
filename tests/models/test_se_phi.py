"""SE's (B, C) arithmetic in one computation each way (docs/methods.md §0, "The fused step").

The PyTorch passes (the reference of the Triton kernels, tests/models/test_triton_step.py) give
the adaptor's Δ and every gradient of its own modules, the hand-written backward passes
``gradcheck``, and where :func:`se_phi_applies` refuses, the modules run. Outside a fused step the
two matrix products of :func:`se_excitation` give what the units give, and hooked or other
units are called.
"""
import copy

import pytest
import torch
import torch.nn as nn
from fused_backbone_pair import backbone_pair  # tests/

from mmstiff.models.steps import SEAdaptor, step_from_means
from mmstiff.models.steps.fused import FusedPhi
from mmstiff.models.steps.fused.se_phi import SEPhi, TorchSEPhiKernels, se_phi_applies
from mmstiff.models.steps.fused.stepnet_phi import TorchPhiKernels
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.models.steps.se import plain_units


def _adaptor(channels=32, start='paper', **kwargs):
    torch.manual_seed(0)
    adaptor = SEAdaptor(channels, start=start, **kwargs)
    with torch.no_grad():  # off the start: the identity start's W2 = 0 hides W1's gradient
        for p in adaptor.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return adaptor


def _run(adaptor, kernels, p):
    """Δ and the gradients of (p, parameters) under a weighted sum of Δ; ``kernels`` 'units':
    Δ from calling the adaptor's two units on ``p`` as a (B, C, 1, 1) map."""
    p = p.clone().requires_grad_()
    if kernels == 'units':
        step = adaptor.conv2(adaptor.conv1(p[:, :, None, None])) * adaptor.step_scale
        step = step.view(-1, 1, adaptor.channels) if adaptor.layout == 'nlc' else step
    else:
        phi = None if kernels is None else FusedPhi(kernels)
        step = step_from_means(adaptor, None, p, phi)
    weights = torch.linspace(-1, 1, step.numel()).view_as(step)
    return [step, *torch.autograd.grad((step * weights).sum(), [p, *adaptor.parameters()])]


@pytest.mark.parametrize('start, layout, batch', [('paper', 'nchw', 5), ('identity', 'nchw', 5),
                                                  ('paper', 'nlc', 3), ('paper', 'nchw', 1)])
def test_torch_se_phi_equals_the_adaptor_modules(start, layout, batch):
    reference = _adaptor(start=start, layout=layout)
    fused = copy.deepcopy(reference)
    assert se_phi_applies(fused, batch, TorchSEPhiKernels)
    torch.manual_seed(1)
    p = torch.randn(batch, 32)
    expected, got = _run(reference, 'units', p), _run(fused, TorchSEPhiKernels, p)
    assert got[0].shape == expected[0].shape == ((batch, 32, 1, 1) if layout == 'nchw' else
                                                 (batch, 1, 32))
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('start, layout, batch', [('paper', 'nchw', 5), ('identity', 'nchw', 5),
                                                  ('paper', 'nlc', 3), ('paper', 'nchw', 1)])
def test_matrix_products_equal_the_units_outside_a_fused_step(start, layout, batch):
    adaptor = _adaptor(start=start, layout=layout)
    assert plain_units(adaptor)
    torch.manual_seed(1)
    p = torch.randn(batch, 32)
    expected, got = _run(adaptor, 'units', p), _run(adaptor, None, p)
    assert got[0].shape == expected[0].shape
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_hooked_or_other_units_are_called_outside_a_fused_step():
    """A hook on a unit sees the unit's call; a unit that is not a plain 1×1 convolution with
    its activation computes Δ itself."""
    p = torch.randn(4, 32)
    hooked = _adaptor()
    seen = []
    hooked.conv1.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    other = _adaptor()
    other.conv2.activate = nn.Hardsigmoid()
    for adaptor in (hooked, other):
        assert not plain_units(adaptor)
        for a, b in zip(_run(adaptor, 'units', p), _run(adaptor, None, p)):
            torch.testing.assert_close(b, a)
    assert seen == [(4, hooked.squeeze_channels, 1, 1)] * 2  # the explicit run, then the step's


def test_plain_units_are_not_called_outside_a_fused_step():
    adaptor = _adaptor()
    calls = []
    for unit in (adaptor.conv1, adaptor.conv2):
        unit.forward = lambda x, inner=unit.forward: calls.append(x.shape) or inner(x)
    assert plain_units(adaptor)
    adaptor.step_from_pooled(None, torch.randn(4, 32))
    assert calls == []


def test_matrix_products_keep_the_units_dtype_under_autocast():
    adaptor = _adaptor()
    p = torch.randn(4, 32)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        expected = adaptor.conv2(adaptor.conv1(p[:, :, None, None]))
        got = adaptor.step_from_pooled(None, p)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)


def test_se_backward_pass_gradchecks():
    torch.manual_seed(0)
    shapes = [(4, 6), (3, 6), (3, ), (6, 3), (6, )]  # p, W1, b1, W2, b2
    args = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]

    def phi(*tensors):
        return SEPhi.apply(*tensors, 2.0, TorchSEPhiKernels)

    assert torch.autograd.gradcheck(phi, args)


def test_the_hand_written_passes_equal_autograd_of_the_formula():
    """``Δ = scale σ(W2 relu(W1 p + b1) + b2)`` written out, differentiated by autograd."""
    torch.manual_seed(0)
    p, w1, b1, w2, b2 = (
        torch.randn(*s, dtype=torch.float64, requires_grad=True)
        for s in [(7, 5), (3, 5), (3, ), (5, 3), (5, )])
    grad = torch.randn(7, 5, dtype=torch.float64)
    formula = 2.0 * torch.sigmoid(torch.relu(p @ w1.T + b1) @ w2.T + b2)
    expected = torch.autograd.grad(formula, [p, w1, b1, w2, b2], grad)
    step, hidden = TorchSEPhiKernels.se_forward(p, w1, b1, w2, b2, 2.0)
    torch.testing.assert_close(step, formula)
    got = TorchSEPhiKernels.se_backward(grad, p, hidden, step, w1, w2, 2.0)
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a)


def test_se_phi_applies_leaves_other_adaptors_to_their_modules():
    kernels = TorchSEPhiKernels
    assert se_phi_applies(_adaptor(), 4, kernels)
    assert not se_phi_applies(_adaptor(), 4, TorchPhiKernels)  # StepNet's passes only
    hooked = [_adaptor() for _ in range(3)]
    hooked[0].conv1.register_forward_hook(lambda *args: None)
    hooked[1].conv2.conv.register_forward_pre_hook(lambda *args: None)
    hooked[2].conv1.activate.register_full_backward_hook(lambda *args: None)
    other_unit = _adaptor()
    other_unit.conv2.activate = nn.Hardsigmoid()
    for adaptor in hooked + [other_unit]:
        assert not se_phi_applies(adaptor, 4, kernels), adaptor

    class Small(TorchSEPhiKernels):
        SE_MAX_BATCH = 4

    assert se_phi_applies(_adaptor(), 4, Small) and not se_phi_applies(_adaptor(), 5, Small)
    handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
    try:
        assert not se_phi_applies(_adaptor(), 4, kernels)
    finally:
        handle.remove()


def test_refused_adaptor_computes_through_its_modules():
    reference = _adaptor()
    reference.conv2.activate = nn.Hardsigmoid()
    fused = copy.deepcopy(reference)
    p = torch.randn(4, 32)
    for a, b in zip(_run(reference, 'units', p), _run(fused, TorchSEPhiKernels, p)):
        torch.testing.assert_close(b, a)


class _CountedSE(TorchSEPhiKernels):
    """The PyTorch passes, counting the forward passes."""
    calls = 0

    @classmethod
    def se_forward(cls, *args):
        cls.calls += 1
        return TorchSEPhiKernels.se_forward(*args)


class _SEStepKernels(TorchStepKernels):
    """The PyTorch kernel set with SE's (B, C) passes (the Triton set's structure)."""
    phi = _CountedSE


@pytest.mark.parametrize('kwargs, train', [(dict(), True), (dict(with_cp=True), True),
                                           pytest.param(dict(), False, marks=pytest.mark.slow)])
def test_backbone_with_the_se_passes_equals_its_modules(kwargs, train):
    _CountedSE.calls = 0
    results = backbone_pair(
        dict(type='mmstiff.SEAdaptor'), _SEStepKernels, train, base_channels=16, **kwargs)
    assert _CountedSE.calls == 8 * (2 if kwargs.get('with_cp') else 1)  # every adaptor, once
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * max(1.0, a.abs().max().item()))


def test_torch_passes_read_a_half_precision_input_in_the_weights_dtype():
    torch.manual_seed(0)
    p = torch.randn(4, 6).to(torch.bfloat16)
    w1, b1, w2, b2 = torch.randn(3, 6), torch.randn(3), torch.randn(6, 3), torch.randn(6)
    step, hidden = TorchSEPhiKernels.se_forward(p, w1, b1, w2, b2, 1.0)
    expected, _ = TorchSEPhiKernels.se_forward(p.float(), w1, b1, w2, b2, 1.0)
    assert step.dtype == torch.float32
    torch.testing.assert_close(step, expected)
    grads = TorchSEPhiKernels.se_backward(torch.ones(4, 6), p, hidden, step, w1, w2, 1.0)
    assert grads[0].dtype == torch.bfloat16 and grads[1].dtype == torch.float32
