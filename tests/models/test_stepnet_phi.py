"""StepNet's (B, C) arithmetic in one pass each way (docs/methods.md §0, "The fused step").

The PyTorch passes (the reference of the Triton kernels, tests/models/test_triton_step.py) give
the adaptor's Δ, every gradient and the BN buffers of the adaptor's own modules, and the
hand-written backward passes ``gradcheck``; where :func:`stepnet_phi_applies` refuses, the
modules run.
"""
import copy

import pytest
import torch
import torch.nn as nn
from fused_backbone_pair import backbone_pair  # tests/

from mmstiff.models.steps import StepNetAdaptor, step_from_means
from mmstiff.models.steps.fused import FusedPhi
from mmstiff.models.steps.fused.stepnet_phi import (StepNetPhi, TorchPhiKernels, start_phi_call,
                                                    stepnet_phi_applies)
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels

#: (momentum, adaptor in train mode, its BN in train mode, batch)
MODES = [(0.1, True, True, 5), (None, True, True, 5), (0.1, False, False, 5), (0.1, True, False, 5),
         (0.1, True, True, 1), (None, True, True, 1)]


def _adaptor(momentum, start='paper', **kwargs):
    torch.manual_seed(0)
    adaptor = StepNetAdaptor(6, start=start, **kwargs)
    if isinstance(adaptor.norm, nn.BatchNorm2d):
        adaptor.norm.momentum = momentum
    with torch.no_grad():  # off the start, with statistics of its own
        for p in adaptor.parameters():
            p.add_(torch.randn_like(p))
        if isinstance(adaptor.norm, nn.BatchNorm2d):
            adaptor.norm.running_mean.normal_()
            adaptor.norm.running_var.uniform_(0.5, 2.0)
    return adaptor


def _run(adaptor, kernels, u, p, calls=2):
    """Δ of the last of ``calls`` calls, the gradients of (u, p, parameters) and the buffers."""
    u, p = u.clone().requires_grad_(), p.clone().requires_grad_()
    phi = None if kernels is None else FusedPhi(kernels)
    for _ in range(calls):
        step = step_from_means(adaptor, u, p, phi)
    weights = torch.linspace(-1, 1, step.numel()).view_as(step)
    grads = torch.autograd.grad((step * weights).sum(), [u, p, *adaptor.parameters()])
    return [step, *grads, *[b.clone() for b in adaptor.buffers()]]


def assert_phi_equals_modules(kernels, momentum, train, norm_train, batch, start='paper'):
    """The adaptor's modules against ``kernels`` on copies of one adaptor."""
    reference = _adaptor(momentum, start).train(train)
    reference.norm.train(norm_train)
    fused = copy.deepcopy(reference)
    torch.manual_seed(1)
    u, p = torch.randn(batch, 6), torch.randn(batch, 6)
    assert stepnet_phi_applies(fused, batch, kernels)
    expected = _run(reference, None, u, p)
    got = _run(fused, kernels, u, p)
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('momentum, train, norm_train, batch', MODES)
def test_torch_phi_equals_the_adaptor_modules(momentum, train, norm_train, batch):
    assert_phi_equals_modules(TorchPhiKernels, momentum, train, norm_train, batch)


def test_torch_phi_of_the_identity_start_equals_the_modules():
    assert_phi_equals_modules(TorchPhiKernels, 0.1, True, True, 4, start='identity')


@pytest.mark.parametrize('batch_stats', [True, False])
def test_phi_backward_passes_gradcheck(batch_stats):
    torch.manual_seed(0)
    args = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    args.append(torch.randn(3, 2, dtype=torch.float64, requires_grad=True))
    args += [torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(4)]
    running = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5

    def phi(*tensors):
        return StepNetPhi.apply(*tensors, *running, batch_stats, None, 1e-5, 2.0, TorchPhiKernels)

    assert torch.autograd.gradcheck(phi, args)


