"""The folded projection's weight and per-sample bias (docs/methods.md §7, "Folded into the
projection"), with a hand-written backward pass.

From the projection's W (C, K) and b (C,), AttnScale's ω (H,) with the values' token means
v̄ (B, K), and FeatScale's s, t (C,) with the heads' token means ā (B, K):

    W_eff = diag(1 + t) W diag(1 + ω),      c = b - W (ω ⊙ v̄),
    β = (1 + s) ⊙ c + (s - t) ⊙ W diag(1 + ω) ā          (β = c without FeatScale)

(ω repeated over each head's K / H columns). These are small tensors, but as autograd
operators some thirty nodes of the backward graph, each with its host-side cost;
:class:`ScaledWeights` computes both directions in one node, with the intermediate values of
the forward pass (:class:`FoldParts`) kept for the backward (its cost against autograd's:
docs/benchmarks.md, "AttnScale and FeatScale folded into the projection"). A backward pass
that builds a graph (a double backward) takes autograd of :func:`scaled_weights_reference`
instead.
"""
import contextlib
from typing import NamedTuple, Optional, Sequence, Tuple

import torch

#: the order of :class:`ScaledWeights`' inputs
INPUTS = ('weight', 'bias', 'omega', 'v_mean', 'a_mean', 'dc_scale', 'hc_scale')


