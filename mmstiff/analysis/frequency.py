"""High-frequency ratio and Δ log amplitude of feature maps and token matrices
(docs/methods.md §8; ``convention='exact'`` or ``'paper'`` as defined there).

Layouts: ``'nchw'`` for ``(B, C, H, W)`` maps, ``'nlc'`` for ``(B, N, C)`` tokens.
"""
import functools
import math
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F

from mmstiff.utils.layout import infer_layout, pool_state
from .triton_spectrum import (SpectrumSums, high_frequency_ratio_of, spectrum_sums_apply,
                              try_spectrum_sums)

LOG_EPS = 1e-6
CONVENTIONS = ('exact', 'paper')


def check_convention(convention: str) -> str:
    """``convention`` if it is ``'exact'`` or ``'paper'``; else ``ValueError``."""
    if not isinstance(convention, str) or convention not in CONVENTIONS:
        raise ValueError(f'convention={convention!r} is not supported; expected one of '
                         f"{CONVENTIONS} ('exact': ends at the Nyquist bin 1.0π; 'paper': the "
                         "How-do-ViTs authors' indexing)")
    return convention


def diagonal_length(size: int, convention: str = 'exact') -> int:
    """Number of points of the centre-to-corner diagonal: ``size // 2 + 1`` (``'exact'``) or
    ``size - size // 2`` (``'paper'``: the notebook's ``diag()[int(h/2):]``)."""
    return size // 2 + 1 if check_convention(convention) == 'exact' else size - size // 2


def diagonal_indices(size: int, convention: str = 'exact') -> torch.Tensor:
    """Row (= column) indices, in a ``fftshift``-ed ``size × size`` spectrum, of the diagonal
    points from the centre outwards: towards the top-left corner (``'exact'``) or the
    bottom-right one (``'paper'``)."""
    centre = size // 2
    if check_convention(convention) == 'paper':
        return torch.arange(centre, size)
    return torch.arange(centre, -1, -1)


def dc_component(x: torch.Tensor, layout: Optional[str] = None) -> torch.Tensor:
    """``DC[X]``: the mean over tokens (``'nlc'``) or spatial positions (``'nchw'``), kept
    broadcastable against ``x``; the layout is inferred from ``x.dim()`` when None."""
    return pool_state(x, layout or infer_layout(x))


def high_frequency_ratio(x: torch.Tensor, layout: Optional[str] = None) -> torch.Tensor:
    """Per-sample ``||HC[X]||_F / ||X||_F`` (docs/methods.md §8; anti-oversmoothing Appendix G.3).

    Args:
        x (Tensor): ``(B, C, H, W)`` feature maps or ``(B, N, C)`` tokens (all tokens, the class
            token included, as in the paper).
        layout (str, optional): ``'nchw'`` or ``'nlc'``; inferred from ``x.dim()`` when None.

    Returns:
        Tensor: ``(B,)``, in [0, 1]; 0 for a map constant over positions, ``nan`` for a zero map.
    """
    x = x.float()
    hc = x - dc_component(x, layout)
    return (torch.linalg.vector_norm(hc.flatten(1), dim=1) /
            torch.linalg.vector_norm(x.flatten(1), dim=1))


def tokens_to_maps(x: torch.Tensor, num_extra_tokens: int = 0,
                   grid: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """Turn ``(B, N, C)`` tokens into ``(B, C, H, W)`` maps, dropping the leading extra tokens.

    Args:
        x (Tensor): tokens; the first ``num_extra_tokens`` (class / distillation tokens) are
            dropped.
        num_extra_tokens (int): number of leading non-patch tokens.
        grid (tuple[int, int], optional): ``(H, W)`` of the patch grid; a square grid when None.
    """
    if x.dim() != 3:
        raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, N, C) tokens')
    patches = x[:, num_extra_tokens:]
    n = patches.shape[1]
    if grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f'{n} patch tokens (after dropping num_extra_tokens='
                             f'{num_extra_tokens}) do not form a square grid; pass grid=(H, W)')
        grid = (side, side)
    h, w = grid
    if h * w != n:
        raise ValueError(f'grid={tuple(grid)} holds {h * w} tokens; expected {n} patch tokens')
    return patches.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)


