"""The fused residual step ``x_{t+1} = act(x_t + Δ_t ⊙ f)`` (docs/methods.md §0, "The fused step").

The reference step is the adaptor's forward on the full tensors (two poolings), then
``addcmul`` and the activation, each with its own autograd node. The fused step computes the
same values in three memory-bound passes (:mod:`.step_kernels`):

1. :class:`PoolStates`: one pass reads x_t and f and writes their (B, C) means; its backward is
   a broadcast view of the pooled gradients (no pass of its own);
2. the adaptor's (B, C) arithmetic, in the adaptor's call (``adaptor(x_t, f, pooled=...)``, so
   the hooks on it see Δ as in the reference): a StepNet adaptor with ``groups = C`` and a plain
   BN in one pass each way on the kernel set's ``phi`` (:mod:`.stepnet_phi`), every other
   adaptor through its own modules (its norm layer, statistics and their hooks unchanged);
3. :class:`EulerUpdate`: one pass writes ``act(shortcut + Δ ⊙ f)``; its backward is one pass
   that writes the gradients of the shortcut and f and Δ's per-channel sums ``Σ g' ⊙ f``, and
   keeps for it only f, Δ and (under a ReLU) the output, which the next block keeps anyway.
   Where a trajectory recorder asks (:mod:`mmstiff.utils.step_sums`), the same pass also
   writes the per-(B, C) sums of squares of ``x_{t+1} - x_t`` and of x_t, the NSI's norms.

Where the block passes its branch's last norm (``norm=``) and it is a plain BN, the step folds
it (:mod:`.norm_fold`): :class:`NormMoments` pools x_t and gives the branch output y's
per-sample moments in pass 1, the BN's statistics and ``f = a ⊙ y + b`` come from those, and
:class:`EulerUpdate` applies the affine as it loads y, so f is neither written nor kept;
backward, :class:`NormMoments` writes y's whole gradient (the step's share and the moments') in
one pass.

The passes are Triton kernels on CUDA (:mod:`.triton_step`) and PyTorch operations elsewhere.
``fused`` selects the path: True, False (the reference) or ``'auto'``, the path measured
faster on the device: the reference on the CPU and on CUDA alike today (docs/benchmarks.md, "The
fused residual step": on an H200 the Triton step is slower than the reference). Inside
``torch.compile`` the fused step is PyTorch's passes, compiled with the model into the
compiler's own kernels (``'auto'``: the reference, which the compiler fuses too).
"""
import math
from contextlib import contextmanager

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import first_order, reference_steps_forced
from mmstiff.utils.step_sums import StepSums, is_step_block, open_requests
from .base import apply_step
from .norm_fold import fold_kernels, foldable_norm, norm_mode
from .step_kernels import TorchStepKernels, broadcast_step
from .stepnet_phi import phi_kernels_in
from .triton_step import HAS_TRITON, TritonStepKernels

#: values of a backbone's ``fused`` argument
FUSED = ('auto', True, False)

_TRITON = []  # the TritonStepKernels, made at the first fused step on CUDA
_FORCED = []  # kernel sets of the enclosing forced_step_kernels blocks


def check_fused(fused):
    """``fused`` if it is one of :data:`FUSED`; ValueError naming it otherwise."""
    if fused is not True and fused is not False and not (isinstance(fused, str)
                                                         and fused == 'auto'):
        raise ValueError(f'fused={fused!r} is not supported; expected one of {FUSED} '
                         "('auto': the path measured faster on the device, True: the fused "
                         'step, False: the reference)')
    return fused


def step_kernels(x, fused):
    """The kernel set of the fused step for the state ``x``, or None for the reference step.

    True: Triton's on CUDA (with Triton installed), PyTorch's elsewhere; ``'auto'``: the path
    measured faster on ``x``'s device, which is the reference (None) on every device so far
    (on an H200 the Triton step costs more than the reference, docs/benchmarks.md); False,
    or any choice inside :func:`~mmstiff.utils.reference_steps.reference_steps`: None.
    Inside :func:`forced_step_kernels`, ``'auto'`` and True take the kernels given there.
    Inside ``torch.compile``, True takes PyTorch's passes, which the compiler turns into its own
    kernels (the folded BN included), and ``'auto'`` the reference, forced kernels or not.
    """
    if fused is False or reference_steps_forced():
        return None
    if torch.compiler.is_compiling():
        return TorchStepKernels if fused is True else None
    if _FORCED:
        return _FORCED[-1]
    if fused != 'auto' and x.is_cuda and HAS_TRITON:
        if not _TRITON:
            _TRITON.append(TritonStepKernels())
        return _TRITON[0]
    return TorchStepKernels if fused is True else None


