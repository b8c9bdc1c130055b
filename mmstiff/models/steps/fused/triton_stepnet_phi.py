"""Triton kernels of StepNet's (B, C) arithmetic (docs/methods.md §0, "The fused step").

The two passes of :class:`~mmstiff.models.steps.fused.stepnet_phi.TorchPhiKernels`, one kernel each:
a program holds a block of channels over the whole batch, so the batch statistics, the
running-statistics update and, backward, BN's per-channel sums stay in it. Arithmetic in
float32; (B, C) tensors contiguous.
"""
from typing import Optional, Tuple

import torch

from mmstiff.utils.triton_launch import HAS_TRITON, cdiv, tile_warps, tl, triton
from .stepnet_phi import PhiGrads
from .triton_columns import ColumnKernels, column_blocks, column_tile

if HAS_TRITON:

    @triton.jit
    def _column(ptr, bs, cs, ok, C):
        return tl.load(ptr + bs[:, None] * C + cs[None, :], mask=ok, other=0.0).to(tl.float32)

    @triton.jit
    def _row(ptr, cs, c_ok):
        return tl.load(ptr + cs, mask=c_ok, other=0.0).to(tl.float32)

    @triton.jit
    def _phi_forward_kernel(u_ptr, p_ptr, w_ptr, g_ptr, bt_ptr, iw_ptr, ib_ptr, rm_ptr, rv_ptr,
                            d_ptr, mean_ptr, rstd_ptr, B, C, factor, unbias, eps, scale,
                            BATCH_STATS: tl.constexpr, UPDATE: tl.constexpr, BLOCK_B: tl.constexpr,
                            BLOCK_C: tl.constexpr):
        cs, bs, c_ok, ok = column_tile(B, C, BLOCK_B, BLOCK_C)
        u = _column(u_ptr, bs, cs, ok, C)
        p = _column(p_ptr, bs, cs, ok, C)
        w0 = tl.load(w_ptr + 2 * cs, mask=c_ok, other=0.0).to(tl.float32)
        w1 = tl.load(w_ptr + 2 * cs + 1, mask=c_ok, other=0.0).to(tl.float32)
        z = w0[None, :] * u + w1[None, :] * (u + p)
        if BATCH_STATS:
            mean = tl.sum(z, axis=0) / B
            centred = tl.where(ok, z - mean[None, :], 0.0)
            var = tl.sum(centred * centred, axis=0) / B
            if UPDATE:
                rm = _row(rm_ptr, cs, c_ok)
                rv = _row(rv_ptr, cs, c_ok)
                tl.store(rm_ptr + cs, rm * (1 - factor) + mean * factor, mask=c_ok)
                tl.store(rv_ptr + cs, rv * (1 - factor) + var * unbias * factor, mask=c_ok)
        else:
            mean = _row(rm_ptr, cs, c_ok)
            var = _row(rv_ptr, cs, c_ok)
        rstd = 1.0 / tl.sqrt(var + eps)
        y = _row(g_ptr, cs, c_ok)[None, :] * ((z - mean[None, :]) * rstd[None, :]) + \
            _row(bt_ptr, cs, c_ok)[None, :]
        z2 = _row(iw_ptr, cs, c_ok)[None, :] * y + _row(ib_ptr, cs, c_ok)[None, :]
        step = scale * tl.sigmoid(z2)
        tl.store(d_ptr + bs[:, None] * C + cs[None, :], step.to(d_ptr.dtype.element_ty), mask=ok)
        tl.store(mean_ptr + cs, mean, mask=c_ok)
        tl.store(rstd_ptr + cs, rstd, mask=c_ok)

    @triton.jit
    def _phi_backward_kernel(gd_ptr, u_ptr, p_ptr, w_ptr, g_ptr, bt_ptr, iw_ptr, ib_ptr, mean_ptr,
                             rstd_ptr, gu_ptr, gp_ptr, gw_ptr, gg_ptr, gb_ptr, giw_ptr, gib_ptr, B,
                             C, scale, BATCH_STATS: tl.constexpr, BLOCK_B: tl.constexpr,
                             BLOCK_C: tl.constexpr):
        cs, bs, c_ok, ok = column_tile(B, C, BLOCK_B, BLOCK_C)
        at = bs[:, None] * C + cs[None, :]
        grad = _column(gd_ptr, bs, cs, ok, C)
        u = _column(u_ptr, bs, cs, ok, C)
        v = u + _column(p_ptr, bs, cs, ok, C)
        w0 = tl.load(w_ptr + 2 * cs, mask=c_ok, other=0.0).to(tl.float32)
        w1 = tl.load(w_ptr + 2 * cs + 1, mask=c_ok, other=0.0).to(tl.float32)
        gamma = _row(g_ptr, cs, c_ok)
        ie_weight = _row(iw_ptr, cs, c_ok)
        rstd = _row(rstd_ptr, cs, c_ok)
        zhat = (w0[None, :] * u + w1[None, :] * v - _row(mean_ptr, cs, c_ok)[None, :]) * \
            rstd[None, :]
        zhat = tl.where(ok, zhat, 0.0)
        y = gamma[None, :] * zhat + _row(bt_ptr, cs, c_ok)[None, :]
        s = tl.sigmoid(ie_weight[None, :] * y + _row(ib_ptr, cs, c_ok)[None, :])
        g2 = tl.where(ok, grad * scale * s * (1 - s), 0.0)
        g_y = g2 * ie_weight[None, :]
        g_zhat = g_y * gamma[None, :]
        if BATCH_STATS:
            mean_g = tl.sum(g_zhat, axis=0) / B
            mean_gz = tl.sum(g_zhat * zhat, axis=0) / B
            g_z = rstd[None, :] * (g_zhat - mean_g[None, :] - zhat * mean_gz[None, :])
            g_z = tl.where(ok, g_z, 0.0)
        else:
            g_z = g_zhat * rstd[None, :]
        tl.store(gu_ptr + at, (g_z * (w0 + w1)[None, :]).to(gu_ptr.dtype.element_ty), mask=ok)
        tl.store(gp_ptr + at, (g_z * w1[None, :]).to(gp_ptr.dtype.element_ty), mask=ok)
        tl.store(gw_ptr + 2 * cs, tl.sum(g_z * u, axis=0), mask=c_ok)
        tl.store(gw_ptr + 2 * cs + 1, tl.sum(g_z * v, axis=0), mask=c_ok)
        tl.store(gg_ptr + cs, tl.sum(g_y * zhat, axis=0), mask=c_ok)
        tl.store(gb_ptr + cs, tl.sum(g_y, axis=0), mask=c_ok)
        tl.store(giw_ptr + cs, tl.sum(g2 * y, axis=0), mask=c_ok)
        tl.store(gib_ptr + cs, tl.sum(g2, axis=0), mask=c_ok)


