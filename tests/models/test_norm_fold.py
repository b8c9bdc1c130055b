"""The residual branch's last BN folded into the fused step (docs/methods.md §0, "The folded
norm"): the (B, C) math against its explicit formulas, the folded step against the BN module
(outputs, every gradient, running statistics), where it does not fold, and what it keeps for
the backward."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from step_calls import residual_update  # tests/

from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import SEAdaptor, StepNetAdaptor
from mmstiff.models.steps.fused import step as fused_step
from mmstiff.models.steps.fused.fold import (NormMoments, TorchFoldKernels, batch_moments,
                                             foldable_norm, norm_affine)
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels, folded_grads

F64 = dict(dtype=torch.float64)


def test_batch_moments_are_those_over_the_batch_and_the_map():
    torch.manual_seed(0)
    y = 3 * torch.randn(4, 6, 5, 3, **F64) + torch.randn(4, 6, 1, 1, **F64) + 7
    var, mean = torch.var_mean(y, dim=(2, 3), correction=0)
    mu, sigma2 = batch_moments(mean, var)
    expected_var, expected_mu = torch.var_mean(y, dim=(0, 2, 3), correction=0)
    torch.testing.assert_close(mu, expected_mu)
    torch.testing.assert_close(sigma2, expected_var)


def test_norm_affine_is_the_batch_norm():
    torch.manual_seed(0)
    y = torch.randn(3, 5, 4, 4, **F64)
    weight, bias = torch.randn(5, **F64), torch.randn(5, **F64)
    mean, var = torch.randn(5, **F64), torch.rand(5, **F64) + 0.5
    scale, shift = norm_affine(weight, bias, mean, torch.rsqrt(var + 1e-3))
    expected = F.batch_norm(y, mean, var, weight, bias, training=False, eps=1e-3)
    torch.testing.assert_close(scale.view(1, 5, 1, 1) * y + shift.view(1, 5, 1, 1), expected)
    scale, shift = norm_affine(None, None, mean, torch.rsqrt(var + 1e-3))  # affine=False
    expected = F.batch_norm(y, mean, var, training=False, eps=1e-3)
    torch.testing.assert_close(scale.view(1, 5, 1, 1) * y + shift.view(1, 5, 1, 1), expected)


@pytest.mark.parametrize('with_step', [True, False])
def test_folded_grads_are_those_of_autograd(with_step):
    torch.manual_seed(0)
    y, grad = torch.randn(3, 4, 5, 2, **F64), torch.randn(3, 4, 5, 2, **F64)
    step = torch.rand(3, 4, **F64, requires_grad=True) if with_step else None
    scale = torch.randn(4, **F64, requires_grad=True)
    shift = torch.randn(4, **F64, requires_grad=True)
    f = scale.view(1, 4, 1, 1) * y + shift.view(1, 4, 1, 1)
    moved = f if step is None else step.view(3, 4, 1, 1) * f
    leaves = [t for t in (step, scale, shift) if t is not None]
    expected = torch.autograd.grad((moved * grad).sum(), leaves)
    grad_step, scale_parts, shift_parts = folded_grads(step, scale, shift,
                                                       (grad * y).sum(dim=(2, 3)),
                                                       grad.sum(dim=(2, 3)))
    got = [scale_parts.sum(dim=0), shift_parts.sum(dim=0)]
    if with_step:
        got.insert(0, grad_step)
    else:
        assert grad_step is None
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(b, a)


def test_torch_moments_pass():
    torch.manual_seed(0)
    x, y = torch.randn(2, 3, 4, 5, **F64), torch.randn(2, 3, 4, 5, **F64) + 4
    pooled, mean, var = TorchStepKernels.moments(x, y, 'nchw')
    torch.testing.assert_close(pooled, x.mean(dim=(2, 3)))
    torch.testing.assert_close(mean, y.mean(dim=(2, 3)))
    torch.testing.assert_close(var, y.var(dim=(2, 3), unbiased=False))
    assert TorchStepKernels.moments(None, y, 'nchw')[0] is None


#: the BN configurations the fold must follow: (BatchNorm2d kwargs, module mode)
NORMS = {
    'train': (dict(), True),
    'eval': (dict(), False),
    'momentum-none': (dict(momentum=None), True),  # the cumulative average
    'untracked': (dict(track_running_stats=False), True),
    'untracked-eval': (dict(track_running_stats=False), False),  # still the batch's statistics
    'no-affine': (dict(affine=False), True),
}


def _block_parts(adaptor_cls, norm_kwargs, train, channels=6):
    torch.manual_seed(0)
    adaptor = adaptor_cls(channels).double()
    norm = nn.BatchNorm2d(channels, **norm_kwargs).double()
    with torch.no_grad():  # off the start, with statistics of its own
        for p in [*adaptor.parameters(), *norm.parameters()]:
            p.add_(0.3 * torch.randn_like(p))
        if norm.track_running_stats:
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
    return adaptor.train(train), norm.train(train)


def _run_step(adaptor, norm, x, y, fused, calls=2):
    """Output and every gradient after ``calls`` steps (the running statistics blend each
    time), and the norm's buffers."""
    params = [*adaptor.parameters(), *norm.parameters()]
    for _ in range(calls):
        xx, yy = x.clone().requires_grad_(), y.clone().requires_grad_()
        out = residual_update(xx, yy, adaptor, 'nchw', fused, act=nn.ReLU(), norm=norm)
    weights = torch.linspace(-1, 1, out.numel(), **F64).view_as(out)
    grads = torch.autograd.grad((out * weights).sum(), [xx, yy, *params])
    return [out, *grads, *[b.clone() for b in norm.buffers()]]


