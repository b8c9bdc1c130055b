"""The residual branch's last BN folded into the fused step (docs/methods.md §0, "The branch's
last BN folded into the step").

Per channel a BN is ``f = a ⊙ y + b`` of the last convolution's output y, with
``a = γ / sqrt(σ² + ε)`` and ``b = β − a μ``: the step applies it as it loads y, the adaptor
reads ``a ⊙ mean(y) + b``, the batch statistics come from y's per-sample moments
(:func:`batch_moments`), and f is neither written nor kept. Everything here works on (B, C) and
(C,) tensors; the full-size passes are the kernel sets' ``moments`` and ``step``, joined with
:class:`TorchFoldKernels` (or :mod:`.triton_fold`) by :class:`~.fused_step.NormMoments`.
"""
import torch
import torch.nn as nn

from .step_kernels import wide
from .stepnet_phi import hooked, phi_factor


def uses_batch_statistics(norm):
    """Whether ``norm`` normalises with the batch's statistics (in training, or without running
    statistics), as ``_BatchNorm.forward`` decides."""
    return norm.training or (norm.running_mean is None and norm.running_var is None)


def foldable_norm(norm, y):
    """Whether the fused step can take over ``norm`` on the branch output ``y``: an
    ``nn.BatchNorm2d`` (not a subclass such as SyncBN) without hooks, and not a batch with one
    value per channel in training (which BN refuses; the module then raises its own error)."""
    if type(norm) is not nn.BatchNorm2d or hooked(norm):
        return False
    return not uses_batch_statistics(norm) or y.numel() > y.shape[1]


def norm_mode(norm):
    """``(batch_stats, factor)``: whether ``norm`` normalises with the batch's statistics, and
    the blend factor of its running statistics for this call (None: not updated), counting the
    call in ``num_batches_tracked`` as ``_BatchNorm.forward`` does."""
    batch_stats = uses_batch_statistics(norm)
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
    """The fold's (B, C) passes (:class:`~.fused_step.NormMoments`) as PyTorch operations."""

    #: the largest batch the passes take (any)
    MAX_BATCH = float('inf')

    @staticmethod
    def fold_forward(mean, var, weight, bias, running_mean, running_var, batch_stats, factor, eps,
                     count, dtype):
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
    def fold_backward(parts, grad_pooled, mean, weight, mu, rstd, batch_stats, inv_n, dtype,
                      grad_state=None, inv_state=1.0):
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


def fold_kernels(kernels, batch):
    """The fold's (B, C) passes of a kernel set: its own (``kernels.fold``) where it has them
    and they hold ``batch`` samples, the PyTorch ones otherwise."""
    fold = getattr(kernels, 'fold', None)
    return TorchFoldKernels if fold is None or batch > fold.MAX_BATCH else fold
