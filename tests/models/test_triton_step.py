"""The Triton kernels of the fused step on the CPU, in Triton's interpreter.

Triton reads ``TRITON_INTERPRET`` when it compiles a kernel's decorator, so the kernels are
interpreted only in a process that set it before importing Triton:
:func:`test_kernels_in_the_interpreter` (and its slow twin) runs this file's other tests in such a
process.
"""
import copy

import pytest
import torch
import torch.nn as nn
from step_calls import residual_update  # tests/
from triton_interpreter import driver, interpreted_in, run_interpreted  # tests/

from mmstiff.analysis import TrajectoryRecorder, stiffness_norms, stiffness_norms_from_sums
from mmstiff.engine.hooks import StiffnessHook
from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import (SEAdaptor, StepNetAdaptor, forced_step_kernels, set_fused,
                                  step_from_means)
from mmstiff.models.steps.fused import FusedPhi
from mmstiff.models.steps.fused.fold import TorchFoldKernels
from mmstiff.models.steps.fused.pool import PoolStates
from mmstiff.models.steps.fused.se_phi import TorchSEPhiKernels
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.models.steps.fused.triton_fold import TritonFoldKernels
from mmstiff.models.steps.fused.triton_se_phi import TritonSEPhiKernels
from mmstiff.models.steps.fused.triton_step import TritonStepKernels
from mmstiff.models.steps.fused.triton_stepnet_phi import TritonPhiKernels
from mmstiff.models.steps.fused.update import EulerUpdate
from mmstiff.utils.triton_launch import as_bnc

interpreted = interpreted_in('test_kernels_in_the_interpreter')
#: (layout, shape, memory format): H and W mergeable or not, a width of one, tokens
CASES = [('nchw', (2, 5, 3, 4), None), ('nchw', (2, 5, 3, 4), torch.channels_last),
         ('nchw', (2, 70, 1, 3), None), ('nchw', (3, 4, 33, 1), None), ('nlc', (2, 7, 5), None)]
TOLERANCES = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _interpret(repo_root, markers):
    run_interpreted(__file__, repo_root, markers)


@driver
def test_kernels_in_the_interpreter(repo_root):
    _interpret(repo_root, 'not slow')


@driver
@pytest.mark.slow
def test_kernels_run_a_backbone_in_the_interpreter(repo_root):
    _interpret(repo_root, 'slow')


def _inputs(shape, memory_format, dtype):
    torch.manual_seed(0)
    tensors = [torch.randn(shape).to(dtype) for _ in range(3)]
    if memory_format is not None:
        tensors = [t.contiguous(memory_format=memory_format) for t in tensors]
    return tensors


def _step(kernels, x, f, grad, layout, relu, pool_x, with_step):
    """Output and gradients of a pooled-state step through the fused Functions on ``kernels``."""
    x = x.clone().requires_grad_()
    f = f.clone().requires_grad_()
    channels = f.shape[1] if layout == 'nchw' else f.shape[2]
    weight = torch.linspace(-1, 1, channels, dtype=f.dtype, requires_grad=True)
    if pool_x:
        pooled, pooled_f = PoolStates.apply(x, f, layout, kernels)
    else:
        pooled, pooled_f = 0.5, PoolStates.apply(None, f, layout, kernels)
    step = torch.sigmoid(weight * pooled + pooled_f) if with_step else None
    out = EulerUpdate.apply(x, step, f, relu, layout, kernels)
    inputs = [x, f, weight] if with_step else [x, f]
    return [out, *torch.autograd.grad(out, inputs, grad)]


@interpreted
@pytest.mark.parametrize('layout, shape, memory_format', CASES)
@pytest.mark.parametrize('dtype', list(TOLERANCES))
@pytest.mark.parametrize('relu, pool_x, with_step', [(True, True, True), (False, False, True),
                                                     (True, False, False)])
