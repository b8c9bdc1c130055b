"""A state's frequency sums in one Triton kernel, on the GPU (docs/diagnostics.md,
"`FrequencyHook`").

:func:`~mmstiff.analysis.frequency_summary` needs, per sample, the high-frequency ratio
``||X - DC[X]|| / ||X||`` and, per (sample, channel), the two ends of the spectrum's diagonal,
``F(0, 0)`` and ``F(k, k)`` (:func:`~mmstiff.analysis.diagonal_end_bins`). In PyTorch operators
that is six kernels per state and a full-size temporary (the product with the three weight rows,
the DC component, ``X - DC``, two norms, their ratio). One kernel reads the state twice in the
same program (the channel means, then the squares about them) and writes per (sample, channel)
the three end-bin sums and the two sums of squares, ``Σ (x - mean)²`` and ``Σ x²``
(:class:`SpectrumSums`); the ratio over the channels is left to the caller, which can take it
for many states at once.

Like the NSI's kernel (:mod:`~mmstiff.analysis.triton_sums`) it runs on CUDA tensors (and CPU
tensors in Triton's interpreter inside :func:`spectrum_sums_forced`, for the tests); where Triton
cannot build it, the first failure is warned about once and the PyTorch operators take over.
"""
import functools
from typing import NamedTuple, Optional

import torch

from mmstiff.utils.triton_launch import (HAS_TRITON, OptionalKernel, as_bnc, cdiv, state_blocks,
                                         tile_warps, tl, triton)

#: where the kernel runs (CUDA; CPU tensors in the interpreter when forced), and not after a
#: failed launch
KERNEL = OptionalKernel(
    'the frequency sums kernel', 'the frequency summaries take PyTorch operators from now on '
    '(the same values, more passes over the states)')
#: inside it the kernel takes CPU tensors too (Triton's interpreter: the tests)
spectrum_sums_forced = KERNEL.forced

