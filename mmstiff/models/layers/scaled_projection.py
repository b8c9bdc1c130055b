"""AttnScale and FeatScale folded into the attention's output projection (docs/methods.md §6,
§7, "Folded into the projection").

Around the output projection ``proj(y) = y Wᵀ + b`` both are per-channel affine maps plus a
token mean: AttnScale before it, on the heads' output ``a = A V`` (ω per head, repeated over
the head's columns), FeatScale after it:

    y = a ⊙ (1 + ω) - mean_n(v) ⊙ ω,        z = x ⊙ (1 + t) + mean_n(x) ⊙ (s - t),   x = proj(y)

so the three are one linear map with its weight scaled on both sides and a bias per sample:

    z = a W_effᵀ + β,      W_eff = diag(1 + t) W diag(1 + ω),
    β = (1 + s) ⊙ (b - W (ω ⊙ mean_n(v))) + (s - t) ⊙ W diag(1 + ω) mean_n(a).

Forward, this passes over the tokens as often as the layers do (a mean each, then β added
where each layer would write its output). Backward, each layer on its own passes over the
tokens seven times (two sums, a product and its reduction, a scaled copy of the gradient);
folded, β's gradient is the sum the projection's bias takes anyway, and each mean's gradient
is added to v's or a's as a broadcast view. On their own, AttnScale's output and FeatScale's
input are kept for the backward pass; folded, nothing is kept that the attention and the
projection do not keep. What the fold adds is arithmetic on weight-sized tensors
(:mod:`.scaled_weights`). It has second derivatives.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.utils.reference_steps import exporting
from .scaled_weights import scaled_weights


class TokenMean(torch.autograd.Function):
    """The mean over the tokens (dim -2) whose gradient is a broadcast view of the (..., C)
    gradient: autograd's own mean writes its gradient out in full, one more pass over the
    tokens, before it is added to the tokens' other gradient. Differentiable again (its
    backward is linear in the gradient)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.shape, ctx.dtype = x.shape, x.dtype
        return x.mean(dim=-2)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad / ctx.shape[-2]
        if grad.dtype != ctx.dtype:
            grad = grad.to(ctx.dtype)
        return grad.unsqueeze(-2).expand(ctx.shape)


def token_mean(x: torch.Tensor) -> torch.Tensor:
    """``x.mean(dim=-2)`` (tokens (..., N, C)), with a gradient that is a broadcast view."""
    return TokenMean.apply(x)


