"""The NSI's sums of squares of a recorded step in one pass over its two states, on the GPU
(docs/methods.md §5; docs/diagnostics.md, "`StiffnessHook`").

:func:`~mmstiff.analysis.stiffness_norms` needs ``||x_t||`` and ``||(x_{t+1} - x_t) / Δ_t||``.
In PyTorch operators that is five passes over full-size tensors and one full-size temporary:
read x_t for its norm, read both states and write their difference, read the difference for
its norm. One Triton kernel reads x_t and x_{t+1} once each and writes, per sample and
channel, ``Σ (x_{t+1} - x_t)²`` and ``Σ x_t²`` over the pooled axes (float32, whatever the
states' dtype): the :class:`~mmstiff.utils.step_sums.StepSums` a fused step writes in its own
pass, from which :func:`~mmstiff.analysis.stiffness_norms_from_sums` takes the norms, Δ_t per
sample or per channel included.

The kernel runs where Triton runs: CUDA tensors (and CPU tensors in Triton's interpreter, inside
:func:`state_sums_forced`, for the tests). Where Triton cannot build it (a machine without the C
compiler Triton builds its launcher with, a GPU it does not support), the first failure is
warned about once and the PyTorch passes take over for the rest of the process
(:func:`try_state_sums`): a diagnostic must not stop training.
"""
from typing import Optional

import torch

from mmstiff.utils.step_sums import StepSums
from mmstiff.utils.triton_launch import (HAS_TRITON, OptionalKernel, as_bnc, cdiv, state_blocks,
                                         tile_warps, tl, triton)

#: where the kernel runs (CUDA; CPU tensors in the interpreter when forced), and not after a
#: failed launch
KERNEL = OptionalKernel(
    'the NSI sums kernel', 'the stiffness norms take PyTorch operators from now on (the same '
    'values, more passes over the states)')
#: inside it the kernel takes CPU tensors too (Triton's interpreter: the tests)
state_sums_forced = KERNEL.forced

if HAS_TRITON:

    @triton.jit
    def _state_sums_kernel(x_ptr, y_ptr, m_ptr, q_ptr, N, C, sxb, sxn, sxc, syb, syn, syc,
                           BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
        # one program per (sample, block of channels), over all N: Σ (y - x)² and Σ x²
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = cs < C
        acc_m = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        acc_q = tl.zeros([BLOCK_N, BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            ok = (ns < N)[:, None] & c_ok[None, :]
            x = tl.load(x_ptr + b * sxb + ns[:, None] * sxn + cs[None, :] * sxc, mask=ok,
                        other=0.0).to(tl.float32)
            y = tl.load(y_ptr + b * syb + ns[:, None] * syn + cs[None, :] * syc, mask=ok,
                        other=0.0).to(tl.float32)
            moved = y - x
            acc_m += moved * moved
            acc_q += x * x
        tl.store(m_ptr + b * C + cs, tl.sum(acc_m, axis=0), mask=c_ok)
        tl.store(q_ptr + b * C + cs, tl.sum(acc_q, axis=0), mask=c_ok)


def state_sums_apply(x_t: torch.Tensor, x_next: torch.Tensor) -> bool:
    """Whether :func:`state_sums` takes these states: Triton is there, they are (B, C, H, W)
    maps or (B, N, C) tokens on one CUDA device (or the kernel is forced). Like the PyTorch
    passes, the kernel computes the norms as numbers, with no gradient."""
    return KERNEL.runs_on(x_t) and x_t.dim() in (3, 4) and x_t.device == x_next.device


def try_state_sums(x_t: torch.Tensor, x_next: torch.Tensor) -> Optional[StepSums]:
    """:func:`state_sums`, or None where its launch fails: the error is warned about once and
    the kernel is not tried again in this process (:func:`state_sums_apply` then says no)."""
    return KERNEL.attempt(state_sums, x_t, x_next)


def state_sums(x_t: torch.Tensor, x_next: torch.Tensor) -> StepSums:
    """Per-(sample, channel) ``Σ (x_next - x_t)²`` and ``Σ x_t²`` in one Triton pass.

    Args:
        x_t (Tensor): ``(B, C, H, W)`` (layout ``'nchw'``, any memory format) or ``(B, N, C)``
            (``'nlc'``), any float dtype.
        x_next (Tensor): the same shape; its own dtype and strides.

    Returns:
        StepSums: ``moved`` and ``state``, ``(B, C)`` float32, and the layout.
    """
    layout = 'nchw' if x_t.dim() == 4 else 'nlc'
    x, (batch, n, c), sx = as_bnc(x_t, layout)
    y, _, sy = as_bnc(x_next, layout)
    sums = torch.empty((2, batch, c), dtype=torch.float32, device=x.device)
    block_n, block_c = state_blocks(n, c, sx[1], sx[2])
    _state_sums_kernel[(batch, cdiv(c, block_c))](x, y, sums[0], sums[1], n, c, *sx, *sy,
                                                  BLOCK_N=block_n, BLOCK_C=block_c,
                                                  num_warps=tile_warps(block_n, block_c))
    return StepSums(sums[0], sums[1], layout)
