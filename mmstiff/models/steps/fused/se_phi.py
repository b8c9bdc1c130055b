"""SE's (B, C) arithmetic in one forward and one backward computation (docs/methods.md §0, §3).

``Δ = scale · σ(W2 · relu(W1 · p + b1) + b2)`` with ``p = GAP(f)``: a two-layer perceptron on
the batch's rows. :class:`SEPhi` computes it on kernels that have the passes and keeps for the
backward only ``p``, the hidden ``h`` and Δ. :class:`TorchSEPhiKernels` is the PyTorch
expression of both passes, the reference of :mod:`.triton_se_phi`.
"""
from typing import Any, Optional, Tuple

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import first_order
from ..se import plain_units, unit_weights

#: the gradients ``se_backward`` returns: of ``(p, W1, b1, W2, b2)``
SEGrads = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class TorchSEPhiKernels:
    """The two passes of :class:`SEPhi` as PyTorch operations on (B, C) tensors."""

    #: the largest batch the SE passes take (any)
    SE_MAX_BATCH = float('inf')

    @staticmethod
    def se_forward(p: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                   b2: torch.Tensor, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(Δ, h)``: ``h = relu(p W1ᵀ + b1)`` (B, S), ``Δ = scale σ(h W2ᵀ + b2)`` (B, C), in
        the weights' dtype (a half-precision ``p`` under AMP is read in it)."""
        hidden = torch.addmm(b1, p.to(w1.dtype), w1.t()).relu_()
        return scale * torch.sigmoid(torch.addmm(b2, hidden, w2.t())), hidden

    @staticmethod
    def se_backward(grad: torch.Tensor, p: torch.Tensor, hidden: torch.Tensor, step: torch.Tensor,
                    w1: torch.Tensor, w2: torch.Tensor, scale: float) -> SEGrads:
        """The gradients of ``(p, W1, b1, W2, b2)`` from Δ's: ``σ' = Δ (1 - Δ / scale) / scale``
        and the ReLU's mask ``h > 0``."""
        g_z = grad * step * (1 - step / scale)
        g_h = (g_z @ w2).masked_fill_(hidden <= 0, 0.0)
        return ((g_h @ w1).to(p.dtype), g_h.t() @ p.to(w1.dtype), g_h.sum(dim=0), g_z.t() @ hidden,
                g_z.sum(dim=0))


class SEPhi(torch.autograd.Function):
    """Δ (B, C) of an SE adaptor from ``p = GAP(f)`` through ``kernels``
    (:class:`TorchSEPhiKernels` or the Triton set)."""

    @staticmethod
    def forward(ctx, p: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                b2: torch.Tensor, scale: float, kernels: Any) -> torch.Tensor:
        step, hidden = kernels.se_forward(p, w1, b1, w2, b2, scale)
        ctx.scale, ctx.kernels = scale, kernels
        ctx.save_for_backward(p, hidden, step, w1, w2)
        return step

    @staticmethod
    @first_order
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        p, hidden, step, w1, w2 = ctx.saved_tensors
        grad = grad if grad.is_contiguous() else grad.contiguous()
        grads = ctx.kernels.se_backward(grad, p, hidden, step, w1, w2, ctx.scale)
        return (*grads, None, None)


def se_phi_applies(adaptor: nn.Module, batch: int, kernels: object) -> bool:
    """Whether :class:`SEPhi` computes ``adaptor``'s Δ on ``kernels`` for a batch of ``batch``
    samples: kernels with the SE passes, plain units (:func:`~..se.plain_units`) and a batch
    the kernels hold."""
    if not hasattr(kernels, 'se_forward') or batch > kernels.SE_MAX_BATCH:
        return False
    return plain_units(adaptor)


def se_phi_step(adaptor: nn.Module, state: Optional[torch.Tensor], p: torch.Tensor,
                kernels: object) -> Optional[torch.Tensor]:
    """Δ (B, C) of an SE adaptor from ``p = GAP(f)`` through :class:`SEPhi` on ``kernels``, or
    None where :func:`se_phi_applies` says its modules compute; ``state`` is not read."""
    if not se_phi_applies(adaptor, p.shape[0], kernels):
        return None
    return SEPhi.apply(p, *unit_weights(adaptor), adaptor.step_scale, kernels)