class TritonPhiKernels(ColumnKernels):
    """:class:`~mmstiff.models.steps.fused.stepnet_phi.TorchPhiKernels`'s passes as Triton kernels
    (one launch each; a batch of up to :attr:`MAX_BATCH` samples; larger batches take the
    adaptor's modules)."""

    def __init__(self):
        super().__init__()
        self._forward, self._backward = _phi_forward_kernel, _phi_backward_kernel

    def phi_forward(self, u: torch.Tensor, p: torch.Tensor, weight: torch.Tensor,
                    gamma: torch.Tensor, beta: torch.Tensor, ie_weight: torch.Tensor,
                    ie_bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                    batch_stats: bool, factor: Optional[float], eps: float,
                    scale: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`~mmstiff.models.steps.fused.stepnet_phi.TorchPhiKernels.phi_forward`, in one
        kernel launch."""
        batch, channels = u.shape
        u, p, weight = (t if t.is_contiguous() else t.contiguous() for t in (u, p, weight))
        step = torch.empty_like(u, dtype=torch.promote_types(u.dtype, weight.dtype))
        mean = torch.empty(channels, dtype=torch.float32, device=u.device)
        rstd = torch.empty_like(mean)
        block_b, block_c = column_blocks(batch, channels)
        unbias = batch / (batch - 1) if batch > 1 else 1.0
        self._forward[(cdiv(channels,
                            block_c), )](u, p, weight, gamma, beta, ie_weight, ie_bias,
                                         running_mean, running_var, step, mean, rstd, batch,
                                         channels, 0.0 if factor is None else float(factor), unbias,
                                         float(eps), float(scale), BATCH_STATS=batch_stats,
                                         UPDATE=batch_stats and factor is not None, BLOCK_B=block_b,
                                         BLOCK_C=block_c, num_warps=tile_warps(block_b, block_c))
        return step, mean, rstd

    def phi_backward(self, grad: torch.Tensor, u: torch.Tensor, p: torch.Tensor,
                     weight: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                     ie_weight: torch.Tensor, ie_bias: torch.Tensor, mean: torch.Tensor,
                     rstd: torch.Tensor, batch_stats: bool, scale: float) -> PhiGrads:
        """As :meth:`~mmstiff.models.steps.fused.stepnet_phi.TorchPhiKernels.phi_backward`, in one
        kernel launch."""
        batch, channels = u.shape
        grad_u, grad_p = torch.empty_like(u), torch.empty_like(p)
        grad_weight = torch.empty(weight.shape, dtype=torch.float32, device=u.device)
        grad_gamma, grad_beta, grad_ie_weight, grad_ie_bias = (
            torch.empty(channels, dtype=torch.float32, device=u.device) for _ in range(4))
        block_b, block_c = column_blocks(batch, channels)
        grid = (cdiv(channels, block_c), )
        # a full tile: with 8 warps some launches spilled to local memory, with 16 none does
        # (docs/benchmarks.md, "Registers and spills, compiled without a GPU")
        grads = grad_u, grad_p, grad_weight, grad_gamma, grad_beta, grad_ie_weight, grad_ie_bias
        self._backward[grid](grad, u, p, weight, gamma,
                             beta, ie_weight, ie_bias, mean, rstd, *grads, batch, channels,
                             float(scale), BATCH_STATS=batch_stats, BLOCK_B=block_b,
                             BLOCK_C=block_c, num_warps=tile_warps(block_b, block_c, full=16))
        return (grad_u, grad_p,
                *(_as(g, like)
                  for g, like in ((grad_weight, weight), (grad_gamma, gamma), (grad_beta, beta),
                                  (grad_ie_weight, ie_weight), (grad_ie_bias, ie_bias))))


def _as(grad, like):
    """``grad`` (float32) in the dtype of the parameter ``like``."""
    return grad if grad.dtype == like.dtype else grad.to(like.dtype)
