"""Triton kernels of the fused step's full-size passes (docs/methods.md §0, "The fused step"):
the passes of :class:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels`, one kernel each.

``pool`` / ``moments`` read x_t and f (or y) once; ``step`` and ``measured_step`` write
``act(shortcut + Δ ⊙ f)`` (and the sums of squares a recorder reads); ``step_backward`` and
``moments_backward`` write the gradients. Every tensor is addressed as (B, N, C) with its own
strides (contiguous, channels-last, tokens); sums accumulate in float32. With
``TRITON_INTERPRET=1`` set before Triton is imported they run on CPU tensors (the tests).
"""
from typing import List, Optional, Tuple

import torch

from mmstiff.utils.triton_launch import (HAS_TRITON, as_bnc, cdiv, state_blocks, tile_warps, tl,
                                         triton)
from ..update import state_dtype
from .torch_kernels import Affine, Measured, StepGrads
from .triton_fold import TritonFoldKernels
from .triton_se_phi import TritonSEPhiKernels
from .triton_stepnet_phi import TritonPhiKernels


class TritonAdaptorKernels(TritonPhiKernels, TritonSEPhiKernels):
    """The adaptors' (B, C) passes: StepNet's (``phi_*``) and SE's (``se_*``)."""

    def __init__(self):
        TritonPhiKernels.__init__(self)
        TritonSEPhiKernels.__init__(self)