def head_columns(omega: torch.Tensor, columns: int) -> torch.Tensor:
    """ω (H,) repeated over each head's ``columns / H`` columns: (K,)."""
    return omega.repeat_interleave(columns // omega.shape[0])


def head_sums(per_column: torch.Tensor, heads: int) -> torch.Tensor:
    """The sum of a (K,) tensor over each head's columns: (H,)."""
    return per_column.reshape(heads, -1).sum(dim=-1)


class FoldParts(NamedTuple):
    """The intermediate values of :func:`fold_parts` that the backward pass reads (None where
    a scale is absent)."""
    om: Optional[torch.Tensor]  # ω repeated over the heads' columns, (K,)
    gain_in: Optional[torch.Tensor]  # 1 + ω, repeated, (K,)
    scaled_in: torch.Tensor  # W diag(1 + ω), (C, K)
    moved: Optional[torch.Tensor]  # ω ⊙ v̄, (B, K)
    shift: Optional[torch.Tensor]  # c = b - W (ω ⊙ v̄), (B, C); b (C,) or None without ω
    mean_proj: Optional[torch.Tensor]  # W diag(1 + ω) ā, (B, C)


def fold_parts(
    weight: torch.Tensor, bias: Optional[torch.Tensor] = None, omega: Optional[torch.Tensor] = None,
    v_mean: Optional[torch.Tensor] = None, a_mean: Optional[torch.Tensor] = None,
    dc_scale: Optional[torch.Tensor] = None, hc_scale: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, Optional[torch.Tensor], FoldParts]:
    """``(W_eff, β, parts)``: the closed forms in autograd operators, and the
    :class:`FoldParts` of the way. ``β`` is None without AttnScale, FeatScale and a bias;
    (C,) without AttnScale and FeatScale, else (B, C)."""
    om = gain_in = moved = mean_proj = None
    scaled_in, shift = weight, bias
    if omega is not None:
        om = head_columns(omega, weight.shape[1])
        gain_in = 1 + om
        scaled_in = weight * gain_in
        moved = v_mean * om
        shift = -(moved @ weight.t()) if bias is None else torch.addmm(
            bias, moved, weight.t(), alpha=-1)
    parts = FoldParts(om, gain_in, scaled_in, moved, shift, None)
    if dc_scale is None:
        return scaled_in, shift, parts
    mean_proj = a_mean @ scaled_in.t()
    beta = (dc_scale - hc_scale) * mean_proj
    if shift is not None:
        beta = torch.addcmul(beta, 1 + dc_scale, shift)
    return scaled_in * (1 + hc_scale).unsqueeze(-1), beta, parts._replace(mean_proj=mean_proj)


def scaled_weights_reference(
        *inputs: Optional[torch.Tensor],
        **named: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(W_eff, β)`` of :func:`fold_parts`: autograd's reference, and the path of a double
    backward."""
    return fold_parts(*inputs, **named)[:2]


class ScaledWeights(torch.autograd.Function):
    """:func:`scaled_weights_reference` as one autograd node: the same values, with the
    gradients written out (in the weight's dtype, autocast off: these are parameters and
    (B, K) means)."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, bias: Optional[torch.Tensor],
                omega: Optional[torch.Tensor], v_mean: Optional[torch.Tensor],
                a_mean: Optional[torch.Tensor], dc_scale: Optional[torch.Tensor],
                hc_scale: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        inputs = (weight, bias, omega, v_mean, a_mean, dc_scale, hc_scale)
        with _autocast_off(weight.device.type):
            scaled, beta, parts = fold_parts(*_in_dtype(inputs, weight.dtype))
        # the parts are not inputs: a double backward recomputes them (_autograd_grads)
        ctx.save_for_backward(*inputs, *parts)
        return scaled, beta

    @staticmethod
    def backward(ctx, grad_weight: torch.Tensor,
                 grad_beta: Optional[torch.Tensor]) -> Tuple[Optional[torch.Tensor], ...]:
        saved = ctx.saved_tensors
        inputs, parts = saved[:len(INPUTS)], FoldParts(*saved[len(INPUTS):])
        if torch.is_grad_enabled():  # a double backward: autograd of the reference
            return _autograd_grads(ctx, inputs, grad_weight, grad_beta)
        with _autocast_off(inputs[0].device.type):
            grads = scaled_weights_grads(
                _in_dtype(inputs, inputs[0].dtype), parts, grad_weight, grad_beta)
        return tuple(None if g is None or not need else g if g.dtype == t.dtype else g.to(t.dtype)
                     for g, t, need in zip(grads, inputs, ctx.needs_input_grad))


def scaled_weights_grads(inputs: Sequence[Optional[torch.Tensor]], parts: FoldParts,
                         grad_weight: torch.Tensor,
                         grad_beta: Optional[torch.Tensor]) -> Tuple[Optional[torch.Tensor], ...]:
    """The gradients of :func:`fold_parts`' :data:`INPUTS` (None where an input is None) from
    those of ``(W_eff, β)``, with its :class:`FoldParts` ``parts``."""
    weight, bias, omega, v_mean, a_mean, dc_scale, hc_scale = inputs
    grads = dict.fromkeys(INPUTS)
    grad_scaled_in, grad_shift = grad_weight, grad_beta
    if dc_scale is not None:
        grad_scaled_in = grad_weight * (1 + hc_scale).unsqueeze(-1)
        grad_mean_proj = grad_beta * (dc_scale - hc_scale)
        moved = (grad_beta * parts.mean_proj).sum(dim=0)
        grads['dc_scale'] = moved
        grads['hc_scale'] = (grad_weight * parts.scaled_in).sum(dim=1).sub_(moved)
        grads['a_mean'] = grad_mean_proj @ parts.scaled_in
        grad_scaled_in = grad_scaled_in.addmm_(grad_mean_proj.t(), a_mean)
        if parts.shift is not None:
            grad_shift = grad_beta * (1 + dc_scale)
            grads['dc_scale'] = grads['dc_scale'].add_((grad_beta * parts.shift).sum(dim=0))
            if parts.shift.dim() == 1:  # b alone: one shift for every sample
                grad_shift = grad_shift.sum(dim=0)
    if omega is None:
        grads['weight'] = grad_scaled_in
        grads['bias'] = grad_shift if bias is not None else None
        return tuple(grads[name] for name in INPUTS)
    grads['weight'] = torch.addmm(grad_scaled_in * parts.gain_in, grad_shift.t(), parts.moved,
                                  alpha=-1)
    if bias is not None:
        grads['bias'] = grad_shift.sum(dim=0)
    grad_moved = grad_shift @ weight  # minus the gradient of ω ⊙ v̄
    grads['v_mean'] = grad_moved * parts.om.neg()
    per_column = (grad_scaled_in * weight).sum(dim=0).sub_((grad_moved * v_mean).sum(dim=0))
    grads['omega'] = head_sums(per_column, omega.shape[0])
    return tuple(grads[name] for name in INPUTS)


def _autocast_off(device_type):
    """Autocast off for ``device_type`` where it is on (entering the context costs host time)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _in_dtype(inputs, dtype):
    return tuple(t if t is None or t.dtype == dtype else t.to(dtype) for t in inputs)


def _autograd_grads(ctx, inputs, grad_weight, grad_beta):
    wanted = [i for i, need in enumerate(ctx.needs_input_grad) if need]
    with torch.enable_grad():
        outputs = scaled_weights_reference(*inputs)
        found = torch.autograd.grad(outputs, [inputs[i] for i in wanted], (grad_weight, grad_beta),
                                    create_graph=True, allow_unused=True)
    grads = [None] * len(inputs)
    for i, g in zip(wanted, found):
        grads[i] = g
    return tuple(grads)


def scaled_weights(
        weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
        omega: Optional[torch.Tensor] = None, v_mean: Optional[torch.Tensor] = None,
        a_mean: Optional[torch.Tensor] = None, dc_scale: Optional[torch.Tensor] = None,
        hc_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(W_eff, β)`` of the folded projection (module docstring), in one autograd node."""
    return ScaledWeights.apply(weight, bias, omega, v_mean, a_mean, dc_scale, hc_scale)
