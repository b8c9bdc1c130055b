"""The residual branch's last BN folded into the fused step (docs/methods.md §0, "The folded
norm").

A post-activation block ends its branch in a BN: ``f = γ (y − μ) / sqrt(σ² + ε) + β`` of the
last convolution's output y. Per channel that is an affine map ``f = a ⊙ y + b``, with
``a = γ / sqrt(σ² + ε)`` and ``b = β − a μ``, so the fused step can apply it as it loads y:

* the (B, C) means of f the adaptor reads are ``a ⊙ mean(y) + b``;
* the batch statistics (μ, σ²) combine the per-sample means and variances of y over the pooled
  axes (:func:`batch_moments`);
* the step writes ``act(x_t + Δ ⊙ (a ⊙ y + b))`` and never writes f.

f is then neither written nor kept for the backward: the step keeps y, which BN keeps in the
reference too. Everything here works on (B, C) and (C,) tensors; the passes over full-size
tensors are the kernel sets' ``moments`` and ``step`` (:mod:`.step_kernels`).
"""
import torch
import torch.nn as nn

from mmstiff.utils.layout import POOLED_AXES
from .step_kernels import wide
from .stepnet_phi import hooked, phi_factor


def foldable_norm(norm, y):
    """Whether the fused step can take over ``norm`` on the branch output ``y``: an
    ``nn.BatchNorm2d`` (not a subclass such as SyncBN) without hooks, and not a batch with one
    value per channel in training (which BN refuses; the module then raises its own error)."""
    if type(norm) is not nn.BatchNorm2d or hooked(norm):
        return False
    batch_stats = norm.training or (norm.running_mean is None and norm.running_var is None)
    return not batch_stats or y.numel() > y.shape[1]


def norm_mode(norm):
    """``(batch_stats, factor)``: whether ``norm`` normalises with the batch's statistics, and
    the blend factor of its running statistics for this call (None: not updated), counting the
    call in ``num_batches_tracked`` as ``_BatchNorm.forward`` does."""
    batch_stats = norm.training or (norm.running_mean is None and norm.running_var is None)
    if not (norm.training and norm.track_running_stats):
        return batch_stats, None
    return batch_stats, phi_factor(norm)


def batch_moments(mean, var):
    """The per-channel mean and (population) variance of a batch from the (B, C) per-sample
    means and variances of equally many values each (the law of total variance)."""
    spread, mu = torch.var_mean(mean, dim=0, correction=0)
    return mu, var.mean(dim=0) + spread


def norm_affine(weight, bias, mu, rstd):
    """``(a, b)`` (C,) with ``BN(y) = a ⊙ y + b`` for the mean ``mu`` and
    ``rstd = (σ² + ε)^-½``."""
    scale = rstd
    if weight is not None:
        scale = scale * weight
    if bias is None:
        return scale, -scale * mu
    return scale, torch.addcmul(bias, scale, mu, value=-1)


class TorchFoldKernels:
    """The fold's (B, C) passes (:class:`FoldedNorm`) as PyTorch operations."""

    #: the largest batch the passes take (any)
    MAX_BATCH = float('inf')

    @staticmethod
    def fold_forward(mean, var, weight, bias, running_mean, running_var, batch_stats, factor, eps,
                     count, dtype):
        """``(a, b, p, μ, r)``: the affine map of the norm, the pooled f ``p = a ⊙ mean + b``
        (B, C) in ``dtype``, and the statistics used, ``r = (σ² + ε)^-½``. With ``batch_stats``
        the batch's (:func:`batch_moments`), blended into the running statistics in place when
        ``factor`` is not None (the variance unbiased over ``count`` values per channel);
        otherwise the running statistics."""
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
        return scale, shift, torch.addcmul(shift, mean, scale).to(dtype), mu, rstd

    @staticmethod
    def fold_backward(grad_scale, grad_shift, grad_pooled, mean, weight, mu, rstd, batch_stats):
        """The gradients of ``(mean, var, weight, bias)`` (var: None without ``batch_stats``;
        weight and bias: None for a norm without them) from those of ``(a, b, p)``."""
        grad_pooled = wide(grad_pooled)
        centred = mean - mu
        gamma = rstd.new_ones(()) if weight is None else wide(weight)
        sum_p = grad_pooled.sum(dim=0)
        # ∂L/∂(γ r): a = γ r, b = β − γ r μ, p = γ r (m − μ) + β
        inner = grad_scale - grad_shift * mu + (grad_pooled * centred).sum(dim=0)
        scale = gamma * rstd
        grad_mean = grad_pooled * scale
        grad_var = None
        if batch_stats:
            batch = mean.shape[0]
            grad_mu = -scale * (grad_shift + sum_p)
            grad_sigma2 = gamma * inner * (-0.5 * rstd.pow(3))
            grad_mean = grad_mean + (grad_mu + 2 * grad_sigma2 * centred) / batch
            grad_var = (grad_sigma2 / batch).expand_as(mean)
        if weight is None:
            return grad_mean, grad_var, None, None
        return grad_mean, grad_var, rstd * inner, grad_shift + sum_p