def test_triton_kernels_equal_torch_kernels(layout, shape, memory_format, dtype, relu, pool_x,
                                            with_step):
    x, f, grad = _inputs(shape, memory_format, dtype)
    ref = _step(TorchStepKernels, x.double(), f.double(), grad.double(), layout, relu, pool_x,
                with_step)
    got = _step(TritonStepKernels(), x, f, grad, layout, relu, pool_x, with_step)
    tol = TOLERANCES[dtype]
    for a, b in zip(ref, got):
        assert b.dtype == dtype
        torch.testing.assert_close(b.double(), a, rtol=tol, atol=tol)
    if memory_format is not None:  # the output and gradients keep the memory format
        assert all(t.is_contiguous(memory_format=memory_format) for t in got[:3])


@interpreted
@pytest.mark.parametrize('layout, shape, memory_format', CASES)
@pytest.mark.parametrize('dtype', list(TOLERANCES))
@pytest.mark.parametrize('relu, state_relu, with_step', [(True, True, True), (True, False, True),
                                                         (False, False, True),
                                                         (False, False, False)])
def test_triton_measured_step_equals_torch_kernels(layout, shape, memory_format, dtype, relu,
                                                   state_relu, with_step):
    x, f, _ = _inputs(shape, memory_format, dtype)
    channels = f.shape[1] if layout == 'nchw' else f.shape[2]
    step = torch.rand(f.shape[0], channels).to(dtype) if with_step else None
    out, moved, state = TritonStepKernels().measured_step(x, step, f, relu, layout, state_relu)
    ref_out, ref_moved, ref_state = TorchStepKernels.measured_step(x, step, f, relu, layout,
                                                                   state_relu)
    tol = TOLERANCES[dtype]
    assert out.dtype == dtype and moved.dtype == state.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref_out.double(), rtol=tol, atol=tol)
    # the sums are those of the stored output (in bfloat16 it may differ from the PyTorch
    # kernels' by a rounding), summed in float32
    x_t = x.double().clamp(min=0) if state_relu else x.double()
    axes = (2, 3) if layout == 'nchw' else (1, )
    torch.testing.assert_close(moved.double(), ((out.double() - x_t)**2).sum(dim=axes), rtol=1e-5,
                               atol=1e-5)
    torch.testing.assert_close(state.double(), (x_t**2).sum(dim=axes), rtol=1e-5, atol=1e-5)
    if dtype != torch.bfloat16:
        torch.testing.assert_close(moved, ref_moved, rtol=1e-5, atol=1e-5)
    if memory_format is not None:
        assert out.is_contiguous(memory_format=memory_format)


@interpreted
@pytest.mark.slow
def test_triton_steps_give_the_stiffness_hook_its_values():
    torch.manual_seed(0)
    images = torch.randn(3, 3, 32, 32)
    net = StepResNet(18, base_channels=4, stem_channels=4,
                     adaptor=dict(type='mmstiff.StepNetAdaptor')).train()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    scalars, given = [], []
    for fused in (False, True):
        set_fused(net, fused)
        hook = StiffnessHook(interval=1)
        recorders = hook.build_recorders(net)
        spy = TrajectoryRecorder(net, reduce=_both_norms, step_sums=True)
        with torch.no_grad(), forced_step_kernels(TritonStepKernels(), net):
            for recorder in [*recorders.values(), spy]:
                recorder.start()
            net(images)
            for recorder in [*recorders.values(), spy]:
                recorder.stop()
        scalars.append(hook.summarise({role: r.outputs for role, r in recorders.items()}))
        given.append([calls[0] for calls in spy.outputs.values()])
    assert all(from_sums is None for _, from_sums in given[0])
    assert given[1] and all(from_sums is not None for _, from_sums in given[1])
    for from_states, from_sums in given[1]:  # the norms the sums give are the states'
        for a, b in zip(from_states, from_sums):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    # the forward passes themselves differ by float32 rounding through the train-mode BNs
    assert list(scalars[1]) == list(scalars[0])
    for key, value in scalars[0].items():
        tol = dict(abs=1e-4) if key.startswith('nsi_step_corr/') else dict(rel=1e-4)
        assert scalars[1][key] == pytest.approx(value, **tol), key


def _both_norms(record):
    """The NSI norms of a record from its states and (None without them) from its sums."""
    from_states = stiffness_norms(record.x_t, record.x_next, record.step)
    if record.sums is None:
        return from_states, None
    return from_states, stiffness_norms_from_sums(record.sums, record.step)


