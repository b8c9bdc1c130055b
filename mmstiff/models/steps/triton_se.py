"""Triton kernels of SE's (B, C) arithmetic (docs/methods.md §0, "The fused step").

The passes of :class:`~mmstiff.models.steps.se_phi.TorchSEPhiKernels`: forward, two kernels (the
squeeze over every channel and ReLU, a program per block of samples and of squeeze units; then
the excitation, sigmoid and scale, a program per block of samples and of channels); backward,
two (a program per block of channels, over the whole batch: first σ's gradient, the
excitation's weight and bias gradients and the block's share of the hidden gradient; then the
hidden gradient summed over the blocks, ReLU's mask, the squeeze's weight gradient and the
pooled input's gradient). Each block's share is written, not added atomically, so the sums do
not depend on the programs' order.
Products in float32 (``input_precision='ieee'``: no TF32); (B, C) tensors contiguous.
"""
import torch

from mmstiff.utils.triton_launch import HAS_TRITON, cdiv, tl, triton

if HAS_TRITON:

    @triton.jit
    def _tile(ptr, rows, cols, row_ok, col_ok, stride):
        """``ptr[rows, cols]`` of a row-major matrix, zero outside, in float32."""
        return tl.load(ptr + rows[:, None] * stride + cols[None, :],
                       mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)

    @triton.jit
    def _channel_block(block, B, C, S, BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr,
                       BLOCK_C: tl.constexpr):
        """Every sample, the channels of ``block`` and every squeeze unit, with their masks."""
        bs = tl.arange(0, BLOCK_B)
        cs = block * BLOCK_C + tl.arange(0, BLOCK_C)
        ss = tl.arange(0, BLOCK_S)
        return bs, cs, ss, bs < B, cs < C, ss < S

    @triton.jit
    def _se_hidden_kernel(p_ptr, w1_ptr, b1_ptr, h_ptr, B, C, S, BLOCK_B: tl.constexpr,
                          BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
        # a block of samples x a block of squeeze units: relu(p w1ᵀ + b1), over every channel
        bs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        ss = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        b_ok, s_ok = bs < B, ss < S
        hidden = tl.zeros((BLOCK_B, BLOCK_S), dtype=tl.float32)
        for start in range(0, C, BLOCK_C):
            cs = start + tl.arange(0, BLOCK_C)
            c_ok = cs < C
            p = _tile(p_ptr, bs, cs, b_ok, c_ok, C)
            w1_t = _tile(w1_ptr, ss, cs, s_ok, c_ok, C)  # (S, C) block
            hidden += tl.dot(p, tl.trans(w1_t), input_precision='ieee')
        b1 = tl.load(b1_ptr + ss, mask=s_ok, other=0.0).to(tl.float32)
        hidden = tl.maximum(hidden + b1[None, :], 0.0)
        tl.store(h_ptr + bs[:, None] * S + ss[None, :], hidden, mask=b_ok[:, None] & s_ok[None, :])

    @triton.jit
    def _se_gate_kernel(h_ptr, w2_ptr, b2_ptr, d_ptr, B, C, S, scale, BLOCK_B: tl.constexpr,
                        BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
        # a block of samples x a block of channels: scale · σ(hidden w2ᵀ + b2), every squeeze unit
        bs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        ss = tl.arange(0, BLOCK_S)
        b_ok, c_ok, s_ok = bs < B, cs < C, ss < S
        hidden = _tile(h_ptr, bs, ss, b_ok, s_ok, S)
        w2 = _tile(w2_ptr, cs, ss, c_ok, s_ok, S)  # (C, S) block
        b2 = tl.load(b2_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
        z = tl.dot(hidden, tl.trans(w2), input_precision='ieee') + b2[None, :]
        step = scale * tl.sigmoid(z)
        tl.store(d_ptr + bs[:, None] * C + cs[None, :], step.to(d_ptr.dtype.element_ty),
                 mask=b_ok[:, None] & c_ok[None, :])

    @triton.jit
    def _se_excitation_backward_kernel(g_ptr, d_ptr, h_ptr, w2_ptr, gw2_ptr, gb2_ptr, gh_ptr, B, C,
                                       S, scale, BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr,
                                       BLOCK_C: tl.constexpr):
        block = tl.program_id(0)
        bs, cs, ss, b_ok, c_ok, s_ok = _channel_block(block, B, C, S, BLOCK_B, BLOCK_S, BLOCK_C)
        step = _tile(d_ptr, bs, cs, b_ok, c_ok, C)
        g_z = _tile(g_ptr, bs, cs, b_ok, c_ok, C) * step * (1 - step / scale)  # (B, C) block
        hidden = _tile(h_ptr, bs, ss, b_ok, s_ok, S)
        tl.store(gb2_ptr + cs, tl.sum(g_z, axis=0), mask=c_ok)
        g_w2 = tl.dot(tl.trans(g_z), hidden, input_precision='ieee')  # (C block, S)
        tl.store(gw2_ptr + cs[:, None] * S + ss[None, :], g_w2, mask=c_ok[:, None] & s_ok[None, :])
        w2 = _tile(w2_ptr, cs, ss, c_ok, s_ok, S)
        g_h = tl.dot(g_z, w2, input_precision='ieee')  # this block's share, (B, S)
        tl.store(gh_ptr + block * B * S + bs[:, None] * S + ss[None, :], g_h,
                 mask=b_ok[:, None] & s_ok[None, :])

    @triton.jit
    def _se_squeeze_backward_kernel(gh_ptr, h_ptr, p_ptr, w1_ptr, gp_ptr, gw1_ptr, gb1_ptr, B, C, S,
                                    SHARES, BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr,
                                    BLOCK_C: tl.constexpr):
        block = tl.program_id(0)
        bs, cs, ss, b_ok, c_ok, s_ok = _channel_block(block, B, C, S, BLOCK_B, BLOCK_S, BLOCK_C)
        g_h = tl.zeros((BLOCK_B, BLOCK_S), dtype=tl.float32)
        for share in range(0, SHARES):
            g_h += _tile(gh_ptr + share * B * S, bs, ss, b_ok, s_ok, S)
        g_h = tl.where(_tile(h_ptr, bs, ss, b_ok, s_ok, S) > 0, g_h, 0.0)
        if block == 0:
            tl.store(gb1_ptr + ss, tl.sum(g_h, axis=0), mask=s_ok)
        p = _tile(p_ptr, bs, cs, b_ok, c_ok, C)
        g_w1 = tl.dot(tl.trans(g_h), p, input_precision='ieee')  # (S, C block)
        tl.store(gw1_ptr + ss[:, None] * C + cs[None, :], g_w1, mask=s_ok[:, None] & c_ok[None, :])
        w1 = _tile(w1_ptr, ss, cs, s_ok, c_ok, C)
        g_p = tl.dot(g_h, w1, input_precision='ieee')  # (B, C block)
        tl.store(gp_ptr + bs[:, None] * C + cs[None, :], g_p.to(gp_ptr.dtype.element_ty),
                 mask=b_ok[:, None] & c_ok[None, :])


#: the forward's tiles: a program per 16 samples and per 16 squeeze units (the hidden layer),
#: per 16 samples and per (up to) 64 channels (the gate): at batch 64 a ResNet-50 block's
#: forward runs 4 x C/64 programs where one program per 64 samples would leave the GPU idle
FORWARD_BLOCK_B, FORWARD_BLOCK_S, FORWARD_BLOCK_C = 16, 16, 64


def _dot_block(n):
    """The smallest power of two >= n that ``tl.dot`` takes (16 or more)."""
    return max(16, 1 << max(0, int(n) - 1).bit_length())


class TritonSEPhiKernels:
    """:class:`~mmstiff.models.steps.se_phi.TorchSEPhiKernels`'s passes as Triton kernels (two
    launches forward, two backward; a batch of up to :attr:`SE_MAX_BATCH` samples)."""

    #: the largest batch the backward's programs hold (larger batches take the modules)
    SE_MAX_BATCH = 256

    def __init__(self):
        if not HAS_TRITON:
            raise RuntimeError('TritonSEPhiKernels needs triton, which is not installed')
        self._se_hidden, self._se_gate = _se_hidden_kernel, _se_gate_kernel
        self._se_excitation = _se_excitation_backward_kernel
        self._se_squeeze = _se_squeeze_backward_kernel

    def se_forward(self, p, w1, b1, w2, b2, scale):
        batch, channels = p.shape
        squeeze = w1.shape[0]
        p = p if p.is_contiguous() else p.contiguous()
        step = torch.empty_like(p, dtype=torch.promote_types(p.dtype, w2.dtype))
        hidden = torch.empty(batch, squeeze, dtype=torch.float32, device=p.device)
        rows = cdiv(batch, FORWARD_BLOCK_B)
        self._se_hidden[(rows, cdiv(squeeze, FORWARD_BLOCK_S))](p, w1, b1, hidden, batch, channels,
                                                                squeeze, BLOCK_B=FORWARD_BLOCK_B,
                                                                BLOCK_S=FORWARD_BLOCK_S,
                                                                BLOCK_C=FORWARD_BLOCK_C)
        block_s = _dot_block(squeeze)
        block_c = max(16, min(FORWARD_BLOCK_C, 8192 // block_s))
        self._se_gate[(rows, cdiv(channels,
                                  block_c))](hidden, w2, b2, step, batch, channels, squeeze,
                                             float(scale), BLOCK_B=FORWARD_BLOCK_B, BLOCK_S=block_s,
                                             BLOCK_C=block_c)
        return step, hidden

    def se_backward(self, grad, p, hidden, step, w1, w2, scale):
        batch, channels = p.shape
        squeeze = w1.shape[0]
        block_b, block_s = _dot_block(batch), _dot_block(squeeze)
        block_c = max(16, min(_dot_block(channels), 8192 // max(block_b, block_s)))
        shares = cdiv(channels, block_c)
        f32 = dict(dtype=torch.float32, device=p.device)
        grad_w2, grad_b2 = torch.empty(channels, squeeze, **f32), torch.empty(channels, **f32)
        grad_hidden = torch.empty(shares, batch, squeeze, **f32)
        self._se_excitation[(shares, )](grad, step, hidden, w2,
                                        grad_w2, grad_b2, grad_hidden, batch, channels, squeeze,
                                        float(scale), BLOCK_B=block_b, BLOCK_S=block_s,
                                        BLOCK_C=block_c)
        grad_p = torch.empty_like(p)
        grad_w1, grad_b1 = torch.empty(squeeze, channels, **f32), torch.empty(squeeze, **f32)
        self._se_squeeze[(shares, )](grad_hidden, hidden, p, w1, grad_p, grad_w1, grad_b1, batch,
                                     channels, squeeze, shares, BLOCK_B=block_b, BLOCK_S=block_s,
                                     BLOCK_C=block_c)
        return (grad_p, *(g if g.dtype == like.dtype else g.to(like.dtype)
                          for g, like in ((grad_w1, w1), (grad_b1, w1), (grad_w2, w2),
                                          (grad_b2, w2))))