if HAS_TRITON:

    @triton.jit
    def _spectrum_sums_kernel(x_ptr, w_ptr, bins_ptr, sq_ptr, N, C, sxb, sxn, sxc,
                              BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
        # one program per (sample, block of channels), over all N, twice: the sums (and the
        # weighted sums of the end bins), then the squares about the channel means
        b = tl.program_id(0).to(tl.int64)
        cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        c_ok = cs < C
        base = x_ptr + b * sxb + cs[None, :] * sxc
        total = tl.zeros([BLOCK_C], dtype=tl.float32)
        bin0 = tl.zeros([BLOCK_C], dtype=tl.float32)
        bin1 = tl.zeros([BLOCK_C], dtype=tl.float32)
        bin2 = tl.zeros([BLOCK_C], dtype=tl.float32)
        square = tl.zeros([BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            n_ok = ns < N
            ok = n_ok[:, None] & c_ok[None, :]
            x = tl.load(base + ns[:, None] * sxn, mask=ok, other=0.0).to(tl.float32)
            w0 = tl.load(w_ptr + ns, mask=n_ok, other=0.0)
            w1 = tl.load(w_ptr + N + ns, mask=n_ok, other=0.0)
            w2 = tl.load(w_ptr + 2 * N + ns, mask=n_ok, other=0.0)
            total += tl.sum(x, axis=0)
            bin0 += tl.sum(x * w0[:, None], axis=0)
            bin1 += tl.sum(x * w1[:, None], axis=0)
            bin2 += tl.sum(x * w2[:, None], axis=0)
            square += tl.sum(x * x, axis=0)
        mean = total / N
        centred = tl.zeros([BLOCK_C], dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N)
            ok = (ns < N)[:, None] & c_ok[None, :]
            x = tl.load(base + ns[:, None] * sxn, mask=ok, other=0.0).to(tl.float32)
            moved = tl.where(ok, x - mean[None, :], 0.0)
            centred += tl.sum(moved * moved, axis=0)
        out = b * C + cs
        tl.store(bins_ptr + out * 3, bin0, mask=c_ok)
        tl.store(bins_ptr + out * 3 + 1, bin1, mask=c_ok)
        tl.store(bins_ptr + out * 3 + 2, bin2, mask=c_ok)
        tl.store(sq_ptr + out, centred, mask=c_ok)
        tl.store(sq_ptr + tl.num_programs(0).to(tl.int64) * C + out, square, mask=c_ok)


class SpectrumSums(NamedTuple):
    """What :func:`spectrum_sums` writes for one state.

    Attributes:
        squares (Tensor): ``(2, B, C)`` float32: ``Σ (x - mean_c)²`` and ``Σ x²`` over the
            pooled axes (all tokens of a token state), per sample and channel.
        end_bins (Tensor): ``(B, C, 3)`` float32, :func:`~mmstiff.analysis.diagonal_end_bins`.
    """
    squares: torch.Tensor
    end_bins: torch.Tensor


def high_frequency_ratio_of(squares: torch.Tensor) -> torch.Tensor:
    """The high-frequency ratio per sample, ``(..., B)``, from :attr:`SpectrumSums.squares`
    ``(..., 2, B, C)``: ``sqrt(Σ_c Σ (x - mean_c)² / Σ_c Σ x²)``."""
    sums = squares.sum(dim=-1)
    return (sums.select(-2, 0) / sums.select(-2, 1)).sqrt()


def spectrum_sums_apply(x: torch.Tensor) -> bool:
    """Whether :func:`spectrum_sums` takes this state: Triton is there and it is on a CUDA
    device (or the kernel is forced)."""
    return KERNEL.runs_on(x)


def try_spectrum_sums(x: torch.Tensor, rows: torch.Tensor,
                      num_extra_tokens: int = 0) -> Optional[SpectrumSums]:
    """:func:`spectrum_sums`, or None where its launch fails: the error is warned about once and
    the kernel is not tried again in this process."""
    return KERNEL.attempt(spectrum_sums, x, rows, num_extra_tokens)


def spectrum_sums(x: torch.Tensor, rows: torch.Tensor, num_extra_tokens: int = 0) -> SpectrumSums:
    """The :class:`SpectrumSums` of one state from one Triton kernel (two reads of the state).

    Args:
        x (Tensor): ``(B, C, H, W)`` maps (any memory format) or ``(B, N, C)`` tokens, any float
            dtype.
        rows (Tensor): ``(3, P)`` float32 weight rows of the end bins over the ``P`` positions
            of the map or of the patch tokens (ones, and the cosine and sine of the last
            diagonal bin), on ``x``'s device.
        num_extra_tokens (int): leading tokens of a token state that are not patches: in the
            mean and the squares, not in the end bins.
    """
    layout = 'nchw' if x.dim() == 4 else 'nlc'
    x, (batch, n, c), sx = as_bnc(x, layout)
    weights = _padded_rows(rows, num_extra_tokens)
    if weights.shape[1] != n:
        raise ValueError(f'rows cover {rows.shape[1]} positions after {num_extra_tokens} extra '
                         f'tokens; expected {n - num_extra_tokens} for a state of {n}')
    bins = torch.empty((batch, c, 3), dtype=torch.float32, device=x.device)
    squares = torch.empty((2, batch, c), dtype=torch.float32, device=x.device)
    block_n, block_c = state_blocks(n, c, sx[1], sx[2])
    _spectrum_sums_kernel[(batch, cdiv(c, block_c))](x, weights, bins, squares, n, c, *sx,
                                                     BLOCK_N=block_n, BLOCK_C=block_c,
                                                     num_warps=tile_warps(block_n, block_c))
    return SpectrumSums(squares, bins)


def _padded_rows(rows, num_extra_tokens):
    """``rows`` with ``num_extra_tokens`` zero columns in front, contiguous (cached per rows
    tensor: the same few shapes come back every recorded iteration)."""
    if num_extra_tokens == 0:
        return rows.contiguous()
    return _padded(rows, num_extra_tokens)


@functools.lru_cache(maxsize=16)
def _padded(rows, num_extra_tokens):
    pad = rows.new_zeros((rows.shape[0], num_extra_tokens))
    return torch.cat([pad, rows], dim=1).contiguous()


__all__ = [
    'SpectrumSums', 'spectrum_sums', 'spectrum_sums_apply', 'spectrum_sums_forced',
    'try_spectrum_sums', 'high_frequency_ratio_of'
]