@interpreted
@pytest.mark.parametrize('momentum, train, norm_train, batch', [(0.1, True, True, 5),
                                                                (None, True, True, 3),
                                                                (0.1, False, False, 5),
                                                                (0.1, True, True, 1)])
def test_triton_phi_equals_the_adaptor_modules(momentum, train, norm_train, batch):
    reference = StepNetAdaptor(6, start='identity').train(train)
    reference.norm.momentum = momentum
    reference.norm.train(norm_train)
    torch.manual_seed(0)
    with torch.no_grad():  # off the start, with statistics of its own
        for p in reference.parameters():
            p.add_(torch.randn_like(p))
        reference.norm.running_mean.normal_()
        reference.norm.running_var.uniform_(0.5, 2.0)
    fused = copy.deepcopy(reference)
    u, p = torch.randn(batch, 6), torch.randn(batch, 6)
    results = []
    for adaptor, kernels in ((reference, None), (fused, TritonPhiKernels())):
        uu, pp = u.clone().requires_grad_(), p.clone().requires_grad_()
        for _ in range(2):  # the running statistics blend twice
            phi = None if kernels is None else FusedPhi(kernels)
            step = step_from_means(adaptor, uu, pp, phi)
        weights = torch.linspace(-1, 1, step.numel()).view_as(step)
        grads = torch.autograd.grad((step * weights).sum(), [uu, pp, *adaptor.parameters()])
        results.append([step, *grads, *[b.clone() for b in adaptor.buffers()]])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@interpreted
def test_triton_step_of_an_adaptor_equals_the_reference():
    adaptor = StepNetAdaptor(6).train()
    torch.manual_seed(0)
    x, f = torch.randn(3, 6, 4, 4), torch.randn(3, 6, 4, 4)
    results = []
    for fused in (False, True):
        xx, ff = x.clone().requires_grad_(), f.clone().requires_grad_()
        out = residual_update(xx, ff, adaptor, 'nchw', fused, act=nn.ReLU(),
                              kernels=TritonStepKernels())
        grads = torch.autograd.grad(out.square().sum(), [xx, ff, *adaptor.parameters()])
        results.append([out, *grads])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@interpreted
@pytest.mark.slow
def test_triton_step_runs_a_backbone():
    torch.manual_seed(0)
    images = torch.randn(2, 3, 32, 32)
    outputs = []
    for fused in (False, True):
        torch.manual_seed(0)
        net = StepResNet(18, base_channels=4, stem_channels=4,
                         adaptor=dict(type='mmstiff.StepNetAdaptor'), fused=fused).train()
        with forced_step_kernels(TritonStepKernels(), net):
            out = net(images)[-1]
        out.sum().backward()
        outputs.append([out, net.conv1.weight.grad])
    (out, grad), (fused_out, fused_grad) = outputs
    torch.testing.assert_close(fused_out, out, rtol=1e-4, atol=1e-5)
    # float32 sums in another order, through eight train-mode BN layers of two samples
    torch.testing.assert_close(fused_grad, grad, rtol=1e-3, atol=1e-3 * grad.abs().max().item())


@interpreted
@pytest.mark.parametrize(
    'batch, channels, squeeze, dtype',
    [
        (5, 32, 8, torch.float32),
        (3, 16, 4, torch.float32),  # blocks padded to tl.dot's 16
        (70, 70, 8, torch.float32),  # five sample blocks, three channel blocks backward
        (20, 600, 40, torch.float32),  # ten channel blocks for the hidden gradient
        (33, 96, 72, torch.float32),  # two blocks of units for the weights, three of 32
        (5, 32, 8, torch.float16),
        (5, 32, 8, torch.bfloat16),
    ])
