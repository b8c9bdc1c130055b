"""Triton kernels of the folded BN's (B, C) passes (docs/methods.md §0, "The branch's last BN
folded into the step").

:class:`~mmstiff.models.steps.fused.fold.TorchFoldKernels`'s two passes, one kernel each, a
program per block of channels over the whole batch: forward, the batch's statistics from the
per-sample moments (or the running ones), the running-statistics update, ``a``, ``b`` and the
pooled f; backward, the sums over the batch of a's and b's per-sample gradients, y's gradient
through its moments as two (B, C) coefficients, the gradients of the affine parameters and the
pooled x_t's gradient scaled for its values. Sums in float32 whatever the input dtype.
"""
from typing import Optional

import torch

from mmstiff.utils.triton_launch import HAS_TRITON, cdiv, tile_warps, tl, triton
from .fold import FoldForward, FoldGrads
from .triton_columns import ColumnKernels, column_blocks, column_tile

if HAS_TRITON:

    @triton.jit
    def _fold_forward_kernel(m_ptr, v_ptr, w_ptr, b_ptr, rm_ptr, rv_ptr, ad_ptr, p_ptr, mu_ptr,
                             r_ptr, B, C, factor, unbias, eps, BATCH_STATS: tl.constexpr,
                             UPDATE: tl.constexpr, AFFINE: tl.constexpr, BLOCK_B: tl.constexpr,
                             BLOCK_C: tl.constexpr):
        cs, bs, c_ok, ok = column_tile(B, C, BLOCK_B, BLOCK_C)
        at = bs[:, None] * C + cs[None, :]
        m = tl.load(m_ptr + at, mask=ok, other=0.0).to(tl.float32)
        if BATCH_STATS:
            v = tl.load(v_ptr + at, mask=ok, other=0.0).to(tl.float32)
            mu = tl.sum(m, axis=0) / B
            centred = tl.where(ok, m - mu[None, :], 0.0)
            var = (tl.sum(v, axis=0) + tl.sum(centred * centred, axis=0)) / B
            if UPDATE:
                rm = tl.load(rm_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
                rv = tl.load(rv_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
                tl.store(rm_ptr + cs, (rm + factor * (mu - rm)).to(rm_ptr.dtype.element_ty),
                         mask=c_ok)
                tl.store(rv_ptr + cs,
                         (rv + factor * (var * unbias - rv)).to(rv_ptr.dtype.element_ty), mask=c_ok)
        else:
            mu = tl.load(rm_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
            var = tl.load(rv_ptr + cs, mask=c_ok, other=1.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(var + eps)
        scale = rstd
        shift = -rstd * mu
        if AFFINE:
            scale = rstd * tl.load(w_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
            shift = tl.load(b_ptr + cs, mask=c_ok, other=0.0).to(tl.float32) - scale * mu
        tl.store(ad_ptr + cs, scale, mask=c_ok)  # a and b: the rows of one (2, C) tensor
        tl.store(ad_ptr + C + cs, shift, mask=c_ok)
        tl.store(mu_ptr + cs, mu, mask=c_ok)
        tl.store(r_ptr + cs, rstd, mask=c_ok)
        pooled = m * scale[None, :] + shift[None, :]
        tl.store(p_ptr + at, pooled.to(p_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _fold_backward_kernel(parts_ptr, gp_ptr, m_ptr, w_ptr, mu_ptr, r_ptr, c0_ptr, c1_ptr,
                              gw_ptr, gb_ptr, gs_ptr, so_ptr, B, C, inv_n, inv_state,
                              BATCH_STATS: tl.constexpr, AFFINE: tl.constexpr,
                              GRAD_STATE: tl.constexpr, BLOCK_B: tl.constexpr,
                              BLOCK_C: tl.constexpr):
        # a's and b's gradients: the sums over the batch of their per-sample parts, the rows of
        # one (2, B, C) tensor. y's gradient through its (b, c) moments is c0 + c1 y:
        # c1 = 2 ∂L/∂v / N, c0 = ∂L/∂m / N − c1 m (N the values per (b, c), inv_n = 1 / N).
        # GRAD_STATE: the pooled x_t's gradient times inv_state (the mean's backward)
        cs, bs, c_ok, ok = column_tile(B, C, BLOCK_B, BLOCK_C)
        at = bs[:, None] * C + cs[None, :]
        g_p = tl.load(gp_ptr + at, mask=ok, other=0.0).to(tl.float32)
        g_a = tl.sum(tl.load(parts_ptr + at, mask=ok, other=0.0).to(tl.float32), axis=0)
        g_d = tl.sum(tl.load(parts_ptr + B * C + at, mask=ok, other=0.0).to(tl.float32), axis=0)
        if GRAD_STATE:
            g_s = tl.load(gs_ptr + at, mask=ok, other=0.0).to(tl.float32)
            tl.store(so_ptr + at, (g_s * inv_state).to(so_ptr.dtype.element_ty), mask=ok)
        mu = tl.load(mu_ptr + cs, mask=c_ok, other=0.0)
        rstd = tl.load(r_ptr + cs, mask=c_ok, other=0.0)
        gamma = tl.full([BLOCK_C], 1.0, tl.float32)
        if AFFINE:
            gamma = tl.load(w_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
        m = tl.load(m_ptr + at, mask=ok, other=0.0)
        centred = tl.where(ok, m - mu[None, :], 0.0)
        sum_p = tl.sum(g_p, axis=0)
        inner = g_a - g_d * mu + tl.sum(g_p * centred, axis=0)  # ∂L/∂(γ r)
        scale = gamma * rstd
        c0 = g_p * (scale * inv_n)[None, :]
        if BATCH_STATS:
            g_mu = -scale * (g_d + sum_p)
            g_var = gamma * inner * (-0.5 * rstd * rstd * rstd)
            c0 += (g_mu[None, :] + 2.0 * g_var[None, :] * centred) * (inv_n / B)
            c1 = g_var * (2.0 * inv_n / B)
            c0 -= c1[None, :] * m
            c1_tile = tl.zeros([BLOCK_B, BLOCK_C], tl.float32) + c1[None, :]
            tl.store(c1_ptr + at, c1_tile.to(c1_ptr.dtype.element_ty), mask=ok)
        tl.store(c0_ptr + at, c0.to(c0_ptr.dtype.element_ty), mask=ok)
        if AFFINE:
            tl.store(gw_ptr + cs, rstd * inner, mask=c_ok)
            tl.store(gb_ptr + cs, g_d + sum_p, mask=c_ok)


class TritonFoldKernels(ColumnKernels):
    """:class:`~mmstiff.models.steps.fused.fold.TorchFoldKernels`'s passes as Triton kernels
    (one launch each; a batch of up to :attr:`MAX_BATCH` samples)."""

    def __init__(self):
        super().__init__()
        self._forward, self._backward = _fold_forward_kernel, _fold_backward_kernel

    def fold_forward(self, mean: torch.Tensor, var: torch.Tensor, weight: Optional[torch.Tensor],
                     bias: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                     running_var: Optional[torch.Tensor], batch_stats: bool,
                     factor: Optional[float], eps: float, count: int,
                     dtype: torch.dtype) -> FoldForward:
        """As :meth:`~mmstiff.models.steps.fused.fold.TorchFoldKernels.fold_forward`, in one
        kernel launch."""
        batch, channels = mean.shape
        mean, var = mean.contiguous(), var.contiguous()
        f32 = dict(dtype=torch.float32, device=mean.device)
        affine = torch.empty(2, channels, **f32)  # a and b
        mu, rstd = torch.empty(channels, **f32), torch.empty(channels, **f32)
        pooled = torch.empty(batch, channels, dtype=dtype, device=mean.device)
        has_affine = weight is not None
        update = batch_stats and factor is not None
        block_b, block_c = column_blocks(batch, channels)
        self._forward[(cdiv(channels, block_c), )](
            mean, var, weight if has_affine else mean, bias if has_affine else mean,
            running_mean if running_mean is not None else mean,
            running_var if running_var is not None else mean, affine, pooled, mu, rstd, batch,
            channels, float(factor) if update else 0.0, count / (count - 1) if count > 1 else 1.0,
            float(eps), BATCH_STATS=batch_stats, UPDATE=update, AFFINE=has_affine, BLOCK_B=block_b,
            BLOCK_C=block_c, num_warps=tile_warps(block_b, block_c))
        return affine, pooled, mu, rstd

    def fold_backward(self, parts: torch.Tensor, grad_pooled: torch.Tensor, mean: torch.Tensor,
                      weight: Optional[torch.Tensor], mu: torch.Tensor, rstd: torch.Tensor,
                      batch_stats: bool, inv_n: float, dtype: torch.dtype,
                      grad_state: Optional[torch.Tensor] = None,
                      inv_state: float = 1.0) -> FoldGrads:
        """As :meth:`~mmstiff.models.steps.fused.fold.TorchFoldKernels.fold_backward`, in one
        kernel launch."""
        batch, channels = mean.shape
        f32 = dict(dtype=torch.float32, device=mean.device)
        base = torch.empty(batch, channels, dtype=dtype, device=mean.device)
        slope = torch.empty_like(base) if batch_stats else None
        affine = weight is not None
        grad_weight = torch.empty(channels, **f32) if affine else None
        grad_bias = torch.empty(channels, **f32) if affine else None
        scaled = None
        if grad_state is not None:
            grad_state = grad_state.contiguous()
            scaled = torch.empty_like(grad_state)
        block_b, block_c = column_blocks(batch, channels)
        self._backward[(cdiv(channels, block_c), )](
            parts.contiguous(), grad_pooled.contiguous(), mean, weight if affine else mu, mu, rstd,
            base, base if slope is None else slope, grad_weight if affine else mu,
            grad_bias if affine else mu, mu if grad_state is None else grad_state,
            mu if scaled is None else scaled, batch, channels, float(inv_n), float(inv_state),
            BATCH_STATS=batch_stats, AFFINE=affine, GRAD_STATE=grad_state is not None,
            BLOCK_B=block_b, BLOCK_C=block_c, num_warps=tile_warps(block_b, block_c))
        if affine:
            grad_weight, grad_bias = (
                g if g.dtype == weight.dtype else g.to(weight.dtype)
                for g in (grad_weight, grad_bias))
        return base, slope, grad_weight, grad_bias, scaled
