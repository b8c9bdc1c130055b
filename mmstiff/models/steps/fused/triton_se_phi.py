"""Triton kernels of SE's (B, C) arithmetic (docs/methods.md §0, "The fused step"): the passes
of :class:`~.se_phi.TorchSEPhiKernels`.

Forward: the squeeze and ReLU, then the excitation, sigmoid and scale, a kernel each. Backward:
the hidden layer's gradient, then in one launch the weights', the biases' and the pooled
input's. Each program loops over the axis it sums, in blocks, and no sum is atomic, so the
results do not depend on the programs' order. Products in float32 (``input_precision='ieee'``:
no TF32); (B, C) tensors contiguous.
"""
from typing import Tuple

import torch

from mmstiff.utils.triton_launch import HAS_TRITON, cdiv, tl, triton
from .se_phi import SEGrads

if HAS_TRITON:

    @triton.jit
    def _tile(ptr, rows, cols, row_ok, col_ok, stride):
        """``ptr[rows, cols]`` of a row-major matrix, zero outside, in float32."""
        return tl.load(ptr + rows[:, None] * stride + cols[None, :],
                       mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)

    @triton.jit
    def _times_weights_t(x_ptr, w_ptr, rows, outs, row_ok, out_ok, K, BLOCK_ROWS: tl.constexpr,
                         BLOCK_OUTS: tl.constexpr, BLOCK_K: tl.constexpr):
        """``x[rows] @ w[outs]ᵀ`` of a row-major (·, K) input and a (·, K) weight (a linear
        layer's), over K in blocks of ``BLOCK_K``, in float32."""
        out = tl.zeros((BLOCK_ROWS, BLOCK_OUTS), dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            ks = start + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            out += tl.dot(
                _tile(x_ptr, rows, ks, row_ok, k_ok, K),
                tl.trans(_tile(w_ptr, outs, ks, out_ok, k_ok, K)), input_precision='ieee')
        return out

    @triton.jit
    def _se_hidden_kernel(p_ptr, w1_ptr, b1_ptr, h_ptr, B, C, S, BLOCK_B: tl.constexpr,
                          BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
        # a block of samples x a block of squeeze units: relu(p w1ᵀ + b1), over every channel
        bs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        ss = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        b_ok, s_ok = bs < B, ss < S
        hidden = _times_weights_t(p_ptr, w1_ptr, bs, ss, b_ok, s_ok, C, BLOCK_B, BLOCK_S, BLOCK_C)
        b1 = tl.load(b1_ptr + ss, mask=s_ok, other=0.0).to(tl.float32)
        hidden = tl.maximum(hidden + b1[None, :], 0.0)
        tl.store(h_ptr + bs[:, None] * S + ss[None, :], hidden, mask=b_ok[:, None] & s_ok[None, :])

    @triton.jit
    def _se_gate_kernel(h_ptr, w2_ptr, b2_ptr, d_ptr, B, C, S, scale, BLOCK_B: tl.constexpr,
                        BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
        # a block of samples x a block of channels: scale · σ(hidden w2ᵀ + b2), over every
        # squeeze unit in blocks
        bs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        b_ok, c_ok = bs < B, cs < C
        z = _times_weights_t(h_ptr, w2_ptr, bs, cs, b_ok, c_ok, S, BLOCK_B, BLOCK_C, BLOCK_S)
        b2 = tl.load(b2_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
        step = scale * tl.sigmoid(z + b2[None, :])
        tl.store(d_ptr + bs[:, None] * C + cs[None, :], step.to(d_ptr.dtype.element_ty),
                 mask=b_ok[:, None] & c_ok[None, :])

    @triton.jit
    def _excitation_grad(g_ptr, d_ptr, bs, cs, b_ok, c_ok, C, scale):
        """The gradient of the excitation's pre-activation z of samples ``bs`` and channels
        ``cs``: ``g ⊙ σ'(z) · scale``, from Δ = scale · σ(z) (float32, zero outside)."""
        step = _tile(d_ptr, bs, cs, b_ok, c_ok, C)
        return _tile(g_ptr, bs, cs, b_ok, c_ok, C) * step * (1 - step / scale)

    @triton.jit
    def _se_hidden_backward_kernel(g_ptr, d_ptr, h_ptr, w2_ptr, gh_ptr, B, C, S, scale,
                                   BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr,
                                   BLOCK_C: tl.constexpr):
        # a block of samples x a block of squeeze units: the hidden layer's gradient
        # (g_z w2) ⊙ [h > 0], over every channel in blocks (the forward's _se_hidden_kernel)
        bs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        ss = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        b_ok, s_ok = bs < B, ss < S
        g_h = tl.zeros((BLOCK_B, BLOCK_S), dtype=tl.float32)
        for start in range(0, C, BLOCK_C):
            cs = start + tl.arange(0, BLOCK_C)
            c_ok = cs < C
            g_z = _excitation_grad(g_ptr, d_ptr, bs, cs, b_ok, c_ok, C, scale)
            w2 = _tile(w2_ptr, cs, ss, c_ok, s_ok, S)  # (C, S) block
            g_h += tl.dot(g_z, w2, input_precision='ieee')
        g_h = tl.where(_tile(h_ptr, bs, ss, b_ok, s_ok, S) > 0, g_h, 0.0)
        tl.store(gh_ptr + bs[:, None] * S + ss[None, :], g_h, mask=b_ok[:, None] & s_ok[None, :])

    @triton.jit
    def _se_weights_backward(g_ptr, d_ptr, h_ptr, gh_ptr, p_ptr, gw1_ptr, gb1_ptr, gw2_ptr, gb2_ptr,
                             program, B, C, S, scale, BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr,
                             BLOCK_C: tl.constexpr):
        # a block of channels x a block of squeeze units, over every sample in blocks: both
        # layers' weight gradients (g_zᵀ h, g_hᵀ p) and, in the first block of the other
        # axis, their bias gradients
        blocks_c = tl.cdiv(C, BLOCK_C)
        block_c, block_s = program % blocks_c, program // blocks_c
        cs = block_c * BLOCK_C + tl.arange(0, BLOCK_C)
        ss = block_s * BLOCK_S + tl.arange(0, BLOCK_S)
        c_ok, s_ok = cs < C, ss < S
        g_w2 = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
        g_w1 = tl.zeros((BLOCK_S, BLOCK_C), dtype=tl.float32)
        g_b2 = tl.zeros((BLOCK_C, ), dtype=tl.float32)
        g_b1 = tl.zeros((BLOCK_S, ), dtype=tl.float32)
        for start in range(0, B, BLOCK_B):
            bs = start + tl.arange(0, BLOCK_B)
            b_ok = bs < B
            g_z = _excitation_grad(g_ptr, d_ptr, bs, cs, b_ok, c_ok, C, scale)
            g_h = _tile(gh_ptr, bs, ss, b_ok, s_ok, S)
            g_w2 += tl.dot(
                tl.trans(g_z), _tile(h_ptr, bs, ss, b_ok, s_ok, S), input_precision='ieee')
            g_w1 += tl.dot(
                tl.trans(g_h), _tile(p_ptr, bs, cs, b_ok, c_ok, C), input_precision='ieee')
            g_b2 += tl.sum(g_z, axis=0)
            g_b1 += tl.sum(g_h, axis=0)
        tl.store(gw2_ptr + cs[:, None] * S + ss[None, :], g_w2, mask=c_ok[:, None] & s_ok[None, :])
        tl.store(gw1_ptr + ss[:, None] * C + cs[None, :], g_w1, mask=s_ok[:, None] & c_ok[None, :])
        if block_s == 0:
            tl.store(gb2_ptr + cs, g_b2, mask=c_ok)
        if block_c == 0:
            tl.store(gb1_ptr + ss, g_b1, mask=s_ok)

    @triton.jit
    def _se_pooled_backward(gh_ptr, w1_ptr, gp_ptr, program, B, C, S, BLOCK_B: tl.constexpr,
                            BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
        # a block of samples x a block of channels: the pooled input's gradient g_h w1, over
        # every squeeze unit in blocks
        blocks_c = tl.cdiv(C, BLOCK_C)
        bs = (program // blocks_c) * BLOCK_B + tl.arange(0, BLOCK_B)
        cs = (program % blocks_c) * BLOCK_C + tl.arange(0, BLOCK_C)
        b_ok, c_ok = bs < B, cs < C
        g_p = tl.zeros((BLOCK_B, BLOCK_C), dtype=tl.float32)
        for start in range(0, S, BLOCK_S):
            ss = start + tl.arange(0, BLOCK_S)
            s_ok = ss < S
            g_p += tl.dot(
                _tile(gh_ptr, bs, ss, b_ok, s_ok, S), _tile(w1_ptr, ss, cs, s_ok, c_ok, C),
                input_precision='ieee')
        tl.store(gp_ptr + bs[:, None] * C + cs[None, :], g_p.to(gp_ptr.dtype.element_ty),
                 mask=b_ok[:, None] & c_ok[None, :])

    @triton.jit
    def _se_squeeze_backward_kernel(g_ptr, d_ptr, h_ptr, gh_ptr, p_ptr, w1_ptr, gp_ptr, gw1_ptr,
                                    gb1_ptr, gw2_ptr, gb2_ptr, B, C, S, scale, WEIGHT_PROGRAMS,
                                    WEIGHT_B: tl.constexpr, WEIGHT_S: tl.constexpr,
                                    WEIGHT_C: tl.constexpr, POOLED_B: tl.constexpr,
                                    POOLED_S: tl.constexpr, POOLED_C: tl.constexpr):
        # what needs the hidden gradient, in one launch: the first WEIGHT_PROGRAMS programs the
        # weights' and biases' gradients, the others the pooled input's
        program = tl.program_id(0)
        if program < WEIGHT_PROGRAMS:
            _se_weights_backward(g_ptr, d_ptr, h_ptr, gh_ptr, p_ptr, gw1_ptr, gb1_ptr, gw2_ptr,
                                 gb2_ptr, program, B, C, S, scale, WEIGHT_B, WEIGHT_S, WEIGHT_C)
        else:
            _se_pooled_backward(gh_ptr, w1_ptr, gp_ptr, program - WEIGHT_PROGRAMS, B, C, S,
                                POOLED_B, POOLED_S, POOLED_C)


#: the passes' tiles, (samples, squeeze units, channels) of a program and the block of its loop:
#: the hidden layer and its gradient per 16 samples and 16 units (channels in blocks of 64); the
#: gate per 16 samples and 64 channels (units in blocks of 32); the weights' gradients per 32
#: channels and 64 units (samples in blocks of 16); the pooled input's per 16 samples and 64
#: channels (units in blocks of 32). At batch 64 a ResNet-50 block's forward runs 4 x S/16 and
#: 4 x C/64 programs, where one program per 64 samples would leave the GPU idle. Every operand
#: of a product stays within 2048 values, which an sm_80 / sm_90 program of 4 warps holds in
#: registers: a program that holds the whole batch spills to local memory
#: (docs/benchmarks.md, "Registers and spills, compiled without a GPU")
HIDDEN_TILES, GATE_TILES = (16, 16, 64), (16, 32, 64)
WEIGHT_TILES, POOLED_TILES = (16, 64, 32), (16, 32, 64)


class TritonSEPhiKernels:
    """:class:`~mmstiff.models.steps.fused.se_phi.TorchSEPhiKernels`'s passes as Triton kernels (two
    launches forward, two backward; any batch)."""

    #: the largest batch the kernels take (every pass loops over the batch in blocks)
    SE_MAX_BATCH = float('inf')

    def __init__(self):
        if not HAS_TRITON:
            raise RuntimeError('TritonSEPhiKernels needs triton, which is not installed')
        self._se_hidden, self._se_gate = _se_hidden_kernel, _se_gate_kernel
        self._se_hidden_backward = _se_hidden_backward_kernel
        self._se_squeeze_backward = _se_squeeze_backward_kernel

    def se_forward(self, p: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                   b2: torch.Tensor, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`~mmstiff.models.steps.fused.se_phi.TorchSEPhiKernels.se_forward`, in two
        kernel launches (the hidden layer, then the gate)."""
        batch, channels = p.shape
        squeeze = w1.shape[0]
        p = p if p.is_contiguous() else p.contiguous()
        step = torch.empty_like(p, dtype=torch.promote_types(p.dtype, w2.dtype))
        hidden = torch.empty(batch, squeeze, dtype=torch.float32, device=p.device)
        tile_b, tile_s, tile_c = HIDDEN_TILES
        grid = (cdiv(batch, tile_b), cdiv(squeeze, tile_s))
        self._se_hidden[grid](p, w1, b1, hidden, batch, channels, squeeze, BLOCK_B=tile_b,
                              BLOCK_S=tile_s, BLOCK_C=tile_c)
        tile_b, tile_s, tile_c = GATE_TILES
        grid = (cdiv(batch, tile_b), cdiv(channels, tile_c))
        self._se_gate[grid](hidden, w2, b2, step, batch, channels, squeeze, float(scale),
                            BLOCK_B=tile_b, BLOCK_S=tile_s, BLOCK_C=tile_c)
        return step, hidden

    def se_backward(self, grad: torch.Tensor, p: torch.Tensor, hidden: torch.Tensor,
                    step: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                    scale: float) -> SEGrads:
        """As :meth:`~mmstiff.models.steps.fused.se_phi.TorchSEPhiKernels.se_backward`, in two
        kernel launches (the hidden layer's gradient, then the weights' and the input's)."""
        batch, channels = p.shape
        squeeze = w1.shape[0]
        grad, p = grad.contiguous(), p.contiguous()
        f32 = dict(dtype=torch.float32, device=p.device)
        grad_hidden = torch.empty(batch, squeeze, **f32)
        tile_b, tile_s, tile_c = HIDDEN_TILES
        grid = (cdiv(batch, tile_b), cdiv(squeeze, tile_s))
        self._se_hidden_backward[grid](grad, step,
                                       hidden, w2, grad_hidden, batch, channels, squeeze,
                                       float(scale), BLOCK_B=tile_b, BLOCK_S=tile_s, BLOCK_C=tile_c)
        grad_p = torch.empty_like(p)
        grad_w1, grad_b1 = torch.empty(squeeze, channels, **f32), torch.empty(squeeze, **f32)
        grad_w2, grad_b2 = torch.empty(channels, squeeze, **f32), torch.empty(channels, **f32)
        weight_b, weight_s, weight_c = WEIGHT_TILES
        pooled_b, pooled_s, pooled_c = POOLED_TILES
        weight_programs = cdiv(channels, weight_c) * cdiv(squeeze, weight_s)
        grid = (weight_programs + cdiv(batch, pooled_b) * cdiv(channels, pooled_c), )
        self._se_squeeze_backward[grid](grad, step, hidden, grad_hidden, p, w1, grad_p, grad_w1,
                                        grad_b1, grad_w2, grad_b2, batch, channels, squeeze,
                                        float(scale), weight_programs, WEIGHT_B=weight_b,
                                        WEIGHT_S=weight_s, WEIGHT_C=weight_c, POOLED_B=pooled_b,
                                        POOLED_S=pooled_s, POOLED_C=pooled_c)
        return (grad_p, *(g if g.dtype == like.dtype else g.to(like.dtype)
                          for g, like in ((grad_w1, w1), (grad_b1, w1), (grad_w2, w2),
                                          (grad_b2, w2))))