def test_triton_se_passes_equal_torch_passes(batch, channels, squeeze, dtype):
    torch.manual_seed(0)
    p = torch.randn(batch, channels).to(dtype)
    w1, b1 = 0.3 * torch.randn(squeeze, channels), torch.randn(squeeze)
    w2, b2 = 0.3 * torch.randn(channels, squeeze), torch.randn(channels)
    grad = torch.randn(batch, channels)
    kernels = TritonSEPhiKernels()
    step, hidden = kernels.se_forward(p, w1, b1, w2, b2, 2.0)
    ref_step, ref_hidden = TorchSEPhiKernels.se_forward(p.float(), w1, b1, w2, b2, 2.0)
    assert step.dtype == torch.float32  # float32 weights: Δ in float32, as the modules give
    torch.testing.assert_close(step, ref_step, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden, ref_hidden, rtol=1e-5, atol=1e-5)
    got = kernels.se_backward(grad, p, hidden, step, w1, w2, 2.0)
    expected = TorchSEPhiKernels.se_backward(grad, p.float(), ref_hidden, ref_step, w1, w2, 2.0)
    assert got[0].dtype == dtype and [g.dtype for g in got[1:]] == [torch.float32] * 4
    tol = TOLERANCES[dtype] if dtype != torch.float32 else 1e-4
    for a, b in zip(expected, got):
        torch.testing.assert_close(b.float(),
                                   a.to(b.dtype).float(), rtol=tol,
                                   atol=tol * max(1.0,
                                                  a.abs().max().item()))


@interpreted
@pytest.mark.parametrize('start, layout', [('paper', 'nchw'), ('identity', 'nlc')])
def test_triton_se_step_of_an_adaptor_equals_the_reference(start, layout):
    adaptor = SEAdaptor(32, start=start, layout=layout).train()
    torch.manual_seed(0)
    with torch.no_grad():  # off the start: the identity start's W2 = 0 hides W1's gradient
        for p in adaptor.parameters():
            p.add_(0.3 * torch.randn_like(p))
    shape = (3, 32, 4, 4) if layout == 'nchw' else (3, 7, 32)
    x, f = torch.randn(shape), torch.randn(shape)
    results = []
    for fused in (False, True):
        xx, ff = x.clone().requires_grad_(), f.clone().requires_grad_()
        out = residual_update(xx, ff, adaptor, layout, fused, act=nn.ReLU(),
                              kernels=TritonStepKernels())
        grads = torch.autograd.grad(out.square().sum(), [xx, ff, *adaptor.parameters()])
        results.append([out, *grads])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@interpreted