def _se(channels):
    return SEAdaptor(channels, squeeze_channels=3)


@pytest.mark.parametrize('adaptor_cls', [StepNetAdaptor, _se], ids=['stepnet', 'se'])
@pytest.mark.parametrize('name', list(NORMS))
def test_folded_step_equals_the_bn_module(adaptor_cls, name, monkeypatch):
    norm_kwargs, train = NORMS[name]
    adaptor, norm = _block_parts(adaptor_cls, norm_kwargs, train)
    torch.manual_seed(1)
    x, y = torch.randn(4, 6, 5, 3, **F64), 2 * torch.randn(4, 6, 5, 3, **F64) + 1
    expected = _run_step(copy.deepcopy(adaptor), copy.deepcopy(norm), x, y, False)
    folds = []
    apply = NormMoments.apply
    monkeypatch.setattr(NormMoments, 'apply', lambda *a: folds.append(1) or apply(*a))
    got = _run_step(adaptor, norm, x, y, True)
    assert len(folds) == 2  # the fused step took the norm over, both times
    assert len(got) == len(expected)
    for a, b in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize('batch_stats, affine, layout',
                         [(True, True, 'nchw'), (False, True, 'nchw'), (True, False, 'nchw'),
                          (True, True, 'nlc')])
def test_norm_moments_pass_gradcheck(batch_stats, affine, layout):
    """The moments' pass and the (B, C) pass of the fold, as one Function: its gradients of x_t,
    y and the BN's weight and bias (the backward's closed form) against finite differences."""
    torch.manual_seed(0)
    shape = (3, 4, 3, 2) if layout == 'nchw' else (3, 5, 4)
    state = torch.randn(shape, **F64, requires_grad=True)
    y = (torch.randn(shape, **F64) + 2).requires_grad_()
    params = [torch.randn(4, **F64, requires_grad=True) for _ in range(2)] if affine else []
    running = torch.randn(4, **F64), torch.rand(4, **F64) + 0.5

    def fold(state, y, *params):
        params = params or (None, None)
        return NormMoments.apply(state, y, *params, *running, batch_stats, None, 1e-3, layout,
                                 TorchStepKernels, TorchFoldKernels)

    assert torch.autograd.gradcheck(fold, (state, y, *params))


def test_folded_step_passes_gradcheck():
    adaptor, norm = _block_parts(StepNetAdaptor, dict(), True, channels=3)
    torch.manual_seed(1)
    x = torch.randn(2, 3, 3, 2, **F64, requires_grad=True)
    y = torch.randn(2, 3, 3, 2, **F64, requires_grad=True)

    def step(x, y):
        return residual_update(x, y, adaptor, 'nchw', True, act=None, norm=norm)

    assert torch.autograd.gradcheck(step, (x, y))


def test_where_the_norm_does_not_fold():
    adaptor, norm = _block_parts(StepNetAdaptor, dict(), True)
    y = torch.randn(4, 6, 3, 3, **F64)
    assert foldable_norm(norm, y)
    assert not foldable_norm(nn.SyncBatchNorm(6), y)  # the statistics of every process
    assert not foldable_norm(nn.GroupNorm(2, 6), y)
    assert not foldable_norm(norm, y[:1, :, :1, :1])  # one value per channel in training
    assert foldable_norm(norm.eval(), y[:1, :, :1, :1])
    norm.train()
    seen = []
    handle = norm.register_forward_hook(lambda m, args, out: seen.append(out))
    out = residual_update(y, y, adaptor, 'nchw', True, norm=norm)
    handle.remove()
    assert len(seen) == 1  # a hooked norm runs as a module, its hook sees f
    expected = residual_update(y, y, copy.deepcopy(adaptor), 'nchw', False, norm=norm)
    torch.testing.assert_close(out, expected)
    with pytest.raises(ValueError, match='more than 1 value per channel'):
        residual_update(y[:1, :, :1, :1], y[:1, :, :1, :1], adaptor, 'nchw', True, norm=norm)