def scaled_projection(a: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                      omega: Optional[torch.Tensor] = None, v_mean: Optional[torch.Tensor] = None,
                      dc_scale: Optional[torch.Tensor] = None,
                      hc_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``FeatScale(proj(AttnScale(a, v)))`` as one linear map with a bias per sample.

    Args:
        a (Tensor): the heads' outputs ``A V``, (B, N, K), heads concatenated along K.
        weight (Tensor): the projection's weight W, (C, K).
        bias (Tensor, optional): its bias b, (C,).
        omega (Tensor, optional): AttnScale's ω, one per head, (H,), H dividing K; needs
            ``v_mean``. None: no AttnScale.
        v_mean (Tensor, optional): ``mean_n(v)`` of the values, (B, K) or (B, H, K / H)
            (:func:`token_mean`: its gradient reaches v as a broadcast view).
        dc_scale, hc_scale (Tensor, optional): FeatScale's s and t, (C,). None: no FeatScale.

    Returns:
        Tensor: (B, N, C) in the dtype of the projection's output.
    """
    has_feat = dc_scale is not None
    if has_feat != (hc_scale is not None):
        raise ValueError('dc_scale and hc_scale are given together (FeatScale) or not at all; '
                         f'got dc_scale {_given(dc_scale)}, hc_scale {_given(hc_scale)}')
    if (omega is None) != (v_mean is None):
        raise ValueError('omega and v_mean are given together (AttnScale) or not at all; got '
                         f'omega {_given(omega)}, v_mean {_given(v_mean)}')
    columns = weight.shape[1]
    if a.shape[-1] != columns:
        raise ValueError(f'a has {a.shape[-1]} channels (shape {tuple(a.shape)}); expected the '
                         f"projection's {columns} input columns")
    if omega is not None:
        if omega.dim() != 1 or columns % omega.shape[0]:
            raise ValueError(f'omega has shape {tuple(omega.shape)}; expected one entry per '
                             f'head, (H,), with H dividing the {columns} input columns')
        v_mean = v_mean.reshape(v_mean.shape[0], -1)
        if v_mean.shape[1] != columns:
            raise ValueError(f'v_mean has {v_mean.shape[1]} values per sample; expected '
                             f'{columns}, one per input column')
    a_mean = token_mean(a) if has_feat else None
    scaled, beta = scaled_weights(weight, bias, omega, v_mean, a_mean, dc_scale, hc_scale)
    out = F.linear(a, scaled)
    return out if beta is None else out.add_(_per_sample(beta, out))


def _per_sample(beta, out):
    """``beta`` (B, C) or (C,) viewed against ``out`` (B, N, C), in its dtype."""
    if beta.dtype != out.dtype:
        beta = beta.to(out.dtype)
    return beta.unsqueeze(-2) if beta.dim() == 2 else beta


def _given(t):
    return 'given' if t is not None else 'None'


def has_module_hooks(module: nn.Module) -> bool:
    """Whether forward or backward hooks (or pre-hooks) are registered on ``module``: a call
    the fold would leave out."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def foldable_projection(proj: nn.Module) -> bool:
    """Whether ``proj`` is a plain ``nn.Linear`` with no hooks, so that its weight and bias may
    be used in its place (a subclass, e.g. a LoRA or quantised linear, is called as itself)."""
    return type(proj) is nn.Linear and not has_module_hooks(proj)


def folded_scales(attention: nn.Module, explicit: bool = False) -> Tuple[bool, bool]:
    """``(fold AttnScale, fold FeatScale)`` for an attention layer with ``proj``, ``proj_drop``,
    a ``fold_scales`` switch and ``attn_scale`` / ``feat_scale`` layers (None or absent: off).

    Neither with ``fold_scales`` False, nor with ``'auto'`` where no graph is recorded (no
    backward pass follows: forward, the fold passes over the tokens as often as the layers and
    adds its weight-sized work), nor under export
    (:func:`~mmstiff.utils.reference_steps.exporting`), nor into a projection other than a
    plain linear layer (:func:`foldable_projection`), nor a layer with hooks of its own (they
    would not be called); AttnScale not where the attention matrix was formed (``explicit``:
    ``Â`` is there already); FeatScale not across an active dropout after the projection.
    """
    choice = attention.fold_scales
    if choice is False or (choice == 'auto' and not torch.is_grad_enabled()) or \
            not foldable_projection(attention.proj) or exporting():
        return False, False
    attn = getattr(attention, 'attn_scale', None)
    feat = getattr(attention, 'feat_scale', None)
    fold_attn = attn is not None and not explicit and not has_module_hooks(attn)
    dropout = attention.training and getattr(attention.proj_drop, 'p', 0) > 0
    fold_feat = feat is not None and not dropout and not has_module_hooks(feat)
    return fold_attn, fold_feat


def projected_output(attention: nn.Module, x: torch.Tensor, v: Optional[torch.Tensor] = None,
                     fold_attn: bool = False, fold_feat: bool = False) -> torch.Tensor:
    """An attention layer's output from its heads' outputs ``x`` (B, N, K), AttnScale already
    applied unless ``fold_attn``: the projection and its dropout, then FeatScale, with
    AttnScale (from the values ``v``, (B, H, N, K / H)) and FeatScale folded into the
    projection as :func:`folded_scales` decided."""
    feat = getattr(attention, 'feat_scale', None)
    if fold_attn or fold_feat:
        attn = dict(omega=attention.attn_scale.omega, v_mean=token_mean(v)) if fold_attn else {}
        scales = dict(dc_scale=feat.dc_scale, hc_scale=feat.hc_scale) if fold_feat else {}
        proj = attention.proj
        x = attention.proj_drop(scaled_projection(x, proj.weight, proj.bias, **attn, **scales))
    else:
        x = attention.proj_drop(attention.proj(x))
    if feat is not None and not fold_feat:
        x = feat(x)
    return x