if HAS_TRITON:

    @triton.jit
    def _pool_kernel(x_ptr, f_ptr, xm_ptr, fm_ptr, fv_ptr, N, C, sxb, sxn, sxc, sfb, sfn, sfc,
                     inv_n, POOL_X: tl.constexpr, MOMENTS: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_C: tl.constexpr):
        # MOMENTS: f's float32 mean and population variance, summed about f's first value of
        # each (b, c) (shifted sums: no cancellation where the mean is large against the spread)
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = cs < C
        shift = tl.zeros([BLOCK_C], dtype=tl.float32)
        if MOMENTS:
            shift = tl.load(f_ptr + b * sfb + cs * sfc, mask=c_ok, other=0.0).to(tl.float32)
        acc_f = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        acc_q = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        acc_x = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            ok = (ns < N)[:, None] & c_ok[None, :]
            f = tl.load(f_ptr + b * sfb + ns[:, None] * sfn + cs[None, :] * sfc, mask=ok, other=0.0)
            if MOMENTS:
                d = tl.where(ok, f.to(tl.float32) - shift[None, :], 0.0)
                acc_f += d
                acc_q += d * d
            else:
                acc_f += f.to(tl.float32)
            if POOL_X:
                x = tl.load(x_ptr + b * sxb + ns[:, None] * sxn + cs[None, :] * sxc, mask=ok,
                            other=0.0)
                acc_x += x.to(tl.float32)
        mean_d = tl.sum(acc_f, axis=0) * inv_n
        tl.store(fm_ptr + b * C + cs, (shift + mean_d).to(fm_ptr.dtype.element_ty), mask=c_ok)
        if MOMENTS:
            var = tl.maximum(tl.sum(acc_q, axis=0) * inv_n - mean_d * mean_d, 0.0)
            tl.store(fv_ptr + b * C + cs, var, mask=c_ok)
        if POOL_X:
            tl.store(xm_ptr + b * C + cs,
                     (tl.sum(acc_x, axis=0) * inv_n).to(xm_ptr.dtype.element_ty), mask=c_ok)

    @triton.jit
    def _step_row(s_ptr, b, cs, c_ok, C, HAS_STEP: tl.constexpr, BLOCK_C: tl.constexpr):
        """Δ of sample b over the channels ``cs`` (1 without a step size), in float32."""
        s = tl.full([BLOCK_C], 1.0, tl.float32)
        if HAS_STEP:
            s = tl.load(s_ptr + b * C + cs, mask=c_ok, other=0.0).to(tl.float32)
        return s

    @triton.jit
    def _norm_row(a_ptr, d_ptr, cs, c_ok, HAS_NORM: tl.constexpr, BLOCK_C: tl.constexpr):
        """The folded norm's ``(a, b)`` over the channels ``cs`` (1 and 0 without one)."""
        a = tl.full([BLOCK_C], 1.0, tl.float32)
        d = tl.zeros([BLOCK_C], dtype=tl.float32)
        if HAS_NORM:
            a = tl.load(a_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
            d = tl.load(d_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
        return a, d

    @triton.jit
    def _stepped_tile(x_ptr, f_ptr, s, a, d, b, ns, cs, ok, sxb, sxn, sxc, sfb, sfn, sfc,
                      RELU: tl.constexpr, HAS_NORM: tl.constexpr):
        """x_t and ``act(x_t + Δ ⊙ f)`` of one (N, C) tile, in float32 (``HAS_NORM``: f is
        ``a ⊙ y + d`` of the loaded y)."""
        x = tl.load(x_ptr + b * sxb + ns[:, None] * sxn + cs[None, :] * sxc, mask=ok,
                    other=0.0).to(tl.float32)
        f = tl.load(f_ptr + b * sfb + ns[:, None] * sfn + cs[None, :] * sfc, mask=ok,
                    other=0.0).to(tl.float32)
        if HAS_NORM:  # zero outside the tile's mask, as a loaded f is (the sums read y)
            f = tl.where(ok, f * a[None, :] + d[None, :], 0.0)
        y = x + s[None, :] * f
        if RELU:
            y = tl.maximum(y, 0.0)
        return x, y

    @triton.jit
    def _step_kernel(x_ptr, s_ptr, f_ptr, a_ptr, d_ptr, o_ptr, N, C, sxb, sxn, sxc, sfb, sfn, sfc,
                     sob, son, soc, HAS_STEP: tl.constexpr, RELU: tl.constexpr,
                     HAS_NORM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        ns = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cs < C
        ok = (ns < N)[:, None] & c_ok[None, :]
        s = _step_row(s_ptr, b, cs, c_ok, C, HAS_STEP, BLOCK_C)
        a, d = _norm_row(a_ptr, d_ptr, cs, c_ok, HAS_NORM, BLOCK_C)
        _, y = _stepped_tile(x_ptr, f_ptr, s, a, d, b, ns, cs, ok, sxb, sxn, sxc, sfb, sfn, sfc,
                             RELU, HAS_NORM)
        tl.store(o_ptr + b * sob + ns[:, None] * son + cs[None, :] * soc,
                 y.to(o_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _moments_backward_kernel(g_ptr, y_ptr, c0_ptr, c1_ptr, o_ptr, N, C, sgb, sgn, sgc, syb, syn,
                                 syc, sob, son, soc, SLOPE: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_C: tl.constexpr):
        # y's gradient g + c0 + c1 y, c0 and c1 per (b, c)
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        ns = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
        c_ok = cs < C
        ok = (ns < N)[:, None] & c_ok[None, :]
        c0 = tl.load(c0_ptr + b * C + cs, mask=c_ok, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + b * sgb + ns[:, None] * sgn + cs[None, :] * sgc, mask=ok,
                    other=0.0).to(tl.float32)
        g += c0[None, :]
        if SLOPE:
            c1 = tl.load(c1_ptr + b * C + cs, mask=c_ok, other=0.0).to(tl.float32)
            y = tl.load(y_ptr + b * syb + ns[:, None] * syn + cs[None, :] * syc, mask=ok,
                        other=0.0).to(tl.float32)
            g += c1[None, :] * y
        tl.store(o_ptr + b * sob + ns[:, None] * son + cs[None, :] * soc,
                 g.to(o_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _measured_step_kernel(x_ptr, s_ptr, f_ptr, a_ptr, d_ptr, o_ptr, m_ptr, q_ptr, N, C, sxb,
                              sxn, sxc, sfb, sfn, sfc, sob, son, soc, HAS_STEP: tl.constexpr,
                              RELU: tl.constexpr, STATE_RELU: tl.constexpr, HAS_NORM: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
        # _step_kernel over all N of one (b, channel block), also summing (out - x_t)² and x_t²
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = cs < C
        s = _step_row(s_ptr, b, cs, c_ok, C, HAS_STEP, BLOCK_C)
        a, d = _norm_row(a_ptr, d_ptr, cs, c_ok, HAS_NORM, BLOCK_C)
        acc_m = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        acc_q = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            ok = (ns < N)[:, None] & c_ok[None, :]
            x, y = _stepped_tile(x_ptr, f_ptr, s, a, d, b, ns, cs, ok, sxb, sxn, sxc, sfb, sfn, sfc,
                                 RELU, HAS_NORM)
            y = y.to(o_ptr.dtype.element_ty)
            tl.store(o_ptr + b * sob + ns[:, None] * son + cs[None, :] * soc, y, mask=ok)
            if STATE_RELU:
                x = tl.maximum(x, 0.0)
            moved = y.to(tl.float32) - x  # from the stored output, as a recorder reads it
            acc_m += moved * moved
            acc_q += x * x
        tl.store(m_ptr + b * C + cs, tl.sum(acc_m, axis=0), mask=c_ok)
        tl.store(q_ptr + b * C + cs, tl.sum(acc_q, axis=0), mask=c_ok)

    @triton.jit
    def _step_backward_kernel(g_ptr, o_ptr, f_ptr, s_ptr, a_ptr, d_ptr, gx_ptr, gf_ptr, gs_ptr,
                              pa_ptr, pd_ptr, N, C, sgb, sgn, sgc, sob, son, soc, sfb, sfn, sfc,
                              HAS_STEP: tl.constexpr, RELU: tl.constexpr, STEP_GRAD: tl.constexpr,
                              HAS_NORM: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
        # gx and gf are written with the strides of o (the output, or f without a ReLU);
        # HAS_NORM: gf is the gradient of y (Δ ⊙ a ⊙ g'), gs Δ's (a Σ g' ⊙ y + b Σ g'), pa and
        # pd the per-sample parts Δ Σ g' ⊙ y and Δ Σ g' of a's and b's
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = cs < C
        step = _step_row(s_ptr, b, cs, c_ok, C, HAS_STEP, BLOCK_C)
        a, d = _norm_row(a_ptr, d_ptr, cs, c_ok, HAS_NORM, BLOCK_C)
        s = step * a
        acc = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        acc0 = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            ok = (ns < N)[:, None] & c_ok[None, :]
            g = tl.load(g_ptr + b * sgb + ns[:, None] * sgn + cs[None, :] * sgc, mask=ok,
                        other=0.0).to(tl.float32)
            at = b * sob + ns[:, None] * son + cs[None, :] * soc
            if RELU:
                o = tl.load(o_ptr + at, mask=ok, other=0.0)
                g = tl.where(o > 0, g, 0.0)
                tl.store(gx_ptr + at, g.to(gx_ptr.dtype.element_ty), mask=ok)
            if HAS_STEP or HAS_NORM:
                tl.store(gf_ptr + at, (g * s[None, :]).to(gf_ptr.dtype.element_ty), mask=ok)
            if STEP_GRAD:
                f = tl.load(f_ptr + b * sfb + ns[:, None] * sfn + cs[None, :] * sfc, mask=ok,
                            other=0.0)
                acc += g * f.to(tl.float32)
                if HAS_NORM:
                    acc0 += g
        if STEP_GRAD:
            s_gy = tl.sum(acc, axis=0)
            if HAS_NORM:
                s_g = tl.sum(acc0, axis=0)
                tl.store(pa_ptr + b * C + cs, step * s_gy, mask=c_ok)
                tl.store(pd_ptr + b * C + cs, step * s_g, mask=c_ok)
                s_gy = a * s_gy + d * s_g
            if HAS_STEP:
                tl.store(gs_ptr + b * C + cs, s_gy.to(gs_ptr.dtype.element_ty), mask=c_ok)


class TritonStepKernels:
    """The passes of :class:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels` as Triton
    kernels (CUDA tensors; CPU tensors in Triton's interpreter)."""

    name = 'triton'

    def __init__(self):
        if not HAS_TRITON:
            raise RuntimeError('TritonStepKernels needs triton, which is not installed')
        self._pool, self._step, self._backward = _pool_kernel, _step_kernel, _step_backward_kernel
        self._measured = _measured_step_kernel
        self._moments_backward = _moments_backward_kernel
        #: the adaptors' (B, C) arithmetic (StepNet's and SE's)
        self.phi = TritonAdaptorKernels()
        #: the folded BN's (B, C) statistics
        self.fold = TritonFoldKernels()

    def launch_slots(self) -> List[Tuple[object, str, str]]:
        """``[(owner, attribute, name)]``: where each Triton kernel this set launches is held
        (``getattr(owner, attribute)``), with a short name for it: what the tools that replace
        the kernels (stand-ins that count launches, recorders of the launches) go through."""
        return [(self, '_pool', 'pool'), (self, '_step', 'step'),
                (self, '_backward', 'step_backward'), (self, '_measured', 'measured_step'),
                (self, '_moments_backward', 'moments_backward'), (self.phi, '_forward', 'phi'),
                (self.phi, '_backward', 'phi_backward'), (self.phi, '_se_hidden', 'se_hidden'),
                (self.phi, '_se_gate', 'se_gate'),
                (self.phi, '_se_hidden_backward', 'se_backward_hidden'),
                (self.phi, '_se_squeeze_backward', 'se_backward_squeeze'),
                (self.fold, '_forward', 'fold'), (self.fold, '_backward', 'fold_backward')]

    def pool(self, state: Optional[torch.Tensor], residual: torch.Tensor,
             layout: str) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
        """As :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.pool`, in one
        kernel launch."""
        return self._pooled(state, residual, layout, moments=False)[:2]

    def moments(self, state: Optional[torch.Tensor], y: torch.Tensor,
                layout: str) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """As :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.moments`, in one
        kernel launch."""
        return self._pooled(state, y, layout, moments=True)

    def _pooled(self, state, residual, layout, moments):
        f, (batch, n, c), sf = as_bnc(residual, layout)
        x, _, sx = (f, None, sf) if state is None else as_bnc(state, layout)
        fm = torch.empty((batch, c), dtype=torch.float32 if moments else f.dtype, device=f.device)
        fv = torch.empty_like(fm) if moments else None
        xm = fm if state is None else torch.empty((batch, c), dtype=x.dtype, device=x.device)
        block_n, block_c = state_blocks(n, c, sf[1], sf[2])
        self._pool[(batch, cdiv(c, block_c))](x, f, xm, fm, fm if fv is None else fv, n, c, *sx,
                                              *sf, 1.0 / n, POOL_X=state is not None,
                                              MOMENTS=moments, BLOCK_N=block_n, BLOCK_C=block_c,
                                              num_warps=tile_warps(block_n, block_c))
        return (None if state is None else xm), fm, fv

    def moments_backward(self, grad: torch.Tensor, y: torch.Tensor, base: torch.Tensor,
                         slope: Optional[torch.Tensor], layout: str) -> torch.Tensor:
        """As
        :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.moments_backward`,
        in one kernel launch."""
        g, (batch, n, c), sg = as_bnc(grad, layout)
        y, _, sy = as_bnc(y, layout)
        out = torch.empty_like(g, dtype=y.dtype)
        _, _, so = as_bnc(out, layout)
        block_n, block_c = state_blocks(n, c, so[1], so[2])
        has_slope = slope is not None
        base = base.contiguous()
        slope = slope.contiguous() if has_slope else base
        grid = (batch, cdiv(c, block_c), cdiv(n, block_n))
        self._moments_backward[grid](g, y, base, slope, out, n, c, *sg, *sy, *so, SLOPE=has_slope,
                                     BLOCK_N=block_n, BLOCK_C=block_c,
                                     num_warps=tile_warps(block_n, block_c))
        return out

    def step(self, shortcut: torch.Tensor, step: Optional[torch.Tensor], f: torch.Tensor,
             relu: bool, layout: str, norm: Optional[Affine] = None) -> torch.Tensor:
        """As :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.step`, in one
        kernel launch."""
        dtype = state_dtype(shortcut, f)
        x, (batch, n, c), sx = as_bnc(shortcut, layout)
        f, _, sf = as_bnc(f, layout)
        out = torch.empty_like(x, dtype=dtype)
        _, _, so = as_bnc(out, layout)
        block_n, block_c = state_blocks(n, c, so[1], so[2])
        s = f if step is None else step.contiguous()
        a, d = (s, s) if norm is None else norm
        grid = (batch, cdiv(c, block_c), cdiv(n, block_n))
        self._step[grid](x, s, f, a, d, out, n, c, *sx, *sf, *so, HAS_STEP=step is not None,
                         RELU=relu, HAS_NORM=norm is not None, BLOCK_N=block_n, BLOCK_C=block_c,
                         num_warps=tile_warps(block_n, block_c))
        return out

    def measured_step(self, shortcut: torch.Tensor, step: Optional[torch.Tensor], f: torch.Tensor,
                      relu: bool, layout: str, state_relu: bool,
                      norm: Optional[Affine] = None) -> Measured:
        """As :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.measured_step`, in
        one kernel launch."""
        dtype = state_dtype(shortcut, f)
        x, (batch, n, c), sx = as_bnc(shortcut, layout)
        f, _, sf = as_bnc(f, layout)
        out = torch.empty_like(x, dtype=dtype)
        _, _, so = as_bnc(out, layout)
        moved = torch.empty((batch, c), dtype=torch.float32, device=f.device)
        state = torch.empty_like(moved)
        block_n, block_c = state_blocks(n, c, so[1], so[2])
        s = f if step is None else step.contiguous()
        a, d = (s, s) if norm is None else norm
        self._measured[(batch, cdiv(c, block_c))](x, s, f, a, d, out, moved, state, n, c, *sx, *sf,
                                                  *so, HAS_STEP=step is not None, RELU=relu,
                                                  STATE_RELU=state_relu, HAS_NORM=norm is not None,
                                                  BLOCK_N=block_n, BLOCK_C=block_c,
                                                  num_warps=tile_warps(block_n, block_c))
        return out, moved, state

    def step_backward(self, grad: torch.Tensor, out: Optional[torch.Tensor],
                      f: Optional[torch.Tensor], step: Optional[torch.Tensor], relu: bool,
                      layout: str, need_step_grad: bool,
                      norm: Optional[Affine] = None) -> StepGrads:
        """As :meth:`~mmstiff.models.steps.fused.torch_kernels.TorchStepKernels.step_backward`, in
        one kernel launch; no launch without a ReLU, a step, a norm or a step gradient (then
        ``(grad, grad, None)``)."""
        if not (relu or step is not None or need_step_grad or norm is not None):
            return grad, grad, None
        g, (batch, n, c), sg = as_bnc(grad, layout)
        # the written gradients take the memory format of the output (ReLU) or of f
        like = out if relu else f  # without a ReLU, a step was given: f is there
        like, _, so = as_bnc(like.contiguous(memory_format=_memory_format(like, layout)), layout)
        grad_x = torch.empty_like(like, dtype=grad.dtype) if relu else grad
        scaled = step is not None or norm is not None
        grad_f = torch.empty_like(like, dtype=f.dtype) if scaled else grad_x
        f, _, sf = (g, None, sg) if f is None else as_bnc(f, layout)
        s = g if step is None else step.contiguous()
        a, d = (s, s) if norm is None else norm
        parts = grad_step = None
        if need_step_grad:
            if step is not None:
                grad_step = torch.empty((batch, c), dtype=step.dtype, device=grad.device)
            if norm is not None:  # both per-sample parts in one buffer: one sum over the batch
                parts = torch.empty((2, batch, c), dtype=torch.float32, device=grad.device)
        block_n, block_c = state_blocks(n, c, sg[1], sg[2])
        written = s if grad_step is None else grad_step
        pa, pd = (written, written) if parts is None else parts.unbind(0)
        self._backward[(batch, cdiv(c,
                                    block_c))](g, like, f, s, a, d, grad_x, grad_f, written, pa, pd,
                                               n, c, *sg, *so, *sf, HAS_STEP=step is not None,
                                               RELU=relu, STEP_GRAD=need_step_grad, HAS_NORM=norm
                                               is not None, BLOCK_N=block_n, BLOCK_C=block_c,
                                               num_warps=tile_warps(block_n, block_c))
        if norm is None:
            return grad_x, grad_f, grad_step
        return grad_x, grad_f, None if parts is None else (grad_step, parts)


def _memory_format(x, layout):
    if layout == 'nchw' and x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format