def log_amplitude_spectrum(maps: torch.Tensor) -> torch.Tensor:
    """``mean_{batch, channels} fftshift(log(|fft2(maps)| + 1e-6))``, an ``(H, W)`` tensor.

    The How-do-ViTs paper's reference code (Fig. 2a, 8) computes exactly this before taking
    the diagonal.
    """
    if maps.dim() != 4:
        raise ValueError(f'maps has shape {tuple(maps.shape)}; expected (B, C, H, W)')
    amplitude = torch.fft.fft2(maps.float()).abs()
    log_amp = torch.log(amplitude + LOG_EPS).mean(dim=(0, 1))
    return torch.fft.fftshift(log_amp)


def diagonal_frequencies(size: int, convention: str = 'exact') -> torch.Tensor:
    """Normalised frequencies (in units of π) of the centre-to-corner diagonal of a shifted
    ``size × size`` spectrum: ``2k / size`` for ``k = 0 .. size // 2``.

    With ``convention='paper'`` the authors' labels instead, ``linspace(0, 1)`` over the
    ``size - size // 2`` points (point ``k`` is the bin ``2k / size``, labelled
    ``k / (size - size // 2 - 1)``).
    """
    if check_convention(convention) == 'paper':
        return torch.linspace(0.0, 1.0, diagonal_length(size, convention), dtype=torch.float64)
    return torch.arange(size // 2 + 1, dtype=torch.float64) * 2.0 / size


def diagonal_log_amplitude(maps: torch.Tensor, convention: str = 'exact') -> torch.Tensor:
    """``mean_{batch, channels} log(|F(-k, -k)| + 1e-6)`` for ``k = 0 .. size // 2``
    (``convention='paper'``: ``k = 0 .. size - size // 2 - 1``, the notebook's points).

    The diagonal of :func:`log_amplitude_spectrum` from the centre to the top-left corner,
    without the 2-D transform: ``F(k, k) = Σ_{y,x} x[y, x] e^{-2πi k (y + x) / n}`` is the 1-D
    DFT of the sums of ``x`` over the anti-diagonals ``y + x ≡ r (mod n)``, and for real maps
    ``|F(-k, -k)| = |F(k, k)|``. One pass over the maps and a length-``n`` FFT.
    """
    if maps.dim() != 4 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f'maps has shape {tuple(maps.shape)}; expected (B, C, H, W) with H == W')
    if maps.is_complex():
        raise ValueError('maps must be real; the diagonal uses |F(-k, -k)| = |F(k, k)|')
    size = maps.shape[-1]
    pos = torch.arange(size, device=maps.device)
    anti_diagonal = ((pos[:, None] + pos[None, :]) % size).flatten()
    flat = maps.float().flatten(2)
    folded = flat.new_zeros(*flat.shape[:2], size).index_add_(2, anti_diagonal, flat)
    diag = torch.fft.fft(folded)[..., :diagonal_length(size, convention)]
    return torch.log(diag.abs() + LOG_EPS).mean(dim=(0, 1)).double()


def log_amplitude_profile(maps: torch.Tensor,
                          convention: str = 'exact') -> Tuple[torch.Tensor, torch.Tensor]:
    """Relative log amplitude along the diagonal from frequency 0 to 1.0π (docs/methods.md §8).

    Takes the diagonal of :func:`log_amplitude_spectrum` from the centre towards the
    top-left corner and subtracts its value at the centre (the DC term). After ``fftshift``
    the top-left corner of an even-sized spectrum holds the Nyquist frequency, so the last
    element is exactly 1.0π (for odd sizes ``(size - 1) / size · π``, the highest one there
    is). The reference code walks towards the bottom-right corner instead, which for real
    inputs gives the same values (``|F(-k)| = |F(k)|``) but stops one bin short of 1.0π.

    Args:
        maps (Tensor): ``(B, C, H, W)`` with ``H == W``.
        convention (str): ``'exact'`` (default) or ``'paper'``, the notebook's points and
            labels (see the module docstring).

    Returns:
        tuple[Tensor, Tensor]: ``(freqs, profile)``, both of :func:`diagonal_length` points
        (``size // 2 + 1`` by default): frequencies in units of π and log amplitudes relative
        to the DC term (``profile[0] == 0``).
    """
    diag = diagonal_log_amplitude(maps, convention)
    return diagonal_frequencies(maps.shape[-1], convention), diag - diag[0]


