"""The fold pass of the fused step: the branch's last BN applied inside the step (docs/methods.md
§0, "The branch's last BN folded into the step").

Per channel a BN is ``f = a ⊙ y + b`` of the last convolution's output y: one pass gives y's
per-sample moments, the batch statistics come from those (:func:`batch_moments`), the adaptor
reads ``a ⊙ mean(y) + b``, and the Euler update applies the affine map as it loads y, so f is
neither written nor kept. :class:`TorchFoldKernels` holds the (B, C) passes in PyTorch, the
reference of :mod:`.triton_fold`; :class:`NormMoments` is the autograd Function.
"""
from typing import Any, Optional, Tuple

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import first_order
from ..base import StepAdaptor, TakeOver, step_from_means
from ..hooked import hooked
from .pool import broadcast_pooled, pooled_count
from .stepnet_phi import count_norm_call
from .torch_kernels import wide


def uses_batch_statistics(norm: nn.Module) -> bool:
    """Whether ``norm`` normalises with the batch's statistics (in training, or without running
    statistics), as ``_BatchNorm.forward`` decides."""
    return norm.training or (norm.running_mean is None and norm.running_var is None)


def foldable_norm(norm: nn.Module, y: torch.Tensor) -> bool:
    """Whether the fused step can take over ``norm`` on the branch output ``y``: an
    ``nn.BatchNorm2d`` (not a subclass such as SyncBN) without hooks, and not a batch with one
    value per channel in training (which BN refuses; the module then raises its own error)."""
    if type(norm) is not nn.BatchNorm2d or hooked(norm):
        return False
    return not uses_batch_statistics(norm) or y.numel() > y.shape[1]


def start_norm_call(norm: nn.Module) -> Tuple[bool, Optional[float]]:
    """``(batch_stats, factor)`` of this call of ``norm``, counted in its
    ``num_batches_tracked`` as ``_BatchNorm.forward`` counts it: whether it normalises with the
    batch's statistics, and the blend factor of its running statistics (None: not updated)."""
    batch_stats = uses_batch_statistics(norm)
    if not (norm.training and norm.track_running_stats):
        return batch_stats, None
    return batch_stats, count_norm_call(norm)


def batch_moments(mean: torch.Tensor, var: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and (population) variance of a batch from the (B, C) per-sample
    means and variances of equally many values each (the law of total variance)."""
    spread, mu = torch.var_mean(mean, dim=0, correction=0)
    return mu, var.mean(dim=0) + spread


def norm_affine(weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], mu: torch.Tensor,
                rstd: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(a, b)`` (C,) with ``BN(y) = a ⊙ y + b`` for the mean ``mu`` and
    ``rstd = (σ² + ε)^-½``."""
    scale = rstd
    if weight is not None:
        scale = scale * weight
    if bias is None:
        return scale, -scale * mu
    return scale, torch.addcmul(bias, scale, mu, value=-1)


#: what ``fold_forward`` returns: ``(affine (2, C), p (B, C), μ (C,), r (C,))``
FoldForward = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
#: what ``fold_backward`` returns: ``(c0, c1 or None, grad of weight or None, grad of bias or
#: None, scaled grad_state or None)``
FoldGrads = Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor],
                  Optional[torch.Tensor], Optional[torch.Tensor]]


class TorchFoldKernels:
    """The fold's (B, C) passes (:class:`NormMoments`) as PyTorch operations."""

    #: the largest batch the passes take (any)
    MAX_BATCH = float('inf')

    @staticmethod
    def fold_forward(mean: torch.Tensor, var: torch.Tensor, weight: Optional[torch.Tensor],
                     bias: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                     running_var: Optional[torch.Tensor], batch_stats: bool,
                     factor: Optional[float], eps: float, count: int,
                     dtype: torch.dtype) -> FoldForward:
        """``(affine, p, μ, r)``: the affine map of the norm as one (2, C) float32 tensor
        ``(a, b)``, the pooled f ``p = a ⊙ mean + b`` (B, C) in ``dtype``, and the statistics
        used, ``r = (σ² + ε)^-½``. With ``batch_stats`` the batch's (:func:`batch_moments`),
        blended into the running statistics in place when ``factor`` is not None (the variance
        unbiased over ``count`` values per channel); otherwise the running statistics."""
        if batch_stats:
            mu, sigma2 = batch_moments(mean, var)
            if factor is not None:
                with torch.no_grad():
                    running_mean.lerp_(mu.to(running_mean.dtype), factor)
                    unbiased = sigma2 * (count / (count - 1))
                    running_var.lerp_(unbiased.to(running_var.dtype), factor)
        else:
            mu, sigma2 = wide(running_mean), wide(running_var)
        rstd = torch.rsqrt(sigma2 + eps)
        scale, shift = norm_affine(weight, bias, mu, rstd)
        pooled = torch.addcmul(shift, mean, scale).to(dtype)
        return torch.stack((scale, shift)), pooled, mu, rstd

    @staticmethod
    def fold_backward(parts: torch.Tensor, grad_pooled: torch.Tensor, mean: torch.Tensor,
                      weight: Optional[torch.Tensor], mu: torch.Tensor, rstd: torch.Tensor,
                      batch_stats: bool, inv_n: float, dtype: torch.dtype,
                      grad_state: Optional[torch.Tensor] = None,
                      inv_state: float = 1.0) -> FoldGrads:
        """``(c0, c1, grad of weight, grad of bias, scaled grad_state)`` from the (2, B, C)
        per-sample ``parts`` of the gradients of a and b (their sums over the batch are those
        gradients) and the gradient of p: y's gradient through its moments is ``c0 + c1 ⊙ y``
        per (b, c), both (B, C) in ``dtype`` (c1 None without ``batch_stats``: the variances
        are not used), ``inv_n`` one over the values per (b, c); weight and bias: None for a
        norm without them; the last, ``grad_state * inv_state`` (None without it): the gradient
        of the pooled x_t turned into that of each of its values (the mean's backward)."""
        grad_scale, grad_shift = wide(parts).sum(dim=1)
        grad_pooled = wide(grad_pooled)
        centred = mean - mu
        gamma = rstd.new_ones(()) if weight is None else wide(weight)
        sum_p = grad_pooled.sum(dim=0)
        # ∂L/∂(γ r): a = γ r, b = β − γ r μ, p = γ r (m − μ) + β
        inner = grad_scale - grad_shift * mu + (grad_pooled * centred).sum(dim=0)
        scale = gamma * rstd
        grad_mean = grad_pooled * scale
        slope = None
        if batch_stats:
            batch = mean.shape[0]
            grad_mu = -scale * (grad_shift + sum_p)
            grad_sigma2 = gamma * inner * (-0.5 * rstd.pow(3))
            grad_mean = grad_mean + (grad_mu + 2 * grad_sigma2 * centred) / batch
            # ∂L/∂v = ∂L/∂σ² / B, and ∂v/∂y = 2 (y − m) / N
            slope = (grad_sigma2 * (2 * inv_n / batch)).expand_as(mean)
            base = (grad_mean * inv_n - slope * mean).to(dtype)
            slope = slope.to(dtype)
        else:
            base = (grad_mean * inv_n).to(dtype)
        scaled = None if grad_state is None else grad_state * inv_state
        if weight is None:
            return base, slope, None, None, scaled
        return base, slope, rstd * inner, grad_shift + sum_p, scaled