def _saved_bytes(net, images):
    """Bytes of the distinct storages the forward pass keeps for the backward."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(images)
    return sum(storages.values())


def test_folded_step_keeps_what_the_plain_network_keeps():
    build = dict(depth=18, base_channels=8, stem_channels=8)
    torch.manual_seed(0)
    plain = StepResNet(**build).train()
    images = torch.randn(2, 3, 128, 128)  # maps large against the (B, C) tensors
    outputs = []  # every block's output: the size of the f a block would keep
    blocks = [m for name, m in plain.named_modules() if name.count('.') == 1]
    handles = [
        b.register_forward_hook(lambda m, a, out: outputs.append(out.nbytes)) for b in blocks
    ]
    kept_plain = _saved_bytes(plain, images)
    for handle in handles:
        handle.remove()
    kept = {}
    for fused in (False, True):
        net = StepResNet(adaptor=dict(type='mmstiff.StepNetAdaptor'), fused=fused, **build)
        kept[fused] = _saved_bytes(net.train(), images)
    # the reference keeps each block's f besides (B, C) tensors and the adaptors' weights,
    # which the fold keeps too (a few kB here): it keeps no f
    assert kept[False] - kept_plain > sum(outputs)
    assert kept[False] - kept[True] > 0.9 * sum(outputs)
    assert kept[True] - kept_plain < 0.1 * sum(outputs), (kept, kept_plain, sum(outputs))


@pytest.mark.skipif(not fused_step.HAS_TRITON, reason='needs triton (it ships with torch)')
@pytest.mark.parametrize('train', [True, False])
def test_the_folded_backward_is_the_triton_passes_alone(train):
    """On the Triton set the folded StepNet step's backward is its kernels' launches and no
    ATen computation: y's whole gradient (the step's share and the moments') is one kernel,
    ``moments_backward`` (it was ``addcmul`` and autograd's ``add``), and the fold's backward
    kernel sums a's and b's per-sample parts over the batch and scales the pooled x_t's
    gradient (a ``sum`` and a ``mul`` besides it, before)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from mmstiff.apis.benchmark import counting_kernels
    from mmstiff.models.steps.fused.triton_step import TritonStepKernels

    not_computing = {
        'empty', 'empty_like', 'empty_strided', 'expand', 'view', 'as_strided', 'alias', 'detach',
        'unbind', 'select', 'slice', 't', 'transpose', '_reshape_alias', 'reshape', 'unsqueeze'
    }

    class Computing(TorchDispatchMode):

        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in not_computing:
                self.ops.append(name)
            return func(*args, **(kwargs or {}))

    adaptor, norm = (m.float() for m in _block_parts(StepNetAdaptor, dict(), train, channels=4))
    kernels = counting_kernels(TritonStepKernels())  # launches nothing: the host side alone
    launches = []
    for name in ('_moments_backward', '_backward'):
        recorder = getattr(kernels, name)
        setattr(
            kernels, name,
            type(
                'Counted', (), {
                    '__getitem__':
                    lambda self, grid, name=name, recorder=recorder: launches.append(name) or
                    recorder[grid]
                })())
    fold_backward = kernels.fold.fold_backward
    parts_seen = []
    kernels.fold.fold_backward = lambda parts, *args: parts_seen.append(parts.shape) or \
        fold_backward(parts, *args)
    x = torch.randn(2, 4, 3, 3)  # no gradient: no accumulation of x_t's paths
    y = torch.randn(2, 4, 3, 3, requires_grad=True)
    out = residual_update(x, y, adaptor, 'nchw', True, kernels, act=nn.ReLU(), norm=norm)
    grad = torch.ones_like(out)
    with Computing() as computing:
        out.backward(grad)
    assert computing.ops == []
    assert sorted(launches) == ['_backward', '_moments_backward'] and y.grad is not None
    assert parts_seen == [(2, 2, 4)]  # a's and b's parts per sample, summed in the kernel
    assert all(p.grad is not None for p in [*adaptor.parameters(), *norm.parameters()])