@functools.lru_cache(maxsize=16)
def _end_bin_weights(size, device, dtype, k=None):
    """``(size * size, 3)``: ones, and the cosine and sine of the diagonal bin
    ``k`` (default ``size // 2``), ``2π k (y + x) / size`` at each position (row-major)."""
    k = size // 2 if k is None else k
    pos = torch.arange(size, dtype=torch.float64)
    angle = (pos[:, None] + pos[None, :]).flatten() * (2.0 * math.pi * k / size)
    weights = torch.stack([torch.ones_like(angle), torch.cos(angle), torch.sin(angle)], dim=1)
    return weights.to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=16)
def _end_bin_rows(size, device, dtype, k):
    """:func:`_end_bin_weights` as ``(3, size * size)`` rows, contiguous, for ``F.linear``
    (rows, not the columns of a ``(..., n) @ (n, 3)`` product). Made on ``device`` itself: no
    copy from the host, which on a GPU would wait for it."""
    pos = torch.arange(size, dtype=torch.float64, device=device)
    angle = (pos[:, None] + pos[None, :]).flatten() * (2.0 * math.pi * k / size)
    return torch.stack([torch.ones_like(angle), torch.cos(angle), torch.sin(angle)]).to(dtype)


def _square_side(num_patches, num_extra_tokens, grid):
    if grid is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            raise ValueError(f'{num_patches} patch tokens (after dropping num_extra_tokens='
                             f'{num_extra_tokens}) do not form a square grid; pass grid=(H, W)')
        return side
    h, w = grid
    if h * w != num_patches or h != w:
        raise ValueError(f'grid={tuple(grid)} is not supported; expected a square grid of '
                         f'{num_patches} patch tokens')
    return h


def diagonal_end_bins(x: torch.Tensor, num_extra_tokens: int = 0, grid: Optional[Tuple[int,
                                                                                       int]] = None,
                      convention: str = 'exact') -> torch.Tensor:
    """The two ends of the diagonal of every channel's 2-D spectrum, ``(B, C, 3)`` float32.

    Column 0 is ``F(0, 0)``, the sum of the map; columns 1 and 2 are the real and imaginary
    parts of ``F(k, k)`` at the last point of the diagonal, ``k = diagonal_length(size,
    convention) - 1`` (the Nyquist bin ``size // 2`` by default). That is all
    :func:`delta_log_amplitude` needs: one product of the state with three weight rows, one
    pass over it. Token states are read in place, without forming their maps.

    Args:
        x (Tensor): ``(B, C, H, W)`` maps with ``H == W``, or ``(B, N, C)`` tokens whose patch
            tokens (after the first ``num_extra_tokens``) form a square grid, row-major as
            :func:`tokens_to_maps` lays them out.
        num_extra_tokens (int): leading non-patch tokens of a token state.
        grid (tuple[int, int], optional): the patch grid of a token state (square); inferred
            when None.
        convention (str): ``'exact'`` or ``'paper'`` (see the module docstring).
    """
    if not torch.is_tensor(x) or x.is_complex():
        raise ValueError('x must be a real tensor; the diagonal uses |F(-k, -k)| = |F(k, k)|')
    if x.dim() == 4:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, C, H, W) with H == W')
        size = x.shape[-1]
        rows = _end_bin_rows(size, x.device, torch.float32, diagonal_length(size, convention) - 1)
        return F.linear(x.float().flatten(2), rows)
    if x.dim() == 3:
        patches = x[:, num_extra_tokens:]
        size = _square_side(patches.shape[1], num_extra_tokens, grid)
        rows = _end_bin_rows(size, x.device, torch.float32, diagonal_length(size, convention) - 1)
        return torch.matmul(rows, patches.float()).transpose(1, 2)
    raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, C, H, W) maps or (B, N, C) '
                     'tokens')