@pytest.mark.parametrize('layout, shape, memory_format', CASES)
@pytest.mark.parametrize('dtype', list(TOLERANCES))
@pytest.mark.parametrize('offset', [0.0, 100.0])
def test_triton_moments_equal_torch_moments(layout, shape, memory_format, dtype, offset):
    # offset 100: a mean large against the spread, where unshifted sums of squares cancel
    x, y, _ = _inputs(shape, memory_format, dtype)
    y = (y.float() + offset).to(dtype)
    pooled, mean, var = TritonStepKernels().moments(x, y, layout)
    ref_pooled, ref_mean, ref_var = TorchStepKernels.moments(x.double(), y.double(), layout)
    assert pooled.dtype == dtype and mean.dtype == var.dtype == torch.float32
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(pooled.double(), ref_pooled, rtol=tol, atol=tol)
    torch.testing.assert_close(mean.double(), ref_mean, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(var.double(), ref_var, rtol=1e-4, atol=1e-5)
    assert TritonStepKernels().moments(None, y, layout)[0] is None


def _folded(kernels, x, y, grad, layout, relu, with_step):
    """Output and gradients of the folded step ``act(x + Δ ⊙ (a ⊙ y + b))`` on ``kernels``."""
    channels = y.shape[1] if layout == 'nchw' else y.shape[2]
    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    scale = torch.linspace(-1.5, 2, channels, dtype=torch.float64).to(x.device)
    shift = torch.linspace(1, -1, channels, dtype=torch.float64)
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    affine = torch.stack((scale, shift)).to(dtype).requires_grad_()  # (a, b), (2, C)
    step = None
    leaves = [x, y, affine]
    if with_step:
        step = torch.rand(y.shape[0], channels, generator=torch.Generator().manual_seed(1))
        step = step.to(dtype).requires_grad_()
        leaves.append(step)
    per_sample = affine.unsqueeze(1).expand(2, y.shape[0], channels)
    out = EulerUpdate.apply(x, step, y, relu, layout, kernels, None, per_sample)
    return [out, *torch.autograd.grad(out, leaves, grad)]


@interpreted
@pytest.mark.parametrize('layout, shape, memory_format', CASES)
@pytest.mark.parametrize('dtype', list(TOLERANCES))
@pytest.mark.parametrize('relu, with_step', [(True, True), (False, True), (True, False)])
def test_triton_folded_step_equals_torch_kernels(layout, shape, memory_format, dtype, relu,
                                                 with_step):
    x, y, grad = _inputs(shape, memory_format, dtype)
    ref = _folded(TorchStepKernels, x.double(), y.double(), grad.double(), layout, relu, with_step)
    got = _folded(TritonStepKernels(), x, y, grad, layout, relu, with_step)
    tol = TOLERANCES[dtype]
    for a, b in zip(ref, got):
        # the (C,) and (B, C) gradients are float32 sums, the full-size ones in the input dtype
        scale = max(1.0, a.abs().max().item())
        torch.testing.assert_close(b.double(), a, rtol=tol, atol=tol * scale)
    assert [t.dtype for t in got[:3]] == [dtype] * 3
    if memory_format is not None:
        assert all(t.is_contiguous(memory_format=memory_format) for t in got[:3])
    channels = y.shape[1] if layout == 'nchw' else y.shape[2]
    norm = torch.rand(channels), torch.randn(channels)
    step = torch.rand(y.shape[0], channels) if with_step else None
    measured = TritonStepKernels().measured_step(x, step, y, relu, layout, relu, norm=norm)
    expected = TorchStepKernels.measured_step(x, step, y, relu, layout, relu, norm=norm)
    torch.testing.assert_close(measured[0].double(), expected[0].double(), rtol=tol, atol=tol)
    if dtype != torch.bfloat16:  # the sums of the stored output (see the measured step test)
        for a, b in zip(expected[1:], measured[1:]):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


@interpreted
@pytest.mark.parametrize('layout, shape, memory_format', CASES)
@pytest.mark.parametrize('dtype', list(TOLERANCES))
@pytest.mark.parametrize('with_slope', [True, False])
def test_triton_moments_backward_is_the_gradient_plus_the_moments_share(
        layout, shape, memory_format, dtype, with_slope):
    """y's whole gradient ``g + c0 + c1 ⊙ y`` (c0, c1 per (b, c)) in one pass, against the
    explicit formula in float64, in the input's dtype and the incoming gradient's format."""
    grad, y, _ = _inputs(shape, memory_format, dtype)
    batch, channels = shape[0], shape[1] if layout == 'nchw' else shape[2]
    base = torch.randn(batch, channels).to(dtype)
    slope = torch.randn(batch, channels).to(dtype) if with_slope else None
    view = (batch, channels, 1, 1) if layout == 'nchw' else (batch, 1, channels)
    expected = grad.double() + base.double().view(view)
    if with_slope:
        expected += slope.double().view(view) * y.double()
    for kernels in (TritonStepKernels(), TorchStepKernels):
        got = kernels.moments_backward(grad, y, base, slope, layout)
        tol = TOLERANCES[dtype]
        torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol * 4)
        assert got.dtype == dtype
        if memory_format is not None:
            assert got.is_contiguous(memory_format=memory_format)


@interpreted
@pytest.mark.parametrize('adaptor_cls',
                         [StepNetAdaptor, lambda c: SEAdaptor(c, squeeze_channels=4)],
                         ids=['stepnet', 'se'])
@pytest.mark.parametrize('train', [True, False])
def test_triton_folded_norm_equals_the_bn_module(adaptor_cls, train):
    torch.manual_seed(0)
    adaptor, norm = adaptor_cls(6), nn.BatchNorm2d(6)
    with torch.no_grad():
        for p in [*adaptor.parameters(), *norm.parameters()]:
            p.add_(0.3 * torch.randn_like(p))
        norm.running_mean.normal_()
        norm.running_var.uniform_(0.5, 2.0)
    x, y = torch.randn(3, 6, 4, 4), 2 * torch.randn(3, 6, 4, 4) + 1
    results = []
    for fused in (False, True):
        a, n = copy.deepcopy(adaptor).train(train), copy.deepcopy(norm).train(train)
        xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
        out = residual_update(xx, yy, a, 'nchw', fused, act=nn.ReLU(), norm=n,
                              kernels=TritonStepKernels())
        params = [*a.parameters(), *n.parameters()]
        grads = torch.autograd.grad(out.square().sum(), [xx, yy, *params])
        results.append([out, *grads, *[b.clone() for b in n.buffers()]])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


