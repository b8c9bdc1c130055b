"""The fused residual step: ``act(x_t + Δ_t ⊙ f)`` in three memory-bound passes
(docs/methods.md §0, "The fused step"), taken by a block with ``fused=True``.

:class:`PoolStates` pools x_t and f in one pass; the adaptor computes Δ_t from the (B, C)
means in its own module call (StepNet's and SE's arithmetic in one pass each way on kernels
that have it); :class:`EulerUpdate` writes ``act(shortcut + Δ ⊙ f)`` in one pass, and its
backward in one more. With the branch's last BN given, :class:`NormMoments` folds it
(:mod:`.norm_fold`): f is neither written nor kept. The passes are Triton kernels on CUDA
(:mod:`.triton_step`) and PyTorch's (:mod:`.step_kernels`) elsewhere; under export, scripting
and :func:`~mmstiff.utils.reference_steps.reference_steps` the step is the reference step.
"""
import math

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import exporting, first_order, reference_steps_forced
from mmstiff.utils.step_sums import StepSums
from .norm_fold import fold_kernels, foldable_norm, norm_mode
from .step import reference_step
from .step_kernels import TorchStepKernels, broadcast_step
from .triton_step import HAS_TRITON, TritonStepKernels


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
    step = adaptor(x_t, f, pooled=pooled, phi=getattr(kernels, 'phi', None))
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
    step = adaptor(x_t, None, pooled=(pooled, pooled_f), phi=getattr(kernels, 'phi', None))
    return step.reshape(y.shape[0], -1), affine, y


def _inactive(drop_path):
    """Whether ``drop_path`` (None, ``nn.Identity`` or mmcv's ``DropPath``) leaves f as it is."""
    return drop_path is None or isinstance(drop_path, nn.Identity) or not drop_path.training \
        or getattr(drop_path, 'drop_prob', None) == 0


class FusedStep:
    """The fused step on one kernel set, called as :func:`~.step.reference_step` is.

    Args:
        kernels: the kernel set (:class:`TorchStepKernels`, a :class:`TritonStepKernels`, or
            stand-ins).
        compiled: the kernels inside ``torch.compile``: PyTorch's passes for a block with
            ``fused=True`` (the compiler fuses them into its own kernels), None (the reference
            step) for one whose kernels were only forced.
        layout (str): the block's states, ``'nchw'`` or ``'nlc'``.
    """

    def __init__(self, kernels, compiled=None, layout='nchw'):
        self.kernels, self.compiled, self.layout = kernels, compiled, layout

    @classmethod
    def on(cls, device: torch.device, kernels=None, compiled: bool = True,
           layout: str = 'nchw') -> 'FusedStep':
        """The fused step for a block on ``device``: on ``kernels`` if given, else Triton's
        for CUDA (with Triton installed) and PyTorch's elsewhere."""
        if kernels is None:
            cuda = torch.device(device).type == 'cuda' and HAS_TRITON
            kernels = TritonStepKernels() if cuda else TorchStepKernels
        return cls(kernels, TorchStepKernels if compiled else None, layout)

    #: the step :func:`~mmstiff.utils.reference_steps.reference_steps` puts in its place
    reference = staticmethod(reference_step)

    def __deepcopy__(self, memo):
        return self  # holds no tensor: a copied block shares its kernels

    def __call__(self, x_t: torch.Tensor, f: torch.Tensor, adaptor=None, act=None, drop_path=None,
                 shortcut=None, norm=None, request=None, measurable: bool = True) -> torch.Tensor:
        """:func:`~.step.reference_step`'s values through the fused passes; where the block is
        recorded (``request``) and the output is the state after a step from x_t
        (``measurable``), the step gives ``request`` its
        :class:`~mmstiff.utils.step_sums.StepSums` from its own pass."""
        kernels = self.kernels
        if exporting() or reference_steps_forced():
            kernels = None
        elif torch.compiler.is_compiling():
            kernels = self.compiled
        poolable = adaptor is None or getattr(adaptor, 'from_pooled', False)
        if kernels is None or not poolable:
            return reference_step(x_t, f, adaptor, act, drop_path, shortcut, norm)
        layout, shortcut = self.layout, x_t if shortcut is None else shortcut
        folds = norm is not None and adaptor is not None and _inactive(drop_path) \
            and foldable_norm(norm, f)
        if norm is not None and not folds:
            f, norm = norm(f), None
        affine = None
        if folds:
            step, affine, f = folded_step(adaptor, x_t, f, norm, layout, kernels)
        else:
            step = None if adaptor is None else adaptive_step(adaptor, x_t, f, layout, kernels)
            if drop_path is not None:
                f = drop_path(f)
        relu = type(act) is nn.ReLU
        state_relu = None
        if request is not None and measurable and shortcut is x_t and (act is None or relu):
            state_relu = request.state_act
            if state_relu and not relu:
                state_relu = None  # x_t is the block's activation of the shortcut: not ours
        if state_relu is None:
            out = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels, None, affine)
        else:
            out, moved, state = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels,
                                                  state_relu, affine)
            request.sums.append(StepSums(moved.detach(), state.detach(), layout))
        return act(out) if act is not None and not relu else out