class FrequencySummary(NamedTuple):
    """Per-sample frequency numbers of one state (:func:`frequency_summary`).

    Attributes:
        hf_ratio (Tensor): ``(B,)`` :func:`high_frequency_ratio`.
        end_bins (Tensor | None): ``(B, C, 3)`` :func:`diagonal_end_bins`; None where the state
            has no square map (a non-square grid, or a 1 × 1 map).
    """
    hf_ratio: torch.Tensor
    end_bins: Optional[torch.Tensor]


def frequency_summary(x: torch.Tensor, num_extra_tokens: int = 0, grid: Optional[Tuple[int,
                                                                                       int]] = None,
                      convention: str = 'exact') -> FrequencySummary:
    """:func:`high_frequency_ratio` and :func:`diagonal_end_bins` of one state, together.

    Fewer passes over the state than the two functions one after the other: a map's DC
    component is its column ``F(0, 0)`` of the end bins over ``H · W``, so the bins' one product
    replaces the mean. Token states keep their mean over all tokens (the class token included,
    as :func:`high_frequency_ratio` takes it) and read the end bins of the patch tokens. On
    CUDA, a state with end bins is read by one Triton kernel (:func:`frequency_sums`).

    Args:
        x (Tensor): ``(B, C, H, W)`` maps or ``(B, N, C)`` tokens.
        num_extra_tokens (int): leading non-patch tokens of a token state.
        grid (tuple[int, int], optional): the patch grid of a token state; a square grid is
            inferred when None, and a state whose patch tokens do not form one gets no bins.
        convention (str): ``'exact'`` or ``'paper'`` (see the module docstring).

    Returns:
        FrequencySummary: ``(hf_ratio, end_bins)``.
    """
    sums = frequency_sums(x, num_extra_tokens, grid, convention)
    if sums is not None:
        return FrequencySummary(high_frequency_ratio_of(sums.squares), sums.end_bins)
    return operator_frequency_summary(x, num_extra_tokens, grid, convention)


def operator_frequency_summary(x: torch.Tensor, num_extra_tokens: int = 0,
                               grid: Optional[Tuple[int, int]] = None,
                               convention: str = 'exact') -> FrequencySummary:
    """:func:`frequency_summary` with PyTorch's operators on any device, for a caller that
    asked :func:`frequency_sums` already and got None (the same values as the kernel's)."""
    x = x.float()
    side = _summary_side(x, num_extra_tokens, grid)
    if x.dim() == 4:
        flat = x.flatten(2)  # (B, C, H W)
        if side is not None:
            rows = _end_bin_rows(side, x.device, torch.float32,
                                 diagonal_length(side, convention) - 1)
            bins = F.linear(flat, rows)
            dc = bins[..., :1] * (1.0 / flat.shape[-1])
        else:
            bins, dc = None, pool_state(x, 'nchw').flatten(2)
    elif x.dim() == 3:
        flat = x
        dc = pool_state(x, 'nlc')
        bins = None
        if side is not None:
            bins = diagonal_end_bins(x, num_extra_tokens, (side, side), convention)
    else:
        raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, C, H, W) maps or '
                         '(B, N, C) tokens')
    hf_ratio = (
        torch.linalg.vector_norm(flat - dc, dim=(1, 2)) /
        torch.linalg.vector_norm(flat, dim=(1, 2)))
    return FrequencySummary(hf_ratio, bins)