@contextmanager
def forced_step_kernels(kernels):
    """Within the block, every step whose ``fused`` is not False (``'auto'`` included) is the
    fused step on ``kernels``: e.g. the Triton kernels on CPU tensors in Triton's interpreter
    (tests), or stand-ins that count kernel launches (``tools/benchmark``)."""
    _FORCED.append(kernels)
    try:
        yield kernels
    finally:
        _FORCED.pop()


def set_fused(module, fused):
    """Give every step block of ``module`` (:func:`~mmstiff.utils.step_sums.is_step_block`)
    the choice ``fused`` (checked by :func:`check_fused`), and every attention layer that can
    fold AttnScale and FeatScale into its projection (a ``fold_scales`` switch) the same."""
    check_fused(fused)
    for m in module.modules():
        if is_step_block(m):
            m.fused = fused
        if hasattr(m, 'fold_scales'):
            m.fold_scales = fused
    return module


class PoolStates(torch.autograd.Function):
    """``(mean x_t, mean f)`` over the pooled axes in one pass (``mean f`` only for x_t None)."""

    @staticmethod
    def forward(ctx, state, residual, layout, kernels):
        pooled, pooled_f = kernels.pool(state, residual, layout)
        ctx.layout = layout
        ctx.shapes = (None if state is None else state.shape), residual.shape
        return pooled_f if pooled is None else (pooled, pooled_f)

    @staticmethod
    @first_order
    def backward(ctx, *grads):
        shapes = [shape for shape in ctx.shapes if shape is not None]
        expanded = [_spread(grad, shape, ctx.layout) for grad, shape in zip(grads, shapes)]
        if ctx.shapes[0] is None:
            return None, expanded[0], None, None
        return expanded[0], expanded[1], None, None


def _pooled_count(shape, layout):
    """N, the values of a state of ``shape`` that one (b, c) mean pools."""
    return shape[1] if layout == 'nlc' else math.prod(shape[2:])


def _broadcast_pooled(grad, shape, layout):
    """A (B, C) gradient broadcast over the pooled axes of a state of ``shape`` (a view)."""
    return broadcast_step(grad, shape, layout).expand(shape)


def _spread(grad, shape, layout):
    """The gradient of a mean: ``grad / N`` broadcast over the pooled axes (a view)."""
    return _broadcast_pooled(grad * (1.0 / _pooled_count(shape, layout)), shape, layout)


class NormMoments(torch.autograd.Function):
    """``(mean x_t, affine, p, y)`` from one pass over x_t and the branch output y before its
    last BN (no ``mean x_t`` for x_t None), the folded norm (:mod:`.norm_fold`): the pass gives
    y's (B, C) per-sample moments, one (B, C) pass the BN's ``f = a ⊙ y + b`` and pooled f
    ``p`` (and updates its running statistics).

    ``affine`` is ``(a, b)`` for each sample, a (2, B, C) broadcast of the (2, C) ``(a, b)``:
    its gradient is the per-sample parts the step's backward writes, which the (B, C) pass of
    the backward sums over the batch itself. y comes out as it went in, for the step to read:
    y's gradient from the step then arrives here, and the backward writes y's whole gradient
    in one pass, that gradient plus the moments' share ``c0 + c1 ⊙ y`` per (b, c) (where
    autograd would write the share and then add the two); the same (B, C) pass gives c0 and
    c1 (c1 None where the variances were not used) and scales the pooled x_t's gradient."""

    @staticmethod
    def forward(ctx, state, y, weight, bias, running_mean, running_var, batch_stats, factor, eps,
                layout, kernels, fold):
        pooled, mean, var = kernels.moments(state, y, layout)
        count = y.numel() // mean.shape[1]
        affine, pooled_f, mu, rstd = fold.fold_forward(mean, var, weight, bias, running_mean,
                                                       running_var, batch_stats, factor, eps, count,
                                                       y.dtype)
        ctx.batch_stats, ctx.layout, ctx.kernels, ctx.fold = batch_stats, layout, kernels, fold
        ctx.inv_n = mean.shape[0] / count
        ctx.state_shape = None if state is None else state.shape
        ctx.save_for_backward(y, mean, weight, mu, rstd)
        out = affine.unsqueeze(1).expand(2, *mean.shape), pooled_f, y
        return out if pooled is None else (pooled, *out)

    @staticmethod
    @first_order
    def backward(ctx, *grads):
        y, mean, weight, mu, rstd = ctx.saved_tensors
        grad_pooled, inv_state = None, 1.0
        if ctx.state_shape is not None:
            grad_pooled, *grads = grads
            if ctx.needs_input_grad[0]:
                inv_state = 1.0 / _pooled_count(ctx.state_shape, ctx.layout)
            else:
                grad_pooled = None
        parts, grad_pooled_f, grad_read = grads
        base, slope, grad_weight, grad_bias, grad_state = ctx.fold.fold_backward(
            parts, grad_pooled_f, mean, weight, mu, rstd, ctx.batch_stats, ctx.inv_n, y.dtype,
            grad_pooled, inv_state)
        if grad_state is not None:  # the mean's backward, scaled by the fold's pass
            grad_state = _broadcast_pooled(grad_state, ctx.state_shape, ctx.layout)
        grad_y = ctx.kernels.moments_backward(grad_read, y, base, slope, ctx.layout)
        return (grad_state, grad_y, grad_weight, grad_bias, None, None, None, None, None, None,
                None, None)


