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


def update_running(norm, mu, var, count, factor):
    """Blend the batch's ``mu`` and ``var`` (of ``count`` values per channel) into ``norm``'s
    running statistics with ``factor``, the variance unbiased, as ``F.batch_norm`` does."""
    with torch.no_grad():
        norm.running_mean.lerp_(mu.to(norm.running_mean.dtype), factor)
        unbiased = var * (count / (count - 1))
        norm.running_var.lerp_(unbiased.to(norm.running_var.dtype), factor)


def norm_affine(weight, bias, mu, var, eps):
    """``(a, b)`` (C,) with ``BN(y) = a ⊙ y + b`` for the statistics ``mu``, ``var``."""
    scale = torch.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight
    if bias is None:
        return scale, -scale * mu
    return scale, torch.addcmul(bias, scale, mu, value=-1)


def folded_norm(norm, mean, var, count):
    """``(a, b)`` of ``norm`` on a batch whose (B, C) float32 per-sample moments are ``mean``,
    ``var`` (``count`` values per channel over the batch): the batch's statistics in training,
    blended into the running ones, or the running statistics; differentiable in ``mean``,
    ``var`` and the affine parameters."""
    batch_stats, factor = norm_mode(norm)
    if batch_stats:
        mu, sigma2 = batch_moments(mean, var)
        if factor is not None:
            update_running(norm, mu, sigma2, count, factor)
    else:
        mu, sigma2 = wide(norm.running_mean), wide(norm.running_var)
    return norm_affine(norm.weight, norm.bias, mu, sigma2, norm.eps)


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