def frequency_sums(x: torch.Tensor, num_extra_tokens: int = 0, grid: Optional[Tuple[int,
                                                                                    int]] = None,
                   convention: str = 'exact') -> Optional[SpectrumSums]:
    """The per-(sample, channel) sums :func:`frequency_summary` takes its values from on CUDA,
    for a caller that takes the ratios of many states at once: one Triton kernel reads the state
    (:class:`~mmstiff.analysis.triton_spectrum.SpectrumSums`; the ratio per sample is
    :func:`~mmstiff.analysis.triton_spectrum.high_frequency_ratio_of` of its ``squares``).

    Arguments as for :func:`frequency_summary`. Returns None where :func:`frequency_summary`
    takes PyTorch's operators instead: off CUDA, a state without a square map (or square grid of
    patches) of more than one position a side, a kernel that could not run.
    """
    if not (torch.is_tensor(x) and x.dim() in (3, 4) and spectrum_sums_apply(x)):
        return None
    if not x.is_floating_point():  # (complex or integer states: left to PyTorch's path)
        return None
    side = _summary_side(x, num_extra_tokens, grid)
    if side is None:
        return None
    rows = _end_bin_rows(side, x.device, torch.float32, diagonal_length(side, convention) - 1)
    return try_spectrum_sums(x, rows, num_extra_tokens if x.dim() == 3 else 0)


def _summary_side(x, num_extra_tokens, grid):
    """The side of a state's square map (maps) or square grid of patch tokens (tokens) with
    more than one position a side, or None (no end bins)."""
    if x.dim() == 4:
        size = x.shape[-1]
        return size if x.shape[-2] == size and size > 1 else None
    if x.dim() != 3:
        return None
    num_patches = x.shape[1] - num_extra_tokens
    if grid is None and num_patches > 0:
        side = math.isqrt(num_patches)
        grid = (side, side) if side * side == num_patches else None
    if grid is not None and grid[0] == grid[1] and grid[0] > 1 and \
            grid[0] * grid[1] == num_patches:
        return grid[0]
    return None


def delta_log_amplitudes(bins: torch.Tensor) -> torch.Tensor:
    """Δ log amplitude from :func:`diagonal_end_bins`: ``(..., B, C, 3)`` -> ``(...)`` float64.

    ``mean_{B, C} log(|F(k, k)| + 1e-6) - mean_{B, C} log(|F(0, 0)| + 1e-6)``, the value of
    :func:`delta_log_amplitude`. States of one shape stacked on leading axes are computed in one
    call (a recorded training iteration computes all of its states' values at once).
    """
    if not torch.is_tensor(bins) or bins.dim() < 3 or bins.shape[-1] != 3:
        raise ValueError(f'bins has shape {tuple(getattr(bins, "shape", ()))}; expected '
                         '(..., B, C, 3) from diagonal_end_bins')
    low = torch.log(bins[..., 0].abs() + LOG_EPS).double().mean(dim=(-2, -1))
    high = torch.log(torch.hypot(bins[..., 1], bins[..., 2]) + LOG_EPS)
    return high.double().mean(dim=(-2, -1)) - low


def delta_log_amplitude(maps: torch.Tensor, convention: str = 'exact') -> float:
    """Δ log amplitude at 1.0π: the last element of :func:`log_amplitude_profile`.

    With ``convention='paper'`` the value the authors' notebook labels 1.0π: the bin
    ``k = (size - 1) // 2``, one short of the Nyquist bin on even sizes.

    Negative when high frequencies are weaker than the DC term; a layer that lowers it acts as a
    low-pass filter (How-do-ViTs paper, Fig. 8: MSAs lower it, MLPs and Convs raise it).

    Only the two ends of the diagonal are needed, ``F(0, 0)`` (the sum of each map) and
    ``F(k, k)`` with ``k = size // 2``, so both come from one product of the flattened maps
    with three weight vectors (ones, and the real and imaginary parts of the Fourier basis
    function of that bin): no transform, one pass over the maps
    (:func:`diagonal_end_bins`, then :func:`delta_log_amplitudes`).
    """
    if maps.dim() != 4 or maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f'maps has shape {tuple(maps.shape)}; expected (B, C, H, W) with H == W')
    if maps.is_complex():
        raise ValueError('maps must be real; the diagonal uses |F(-k, -k)| = |F(k, k)|')
    return float(delta_log_amplitudes(diagonal_end_bins(maps, convention=convention)))


def as_maps(x: torch.Tensor, num_extra_tokens: int = 0,
            grid: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """Feature maps of a state: ``x`` itself when 4-D, :func:`tokens_to_maps` when 3-D."""
    layout = infer_layout(x)
    if layout == 'nchw':
        return x
    return tokens_to_maps(x, num_extra_tokens, grid)
