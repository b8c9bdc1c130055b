"""StepNet's (B, C) arithmetic as one forward and one backward pass (docs/methods.md §0, "The
fused step"; the math: §1).

For ``groups = C`` and a plain BN (``nn.BatchNorm2d`` with its affine and running statistics),
``Δ = scale · σ(W_IE ⊙ BN(w_0 ⊙ u + w_1 ⊙ v) + b_IE)`` with ``v = u + p`` is a per-channel
function of the batch's column of ``(u, p)``: :class:`StepNetPhi` computes it in one pass per
channel (batch statistics and the running-statistics update included) and its backward in one
more, where the fused step runs on kernels that have them (:func:`phi_mode` says where the
adaptor's modules run instead). :class:`TorchPhiKernels` is the PyTorch expression of both
passes (the reference of the Triton kernels of :mod:`.triton_adaptor`, checked by
``gradcheck``).
"""
import torch
import torch.nn as nn
from torch.nn.modules import module as _module

from mmstiff.utils.reference_steps import first_order


def hooked(*modules):
    """Whether any of ``modules`` (or every module, globally) has a forward or backward hook."""
    if _module._global_forward_hooks or _module._global_forward_pre_hooks or \
            _module._global_backward_hooks or _module._global_backward_pre_hooks:
        return True
    return any(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
        for m in modules)


def phi_mode(adaptor, batch, kernels):
    """``(batch_stats, factor)`` of :class:`StepNetPhi` for ``adaptor`` on a batch of
    ``batch`` samples, counting the call in its BN; None where the adaptor's modules must run
    (not ``groups = C`` with an affine ``nn.BatchNorm2d`` that tracks running statistics and has
    no hook, or a batch the kernels do not hold)."""
    norm = adaptor.norm
    if (adaptor.norm_type != 'bn_ie' or adaptor.groups != adaptor.channels
            or type(norm) is not nn.BatchNorm2d or not norm.affine or not norm.track_running_stats
            or batch > kernels.MAX_BATCH or hooked(adaptor.conv, norm)):
        return None
    if not norm.training:
        return False, None
    if batch == 1:  # the one-sample rule: the running statistics, left unchanged
        return (False, None) if adaptor.training else None
    return True, phi_factor(norm)


class TorchPhiKernels:
    """The two passes of :class:`StepNetPhi` as PyTorch operations on (B, C) tensors."""

    #: the largest batch the passes take (any)
    MAX_BATCH = float('inf')

    @staticmethod
    def phi_forward(u, p, weight, gamma, beta, ie_weight, ie_bias, running_mean, running_var,
                    batch_stats, factor, eps, scale):
        """``(Δ, mean, rstd)``; with ``batch_stats`` the batch's mean and ``1/sqrt(var + eps)``
        are used and (``factor`` not None) blended into the running statistics in place
        (unbiased variance), else the running statistics are used."""
        z = weight[:, 0] * u + weight[:, 1] * (u + p)
        if batch_stats:
            mean = z.mean(dim=0)
            var = (z - mean).square().mean(dim=0)
            if factor is not None:
                batch = z.shape[0]
                running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                running_var.mul_(1 - factor).add_(var.detach() * (batch / (batch - 1)),
                                                  alpha=factor)
        else:
            mean, var = running_mean.to(z.dtype), running_var.to(z.dtype)
        rstd = (var + eps).rsqrt()
        y = gamma * ((z - mean) * rstd) + beta
        return scale * torch.sigmoid(ie_weight * y + ie_bias), mean, rstd

    @staticmethod
    def phi_backward(grad, u, p, weight, gamma, beta, ie_weight, ie_bias, mean, rstd, batch_stats,
                     scale):
        """The gradients of ``(u, p, weight (C, 2), gamma, beta, ie_weight, ie_bias)``."""
        v = u + p
        z = weight[:, 0] * u + weight[:, 1] * v
        zhat = (z - mean) * rstd
        y = gamma * zhat + beta
        s = torch.sigmoid(ie_weight * y + ie_bias)
        g2 = grad * scale * s * (1 - s)
        g_y = g2 * ie_weight
        g_zhat = g_y * gamma
        if batch_stats:
            g_z = rstd * (g_zhat - g_zhat.mean(dim=0) - zhat * (g_zhat * zhat).mean(dim=0))
        else:
            g_z = g_zhat * rstd
        g_weight = torch.stack([(g_z * u).sum(dim=0), (g_z * v).sum(dim=0)], dim=1)
        return (g_z * (weight[:, 0] + weight[:, 1]), g_z * weight[:, 1], g_weight,
                (g_y * zhat).sum(dim=0), g_y.sum(dim=0), (g2 * y).sum(dim=0), g2.sum(dim=0))


class StepNetPhi(torch.autograd.Function):
    """Δ (B, C) of a ``groups = C``, plain-BN StepNet adaptor from ``u = GAP(x_t)`` and
    ``p = GAP(f)`` through ``kernels`` (:class:`TorchPhiKernels` or the Triton set)."""

    @staticmethod
    def forward(ctx, u, p, weight, gamma, beta, ie_weight, ie_bias, running_mean, running_var,
                batch_stats, factor, eps, scale, kernels):
        step, mean, rstd = kernels.phi_forward(u, p, weight, gamma, beta, ie_weight, ie_bias,
                                               running_mean, running_var, batch_stats, factor, eps,
                                               scale)
        ctx.batch_stats, ctx.scale, ctx.kernels = batch_stats, scale, kernels
        ctx.save_for_backward(u, p, weight, gamma, beta, ie_weight, ie_bias, mean, rstd)
        return step

    @staticmethod
    @first_order
    def backward(ctx, grad):
        saved = [_contiguous(t) for t in ctx.saved_tensors]
        grads = ctx.kernels.phi_backward(_contiguous(grad), *saved, ctx.batch_stats, ctx.scale)
        return (*grads, None, None, None, None, None, None, None)


def _contiguous(t):
    return t if t.is_contiguous() else t.contiguous()


def phi_factor(norm):
    """The running-statistics blend factor of a train-mode ``nn.BatchNorm2d`` for this call,
    counting the call as ``nn.BatchNorm2d.forward`` does (``num_batches_tracked`` + 1;
    ``momentum=None``: the cumulative average ``1 / num_batches_tracked``)."""
    if not norm.track_running_stats or norm.num_batches_tracked is None:
        return norm.momentum  # pragma: no cover - the fused path needs running statistics
    norm.num_batches_tracked.add_(1)
    if norm.momentum is None:
        return 1.0 / float(norm.num_batches_tracked)
    return norm.momentum
