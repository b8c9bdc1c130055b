"""AttnScale: make self-attention an all-pass filter (docs/methods.md §6).

:func:`attn_scale_output` is the closed form on ``A V`` (hand-written backward),
:func:`attn_scale_matrix` the explicit ``Â``; :func:`record_attention_maps` makes attention
modules take their explicit path and keep ``Â`` without changing the output.
"""
from contextlib import contextmanager
from typing import Dict, Iterator, Tuple

import torch
import torch.nn as nn

from mmstiff.utils.checks import check_positive_int


def attn_scale_matrix(attn: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Explicit AttnScale ``Â = A_LP + (1 + ω) (A - A_LP)`` of attention ``attn`` (..., H, n, n).

    ``omega`` has one entry per head, shape ``(H,)``.
    """
    w = omega.view(-1, 1, 1)
    return attn * (1 + w) - w / attn.shape[-1]


class AttnScaleFunction(torch.autograd.Function):
    """``y = (1 + ω) · out - ω · mean_tokens(v)`` per head, with a hand-written backward pass.

    ``out`` is ``A V`` and ``v`` is ``V``, both (..., H, n, d); ``omega`` is (H,). With ``g`` the
    output gradient and the head axis ``-3``:

        d out = (1 + ω) g,     d v = -ω Σ_tokens(g) / n   (the same for every token: returned
                                                          as a broadcast view, never stored)
        d ω = Σ g ⊙ out - Σ Σ_tokens(g) ⊙ mean_tokens(v)   (summed over all but the head axis)
    """

    @staticmethod
    def forward(ctx, out: torch.Tensor, v: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
        w = omega.to(out.dtype).view(-1, 1, 1)  # the output keeps the dtype of ``out`` (AMP)
        v_mean = v.mean(dim=-2, keepdim=True)
        ctx.save_for_backward(out, v, omega, v_mean)  # v: kept by the attention's backward too
        ctx.v_shape, ctx.omega_dtype = v.shape, omega.dtype
        return torch.addcmul(v_mean * -w, out, 1 + w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, v, omega, v_mean = ctx.saved_tensors
        if torch.is_grad_enabled():  # a graph is built (a double backward): from the inputs,
            v_mean = v.mean(dim=-2, keepdim=True)  # whose graph the saved mean lacks
        w = omega.to(out.dtype).view(-1, 1, 1)
        grad_sum = grad.sum(dim=-2, keepdim=True)
        grad_v = (grad_sum * (-w / ctx.v_shape[-2])).expand(ctx.v_shape)
        outer = tuple(i for i in range(grad.dim()) if i != grad.dim() - 3)
        grad_omega = (grad * out).sum(dim=outer) - (grad_sum * v_mean).sum(dim=outer)
        return grad * (1 + w), grad_v, grad_omega.to(ctx.omega_dtype)


def attn_scale_output(out: torch.Tensor, v: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Closed-form AttnScale ``Â V = (1 + ω) (A V) - ω mean_tokens(V)``.

    Args:
        out (Tensor): ``A V`` per head, (..., H, n, d), e.g. the output of
            ``scaled_dot_product_attention``.
        v (Tensor): the values, (..., H, n, d).
        omega (Tensor): one ω per head, (H,).
    """
    return AttnScaleFunction.apply(out, v, omega)


class AttnScale(nn.Module):
    """The per-head AttnScale weights ω of one attention layer (docs/methods.md §6).

    Args:
        num_heads (int): number of attention heads ``H``.

    Parameters:
        omega: ``(H,)``, initialised to 0 so a fresh layer computes plain attention.
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = check_positive_int('num_heads', num_heads)
        self.omega = nn.Parameter(torch.zeros(num_heads))

    def forward(self, out: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Closed form on ``out = A V`` and ``v``, both (..., H, n, d)."""
        return AttnScaleFunction.apply(out, v, self.omega)

    def scale_matrix(self, attn: torch.Tensor) -> torch.Tensor:
        """Explicit ``Â`` of an attention matrix (B, H, n, n)."""
        return attn_scale_matrix(attn, self.omega)

    def extra_repr(self) -> str:
        return f'num_heads={self.num_heads}'


class AttentionMapMixin:
    """Lets an attention module hand out its attention maps (see :func:`record_attention_maps`).

    A module using it checks :attr:`keep_attn_map` in its forward pass; when True it takes its
    explicit-matrix path and passes the matrix that multiplies ``V`` to :meth:`_store_attn_map`.
    """

    keep_attn_map = False
    _attn_map_sink = None

    def _store_attn_map(self, attn):
        maps, name = self._attn_map_sink
        maps[name] = attn.detach()


@contextmanager
def record_attention_maps(model: nn.Module) -> Iterator[Dict[str, torch.Tensor]]:
    """Record the attention maps of every supporting attention module of ``model``.

    Yields a dict that each forward pass inside the ``with`` block fills (a later pass
    overwrites an earlier one): ``{module name: attention map (B, H, n, n)}``, for window
    attention with ``B`` counting windows (``batch · num_windows``). The model's output is
    unchanged; only the explicit-matrix path replaces the fused kernel while recording.

    Example:
        >>> with record_attention_maps(backbone) as maps:
        ...     backbone(images)
        >>> maps['layers.0.attn'].shape
        torch.Size([2, 6, 197, 197])
    """
    maps = {}
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, AttentionMapMixin)]
    for name, module in modules:
        module.keep_attn_map = True
        module._attn_map_sink = (maps, name)
    try:
        yield maps
    finally:
        for _, module in modules:
            module.keep_attn_map = False
            module._attn_map_sink = None