class EulerUpdate(torch.autograd.Function):
    """``act(shortcut + Δ ⊙ f)`` with Δ (B, C) (None: Δ ≡ 1) and act ReLU or identity.

    With ``state_relu`` given (True or False) it returns ``(out, moved, state)``, the (B, C)
    sums of squares of ``measured_step`` besides the output (not differentiable). With
    ``affine`` given, the folded norm's ``(a, b)`` per sample (2, B, C), a broadcast of (2, C)
    (:class:`NormMoments`), f is ``a ⊙ y + b`` of the y given as ``f`` (:mod:`.norm_fold`),
    differentiable in both; affine's gradient is the per-sample parts (2, B, C) the step's
    backward writes, whose sums over the batch are a's and b's gradients.
    """

    @staticmethod
    def forward(ctx, shortcut, step, f, relu, layout, kernels, state_relu=None, affine=None):
        norm = None if affine is None else affine[:, 0].unbind(0)
        if state_relu is None:
            out = kernels.step(shortcut, step, f, relu, layout, norm=norm)
        else:
            out, moved, state = kernels.measured_step(shortcut, step, f, relu, layout, state_relu,
                                                      norm=norm)
            ctx.mark_non_differentiable(moved, state)
        ctx.relu, ctx.layout, ctx.kernels = relu, layout, kernels
        ctx.has_step, ctx.folded = step is not None, norm is not None
        kept_f = f if ctx.has_step or ctx.folded else None
        ctx.save_for_backward(out if relu else None, kept_f, step, affine)
        return out if state_relu is None else (out, moved, state)

    @staticmethod
    @first_order
    def backward(ctx, grad, *unused):
        out, f, step, affine = ctx.saved_tensors
        if ctx.folded:
            need_sums = ctx.needs_input_grad[1] or ctx.needs_input_grad[7]
            grad_x, grad_f, parts = ctx.kernels.step_backward(grad, out, f, step, ctx.relu,
                                                              ctx.layout, need_sums,
                                                              norm=affine[:, 0].unbind(0))
            grad_step, per_sample = (None, None) if parts is None else parts
            return grad_x, grad_step, grad_f, None, None, None, None, per_sample
        need_step_grad = ctx.has_step and ctx.needs_input_grad[1]
        grad_x, grad_f, grad_step = ctx.kernels.step_backward(grad, out, f, step, ctx.relu,
                                                              ctx.layout, need_step_grad)
        return grad_x, grad_step, grad_f, None, None, None, None, None


def adaptive_step(adaptor, x_t, f, layout, kernels):
    """Δ_t (B, C) of a pooled-state adaptor from one pooling pass, through the adaptor's own
    module call (its hooks see Δ_t in the adaptor's shape)."""
    if adaptor.pools_state:
        pooled = PoolStates.apply(x_t, f, layout, kernels)
    else:
        pooled = None, PoolStates.apply(None, f, layout, kernels)
    with phi_kernels_in(getattr(kernels, 'phi', None)):
        step = adaptor(x_t, f, pooled=pooled)
    return step.reshape(f.shape[0], -1)