def test_starting_a_phi_call_counts_it_in_the_bn_as_its_forward_would():
    adaptor = _adaptor(0.1).train()
    assert start_phi_call(adaptor, 4) == (True, 0.1)
    assert int(adaptor.norm.num_batches_tracked) == 1
    cumulative = _adaptor(None).train()
    assert start_phi_call(cumulative, 4) == (True, 1.0)
    assert start_phi_call(cumulative, 4) == (True, 0.5)  # 1 / num_batches_tracked
    for adaptor, batch in ((_adaptor(0.1).eval(), 4), (_adaptor(0.1).train(), 1)):
        assert start_phi_call(adaptor, batch) == (False, None)  # the running statistics
        assert int(adaptor.norm.num_batches_tracked) == 0


def test_stepnet_phi_applies_only_where_it_computes_what_the_modules_do():
    kernels = TorchPhiKernels
    assert stepnet_phi_applies(_adaptor(0.1).train(), 4, kernels)
    assert stepnet_phi_applies(_adaptor(0.1).eval(), 4, kernels)
    refused = [
        _adaptor(0.1, groups=2),
        _adaptor(0.1, norm='iebn'),
        _adaptor(0.1, norm_cfg=dict(type='GN', num_groups=2)),
        _adaptor(0.1, norm_cfg=dict(type='BN', affine=False)),
    ]
    hooked = _adaptor(0.1)
    hooked.norm.register_forward_hook(lambda *args: None)
    refused.append(hooked)
    hooked = _adaptor(0.1)
    hooked.conv.register_forward_pre_hook(lambda *args: None)
    refused.append(hooked)
    one = _adaptor(0.1).eval()
    one.norm.train()  # a batch of one in a train-mode BN of an eval-mode adaptor
    for adaptor in refused:
        assert not stepnet_phi_applies(adaptor.train(), 4, kernels), adaptor
    assert not stepnet_phi_applies(one, 1, kernels)
    handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
    try:
        assert not stepnet_phi_applies(_adaptor(0.1).train(), 4, kernels)
    finally:
        handle.remove()


def test_refused_adaptor_computes_through_its_modules():
    reference = _adaptor(0.1, groups=2).train()
    fused = copy.deepcopy(reference)
    u, p = torch.randn(4, 6), torch.randn(4, 6)
    for a, b in zip(_run(reference, None, u, p), _run(fused, TorchPhiKernels, u, p)):
        torch.testing.assert_close(b, a)


class _CountedPhi(TorchPhiKernels):
    """The PyTorch passes, counting the forward passes."""
    calls = 0

    @classmethod
    def phi_forward(cls, *args):
        cls.calls += 1
        return TorchPhiKernels.phi_forward(*args)


class _PhiStepKernels(TorchStepKernels):
    """The PyTorch kernel set with StepNet's (B, C) passes (the Triton set's structure)."""
    phi = _CountedPhi


@pytest.mark.parametrize(
    'kwargs, train, batch',
    [
        (dict(), True, 4),
        (dict(with_cp=True), True, 4),
        (dict(frozen_stages=1), True, 4),
        # eval, norm_eval and one sample: the adaptor-level tests above are the fast ones
        pytest.param(dict(), False, 4, marks=pytest.mark.slow),
        pytest.param(dict(norm_eval=True), True, 4, marks=pytest.mark.slow),
        pytest.param(dict(), True, 1, marks=pytest.mark.slow)
    ])
def test_backbone_with_the_phi_passes_equals_its_modules(kwargs, train, batch):
    _CountedPhi.calls = 0
    results = backbone_pair(
        dict(type='mmstiff.StepNetAdaptor'), _PhiStepKernels, train, batch, **kwargs)
    assert _CountedPhi.calls == 8 * (2 if kwargs.get('with_cp') else 1)  # every adaptor, once
    # float32 rounding of the adaptors' BN, through the backbone's train-mode BNs of 4 samples
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * max(1.0, a.abs().max().item()))
