"""FeatScale: re-weight the DC and high-frequency parts of the MSA output (docs/methods.md §7).

Anti-oversmoothing paper, §3.2, Eq. (10). For a token matrix ``X`` (n tokens × d channels),

    X_DC = mean_tokens(X),   X_HC = X - X_DC
    X <- X_DC ⊙ (1 + s) + X_HC ⊙ (1 + t),       s, t ∈ R^d, both initialised to 0,

applied to the MSA output after the output projection, before drop-path / LayerScale and the
residual add. This is the single-add form (the public DeiT file adds the scaled parts on top of
``X`` a second time). ``n`` counts every token, the class token included.

Rewritten as ``X ⊙ (1 + t) + X_DC ⊙ (s - t)`` it is one fused multiply-add over the tokens
(:func:`feat_scale`), plus a token mean. Its backward pass is written out by hand
(:class:`FeatScaleFunction`): three passes over the tokens instead of the five autograd would
take, which is most of FeatScale's training cost.
"""
from typing import Tuple

import torch
import torch.nn as nn

from mmstiff.utils.checks import check_positive_int


def split_frequencies(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(X_DC, X_HC)`` of tokens ``x`` (..., n, d): the token mean and the remainder."""
    x_dc = x.mean(dim=-2, keepdim=True)
    return x_dc, x - x_dc


class FeatScaleFunction(torch.autograd.Function):
    """``y = x ⊙ (1 + t) + mean_tokens(x) ⊙ (s - t)`` with a hand-written backward pass.

    With ``g`` the output gradient, ``n`` the number of tokens and sums over tokens and batch:

        dx = g ⊙ (1 + t) + Σ_tokens(g) ⊙ (s - t) / n
        ds = Σ Σ_tokens(g) ⊙ X_DC,      dt = Σ g ⊙ x - ds
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, dc_scale: torch.Tensor,
                hc_scale: torch.Tensor) -> torch.Tensor:
        ctx.scale_dtype = dc_scale.dtype
        x_dc = x.mean(dim=-2, keepdim=True)
        ctx.save_for_backward(x, dc_scale, hc_scale, x_dc)
        dc_scale, hc_scale = dc_scale.to(x.dtype), hc_scale.to(x.dtype)  # keep x's dtype (AMP)
        return torch.addcmul(x_dc * (dc_scale - hc_scale), x, 1 + hc_scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, dc_scale, hc_scale, x_dc = ctx.saved_tensors
        if torch.is_grad_enabled():  # a graph is built (a double backward): from the inputs,
            x_dc = x.mean(dim=-2, keepdim=True)  # whose graph the saved mean lacks
        dc_scale, hc_scale = dc_scale.to(x.dtype), hc_scale.to(x.dtype)
        grad_dc = grad.sum(dim=-2, keepdim=True)
        grad_x = torch.addcmul(grad_dc * ((dc_scale - hc_scale) / x.shape[-2]), grad, 1 + hc_scale)
        outer = tuple(range(x.dim() - 1))
        grad_s = (grad_dc * x_dc).sum(dim=outer)
        grad_t = (grad * x).sum(dim=outer) - grad_s
        return grad_x, grad_s.to(ctx.scale_dtype), grad_t.to(ctx.scale_dtype)


def feat_scale(x: torch.Tensor, dc_scale: torch.Tensor, hc_scale: torch.Tensor) -> torch.Tensor:
    """FeatScale of tokens ``x`` (..., n, d) with per-channel ``s = dc_scale``, ``t = hc_scale``.

    Returns ``X_DC ⊙ (1 + s) + X_HC ⊙ (1 + t)``, computed as ``x ⊙ (1 + t) + X_DC ⊙ (s - t)``.
    """
    return FeatScaleFunction.apply(x, dc_scale, hc_scale)


class FeatScale(nn.Module):
    """Learnable FeatScale for one layer (docs/methods.md §7).

    Args:
        channels (int): the token width ``d``.

    Parameters:
        dc_scale: ``s_l ∈ R^d``, the extra gain of the DC component, initialised to 0.
        hc_scale: ``t_l ∈ R^d``, the extra gain of the high-frequency component, initialised
            to 0, so a fresh layer is the identity.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.channels = check_positive_int('channels', channels)
        self.dc_scale = nn.Parameter(torch.zeros(channels))
        self.hc_scale = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return feat_scale(x, self.dc_scale, self.hc_scale)

    def extra_repr(self) -> str:
        return f'channels={self.channels}'
