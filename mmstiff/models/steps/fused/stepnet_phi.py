"""StepNet's (B, C) arithmetic in one forward and one backward pass (docs/methods.md §0, §1).

For ``groups = C`` and a plain ``nn.BatchNorm2d``, Δ is a per-channel function of the batch's
column of ``(u, p) = (GAP(x_t), GAP(f))``: :class:`StepNetPhi` computes it (batch statistics and
the running-statistics update included) and its backward. :class:`TorchPhiKernels` is the
PyTorch expression of both passes, the reference of :mod:`.triton_stepnet_phi`.
"""
from typing import Any, Optional, Tuple

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import first_order
from ..hooked import hooked


def stepnet_phi_applies(adaptor: nn.Module, batch: int, kernels: object) -> bool:
    """Whether :class:`StepNetPhi` computes ``adaptor``'s Δ on ``kernels`` for ``batch``
    samples: ``groups = C`` with an affine ``nn.BatchNorm2d`` that tracks running statistics,
    no hook on them, a batch the kernels hold, and not a one-sample batch that only the BN is
    in train mode for (the modules then raise BN's own error)."""
    norm = adaptor.norm
    if (adaptor.norm_type != 'bn_ie' or adaptor.groups != adaptor.channels
            or type(norm) is not nn.BatchNorm2d or not norm.affine or not norm.track_running_stats
            or batch > kernels.MAX_BATCH or hooked(adaptor.conv, norm)):
        return False
    return not (norm.training and batch == 1 and not adaptor.training)


def start_phi_call(adaptor: nn.Module, batch: int) -> Tuple[bool, Optional[float]]:
    """``(batch_stats, factor)`` of this call of ``adaptor``'s BN, counted in its
    ``num_batches_tracked`` where the BN's forward would count it: a one-sample batch uses
    the running statistics, left unchanged (the adaptor's rule)."""
    norm = adaptor.norm
    if not norm.training or batch == 1:
        return False, None
    return True, count_norm_call(norm)


def stepnet_phi_step(adaptor: nn.Module, u: torch.Tensor, residual: torch.Tensor,
                     kernels: object) -> Optional[torch.Tensor]:
    """Δ (B, C) of a StepNet adaptor through :class:`StepNetPhi` on ``kernels``, or None where
    :func:`stepnet_phi_applies` says its modules compute."""
    norm, batch = adaptor.norm, u.shape[0]
    if not stepnet_phi_applies(adaptor, batch, kernels):
        return None
    weight = adaptor.conv.weight.view(adaptor.channels, 2)
    batch_stats, factor = start_phi_call(adaptor, batch)
    return StepNetPhi.apply(u, residual, weight, norm.weight, norm.bias, adaptor.ie_weight,
                            adaptor.ie_bias, norm.running_mean, norm.running_var, batch_stats,
                            factor, norm.eps, adaptor.step_scale, kernels)


#: the gradients ``phi_backward`` returns: of ``(u, p, weight (C, 2), gamma, beta, ie_weight,
#: ie_bias)``
PhiGrads = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                 torch.Tensor]


class TorchPhiKernels:
    """The two passes of :class:`StepNetPhi` as PyTorch operations on (B, C) tensors."""

    #: the largest batch the passes take (any)
    MAX_BATCH = float('inf')

    @staticmethod
    def phi_forward(u: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor,
                    beta: torch.Tensor, ie_weight: torch.Tensor, ie_bias: torch.Tensor,
                    running_mean: torch.Tensor, running_var: torch.Tensor, batch_stats: bool,
                    factor: Optional[float], eps: float,
                    scale: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
    def phi_backward(grad: torch.Tensor, u: torch.Tensor, p: torch.Tensor, weight: torch.Tensor,
                     gamma: torch.Tensor, beta: torch.Tensor, ie_weight: torch.Tensor,
                     ie_bias: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                     batch_stats: bool, scale: float) -> PhiGrads:
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
    def forward(ctx, u: torch.Tensor, p: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor,
                beta: torch.Tensor, ie_weight: torch.Tensor, ie_bias: torch.Tensor,
                running_mean: torch.Tensor, running_var: torch.Tensor, batch_stats: bool,
                factor: Optional[float], eps: float, scale: float, kernels: Any) -> torch.Tensor:
        step, mean, rstd = kernels.phi_forward(u, p, weight, gamma, beta, ie_weight, ie_bias,
                                               running_mean, running_var, batch_stats, factor, eps,
                                               scale)
        ctx.batch_stats, ctx.scale, ctx.kernels = batch_stats, scale, kernels
        ctx.save_for_backward(u, p, weight, gamma, beta, ie_weight, ie_bias, mean, rstd)
        return step

    @staticmethod
    @first_order
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        saved = [_contiguous(t) for t in ctx.saved_tensors]
        grads = ctx.kernels.phi_backward(_contiguous(grad), *saved, ctx.batch_stats, ctx.scale)
        return (*grads, None, None, None, None, None, None, None)


def _contiguous(t):
    return t if t.is_contiguous() else t.contiguous()


def count_norm_call(norm: nn.Module) -> Optional[float]:
    """Count this call of a train-mode ``nn.BatchNorm2d`` as its forward does
    (``num_batches_tracked`` + 1) and return the blend factor of its running statistics
    (``momentum=None``: the cumulative average ``1 / num_batches_tracked``)."""
    if not norm.track_running_stats or norm.num_batches_tracked is None:
        return norm.momentum  # pragma: no cover - the fused path needs running statistics
    norm.num_batches_tracked.add_(1)
    if norm.momentum is None:
        return 1.0 / float(norm.num_batches_tracked)
    return norm.momentum