class FoldedNorm(torch.autograd.Function):
    """``(a, b, p)`` of a BN from y's (B, C) per-sample moments, through ``kernels``
    (:class:`TorchFoldKernels` or the Triton set): one pass each way over (B, C) vectors, the
    running-statistics update included."""

    @staticmethod
    def forward(ctx, mean, var, weight, bias, running_mean, running_var, batch_stats, factor, eps,
                count, dtype, kernels):
        scale, shift, pooled, mu, rstd = kernels.fold_forward(mean, var, weight, bias, running_mean,
                                                              running_var, batch_stats, factor, eps,
                                                              count, dtype)
        ctx.batch_stats, ctx.kernels = batch_stats, kernels
        ctx.save_for_backward(mean, weight, mu, rstd)
        return scale, shift, pooled

    @staticmethod
    def backward(ctx, grad_scale, grad_shift, grad_pooled):
        mean, weight, mu, rstd = ctx.saved_tensors
        grads = ctx.kernels.fold_backward(grad_scale, grad_shift, grad_pooled.contiguous(), mean,
                                          weight, mu, rstd, ctx.batch_stats)
        return (*grads, None, None, None, None, None, None, None, None)


def folded_norm(norm, mean, var, count, dtype, kernels=None):
    """``(a, b, p)`` of ``norm`` on a batch whose (B, C) float32 per-sample moments are
    ``mean``, ``var`` (``count`` values per channel over the batch): the batch's statistics in
    training, blended into the running ones, or the running statistics, and the pooled f
    ``p = a ⊙ mean + b`` in ``dtype``; differentiable in ``mean``, ``var`` and the affine
    parameters. ``kernels``: a kernel set's fold passes (None, or a batch they do not hold: the
    PyTorch ones)."""
    if kernels is None or mean.shape[0] > kernels.MAX_BATCH:
        kernels = TorchFoldKernels
    batch_stats, factor = norm_mode(norm)
    return FoldedNorm.apply(mean, var, norm.weight, norm.bias, norm.running_mean, norm.running_var,
                            batch_stats, factor, norm.eps, count, dtype, kernels)


def folded_grads(step, scale, shift, sums):
    """The gradients of ``(Δ, a, b)`` of the step ``x_t + Δ ⊙ (a ⊙ y + b)`` from the (B, C)
    sums ``(Σ g' ⊙ y, Σ g')`` over the pooled axes (``g'`` the gradient after the activation);
    Δ None: Δ ≡ 1 (no gradient of it)."""
    s_gy, s_g = sums
    grad_step = None if step is None else scale * s_gy + shift * s_g
    if step is not None:
        s_gy, s_g = wide(step) * s_gy, wide(step) * s_g
    return grad_step, s_gy.sum(dim=0), s_g.sum(dim=0)


def moments_backward(grad_mean, grad_var, y, mean, layout):
    """The gradient of y from those of its (B, C) per-sample means and population variances
    over the pooled axes (``grad_var`` None: the means' only, a broadcast view)."""
    count = 1
    for dim in POOLED_AXES[layout]:
        count *= y.shape[dim]
    view = (y.shape[0], 1, y.shape[2]) if layout == 'nlc' else (*y.shape[:2], 1, 1)
    base = grad_mean * (1.0 / count)
    if grad_var is None:
        return base.to(y.dtype).view(view).expand(y.shape)
    slope = grad_var * (2.0 / count)
    base = base - slope * mean
    return torch.addcmul(base.to(y.dtype).view(view), y, slope.to(y.dtype).view(view))