@interpreted
@pytest.mark.parametrize('batch, channels', [(5, 6), (1, 6), (70, 70), (3, 600), (300, 20)])
@pytest.mark.parametrize('batch_stats, factor, affine', [(True, 0.1, True), (True, None, True),
                                                         (False, None, True), (True, 0.1, False)])
def test_triton_fold_passes_equal_torch_passes(batch, channels, batch_stats, factor, affine):
    torch.manual_seed(0)
    mean = torch.randn(batch, channels) + 3
    var = torch.rand(batch, channels) + 0.5
    weight, bias = (torch.randn(channels), torch.randn(channels)) if affine else (None, None)
    running = [torch.randn(channels), torch.rand(channels) + 0.5]
    parts, grad_pooled = torch.randn(2, batch, channels), torch.randn(batch, channels)
    grad_state = torch.randn(batch, channels)
    results = []
    for kernels in (TorchFoldKernels, TritonFoldKernels()):
        stats = [t.clone() for t in running]
        out = kernels.fold_forward(mean, var, weight, bias, *stats, batch_stats, factor, 1e-5,
                                   4 * batch, torch.float32)
        back = kernels.fold_backward(parts, grad_pooled, mean, weight, out[2], out[3], batch_stats,
                                     0.25, torch.float32, grad_state, 1 / 7)
        assert kernels.fold_backward(parts, grad_pooled, mean, weight, out[2], out[3], batch_stats,
                                     0.25, torch.float32)[4] is None
        results.append([*out, *[g for g in back if g is not None], *stats])
    assert len(results[0]) == len(results[1])
    torch.testing.assert_close(results[1][-3], grad_state / 7)  # the pooled x_t's, scaled
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * max(1.0, a.abs().max().item()))


def _wide_map():
    """A (2, 3, 4, 5) map whose H and W cannot be merged into one strided axis (a crop)."""
    return torch.randn(2, 3, 4, 8)[:, :, :, 1:6]


@pytest.mark.parametrize(
    'make, layout', [
        (lambda: torch.randn(2, 3, 4, 5), 'nchw'),
        (lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last), 'nchw'),
        (lambda: torch.randn(2, 3, 6, 1), 'nchw'),
        (lambda: torch.randn(2, 3, 1, 6), 'nchw'),
        (_wide_map, 'nchw'),
        (lambda: torch.randn(2, 7, 3), 'nlc'),
        (lambda: torch.randn(2, 3, 7).transpose(1, 2), 'nlc'),
    ],
    ids=['contiguous', 'channels-last', 'width-1', 'height-1', 'crop', 'tokens', 'tokens-strided'])
def test_as_bnc_addresses_every_element_of_the_state(make, layout):
    """The (B, N, C) shape and strides the kernels take reach each state element where the
    explicit reshape puts it: ``[b, n, c]`` is ``x[b, c, n // W, n % W]`` (``'nchw'``)."""
    x = make()
    addressed, shape, strides = as_bnc(x, layout)
    expected = x.flatten(2).transpose(1, 2) if layout == 'nchw' else x
    got = torch.as_strided(addressed, shape, strides, addressed.storage_offset())
    assert torch.equal(got, expected)
    if x.dim() == 4 and x.shape[2] > 1 and x.shape[3] > 1 and x.stride(2) != 5 * x.stride(3):
        assert addressed.is_contiguous()  # the crop: copied
    else:
        assert addressed.data_ptr() == x.data_ptr()  # the others: addressed in place


def test_as_bnc_refuses_a_map_that_is_not_four_dimensional():
    with pytest.raises(ValueError, match=r'x has shape \(2, 3, 4\); expected \(B, C, H, W\)'):
        as_bnc(torch.randn(2, 3, 4), 'nchw')