def folded_step(adaptor, x_t, y, norm, layout, kernels):
    """``(Δ_t, affine, y)`` of a pooled-state adaptor on the branch output ``y`` before its
    last BN ``norm``, folded (:mod:`.norm_fold`): one pass pools x_t (where the adaptor reads
    it) and gives y's per-sample moments, the BN's statistics and ``f = a ⊙ y + b`` come from
    those, and the adaptor's module call reads the pooled f without f being written.
    ``affine`` is ``(a, b)`` per sample and y the one the step reads (:class:`NormMoments`)."""
    state = x_t if adaptor.pools_state else None
    batch_stats, factor = norm_mode(norm)
    folded = NormMoments.apply(state, y, norm.weight, norm.bias, norm.running_mean,
                               norm.running_var, batch_stats, factor, norm.eps, layout, kernels,
                               fold_kernels(kernels, y.shape[0]))
    pooled, (affine, pooled_f, y) = (None, folded) if state is None else (folded[0], folded[1:])
    with phi_kernels_in(getattr(kernels, 'phi', None)):
        step = adaptor(x_t, None, pooled=(pooled, pooled_f))
    return step.reshape(y.shape[0], -1), affine, y


def _inactive(drop_path):
    """Whether ``drop_path`` (None, ``nn.Identity`` or mmcv's ``DropPath``) leaves f as it is."""
    return drop_path is None or isinstance(drop_path, nn.Identity) or not drop_path.training \
        or getattr(drop_path, 'drop_prob', None) == 0


def residual_update(x_t, f, adaptor, layout, fused, act=None, drop_path=None, shortcut=None,
                    measurable=True, norm=None):
    """``act(shortcut + Δ_t ⊙ drop_path(f))`` with ``Δ_t = adaptor(x_t, f)`` (1 without one).

    The fused step where :func:`step_kernels` gives kernels and the adaptor computes Δ_t from
    pooled states (or there is none); the reference step otherwise, with the same values.
    Where a recorder opened a :class:`~mmstiff.utils.step_sums.StepSumsRequest`, the step gives
    it its :class:`~mmstiff.utils.step_sums.StepSums` from the step's own pass (fused step) or
    None (reference step, or a step whose output is not ``x_{t+1}`` of a step from x_t).

    Args:
        x_t (Tensor): the state the adaptor reads; also the shortcut unless ``shortcut`` is set.
        f (Tensor): the residual branch output.
        adaptor (StepAdaptor | None): the block's step-size adaptor.
        layout (str): ``'nchw'`` or ``'nlc'``.
        fused: ``'auto'``, True or False (:data:`FUSED`).
        act (nn.Module, optional): the activation after the add; an ``nn.ReLU`` is fused.
        drop_path (nn.Module, optional): applied to f after the adaptor read it.
        shortcut (Tensor, optional): the term f is added to, where it is not x_t.
        measurable (bool): whether the returned tensor is the state after the step (False where
            the caller transforms it further, e.g. rescales it). Default True.
        norm (nn.Module, optional): the branch's last norm layer, ``f`` then being its input:
            the fused step with an adaptor folds an ``nn.BatchNorm2d`` into its passes
            (:mod:`.norm_fold`: f is neither written nor kept); otherwise f is ``norm(f)``.
    """
    requests = open_requests()
    shortcut = x_t if shortcut is None else shortcut
    kernels = step_kernels(f, fused)
    poolable = adaptor is None or getattr(adaptor, 'from_pooled', False)
    folds = norm is not None and kernels is not None and adaptor is not None and poolable \
        and _inactive(drop_path) and foldable_norm(norm, f)
    if norm is not None and not folds:
        f, norm = norm(f), None
    if kernels is None or not poolable:
        _give(requests, None)
        step = 1.0 if adaptor is None else adaptor(x_t, f)
        if drop_path is not None:
            f = drop_path(f)
        out = apply_step(shortcut, step, f)
        return out if act is None else act(out)
    affine = None
    if folds:
        step, affine, f = folded_step(adaptor, x_t, f, norm, layout, kernels)
    else:
        step = None if adaptor is None else adaptive_step(adaptor, x_t, f, layout, kernels)
    if drop_path is not None and not folds:
        f = drop_path(f)
    relu = type(act) is nn.ReLU
    state_relu = None
    if requests and measurable and shortcut is x_t and (act is None or relu):
        state_relu = requests[-1].state_act
        if state_relu and not relu:
            state_relu = None  # x_t is the block's activation of the shortcut: not ours
    if state_relu is None:
        _give(requests, None)
        out = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels, None, affine)
    else:
        out, moved, state = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels, state_relu,
                                              affine)
        sums = StepSums(moved.detach(), state.detach(), layout)
        for request in requests:
            request.sums.append(sums if request.state_act == state_relu else None)
    return act(out) if act is not None and not relu else out


def _give(requests, sums):
    for request in requests:
        request.sums.append(sums)