def fold_kernels(kernels: object, batch: int) -> object:
    """The fold's (B, C) passes of a kernel set: its own (``kernels.fold``) where it has them
    and they hold ``batch`` samples, the PyTorch ones otherwise."""
    fold = getattr(kernels, 'fold', None)
    return TorchFoldKernels if fold is None or batch > fold.MAX_BATCH else fold


class NormMoments(torch.autograd.Function):
    """``(mean x_t, affine, p, y)`` from one pass over x_t and the branch output y before its
    last BN (no ``mean x_t`` for x_t None), the folded norm (:mod:`.fold`): the pass gives
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
    def forward(ctx, state: Optional[torch.Tensor], y: torch.Tensor, weight: Optional[torch.Tensor],
                bias: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                running_var: Optional[torch.Tensor], batch_stats: bool, factor: Optional[float],
                eps: float, layout: str, kernels: Any, fold: Any) -> Tuple[torch.Tensor, ...]:
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
    def backward(ctx, *grads: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        y, mean, weight, mu, rstd = ctx.saved_tensors
        grad_pooled, inv_state = None, 1.0
        if ctx.state_shape is not None:
            grad_pooled, *grads = grads
            if ctx.needs_input_grad[0]:
                inv_state = 1.0 / pooled_count(ctx.state_shape, ctx.layout)
            else:
                grad_pooled = None
        parts, grad_pooled_f, grad_read = grads
        base, slope, grad_weight, grad_bias, grad_state = ctx.fold.fold_backward(
            parts, grad_pooled_f, mean, weight, mu, rstd, ctx.batch_stats, ctx.inv_n, y.dtype,
            grad_pooled, inv_state)
        if grad_state is not None:  # the mean's backward, scaled by the fold's pass
            grad_state = broadcast_pooled(grad_state, ctx.state_shape, ctx.layout)
        grad_y = ctx.kernels.moments_backward(grad_read, y, base, slope, ctx.layout)
        return (grad_state, grad_y, grad_weight, grad_bias, None, None, None, None, None, None,
                None, None)


def folded_step(adaptor: StepAdaptor, x_t: torch.Tensor, y: torch.Tensor, norm: nn.Module,
                layout: str, kernels: object, phi: Optional[TakeOver] = None) -> tuple:
    """``(Δ_t, affine, y)`` of a pooled-state adaptor on the branch output ``y`` before its
    last BN ``norm``, folded (:mod:`.fold`): one pass pools x_t (where the adaptor reads
    it) and gives y's per-sample moments, the BN's statistics and ``f = a ⊙ y + b`` come from
    those, and the adaptor's module call reads the pooled f without f being written.
    ``affine`` is ``(a, b)`` per sample and y the one the step reads (:class:`NormMoments`)."""
    state = x_t if adaptor.pools_state else None
    batch_stats, factor = start_norm_call(norm)
    folded = NormMoments.apply(state, y, norm.weight, norm.bias, norm.running_mean,
                               norm.running_var, batch_stats, factor, norm.eps, layout, kernels,
                               fold_kernels(kernels, y.shape[0]))
    pooled, (affine, pooled_f, y) = (None, folded) if state is None else (folded[0], folded[1:])
    step = step_from_means(adaptor, pooled, pooled_f, phi)
    return step.reshape(y.shape[0], -1), affine, y
