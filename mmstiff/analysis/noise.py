"""Frequency-band noise, exact Chebyshev bands or the authors' convention (docs/methods.md §8)."""
import math
from typing import Optional, Tuple

import torch

from .frequency import check_convention


def normalised_frequency_radius(height: int, width: int) -> torch.Tensor:
    """``(H, W)`` Chebyshev radius ``max(|ω_y|, |ω_x|)`` in units of π, unshifted FFT layout."""
    fy = torch.fft.fftfreq(height, dtype=torch.float64).abs() * 2.0
    fx = torch.fft.fftfreq(width, dtype=torch.float64).abs() * 2.0
    return torch.maximum(fy[:, None], fx[None, :])


def centred_squares_mask(size: int, freq: float, width_band: float) -> torch.Tensor:
    """The authors' ``FreqAttack`` band (``convention='paper'``, module docstring): a boolean
    ``(size, size)`` mask, unshifted FFT layout, for an even ``size``."""
    f, s = freq * math.pi, width_band / 2.0 * math.pi

    def half_side(edge):  # int(...) * 2 as in the authors' code, clipped to [0, size], halved
        return min(max(int((edge * size) / (2 * math.pi)) * 2, 0), size) // 2

    outer, inner = half_side(f + s), half_side(f - s)
    k = torch.fft.fftfreq(size, 1.0 / size).round().long()  # 0, 1, …, n/2 - 1, -n/2, …, -1
    in_outer = (k >= -outer) & (k < outer)
    in_inner = (k >= -inner) & (k < inner)
    return (in_outer[:, None] & in_outer[None, :]) & ~(in_inner[:, None] & in_inner[None, :])


def frequency_band_mask(height: int, width: int, freq: float, width_band: float = 0.1,
                        convention: str = 'exact') -> torch.Tensor:
    """Boolean ``(H, W)`` mask of the band ``[freq - width_band/2, freq + width_band/2)``.

    Args:
        height, width (int): spatial size of the images.
        freq (float): centre of the band, normalised frequency in [0, 1] (units of π).
        width_band (float): width of the band in units of π. Default 0.1.
        convention (str): ``'exact'`` (default), the Chebyshev-radius band, or ``'paper'``,
            the authors' floor-rounded centred squares (module docstring; square images of even
            size only).

    Raises:
        ValueError: a frequency outside [0, 1], a non-positive width, an unknown convention,
            or (``'exact'``) a band that holds no frequency of an image of this size (pick a
            wider band).
    """
    if not 0.0 <= freq <= 1.0:
        raise ValueError(f'freq={freq!r} is not supported; expected a normalised frequency in '
                         '[0, 1] (units of π)')
    if not width_band > 0:
        raise ValueError(f'width_band={width_band!r} is not supported; expected > 0')
    if check_convention(convention) == 'paper':
        if height != width or height % 2:
            raise ValueError(f"convention='paper' is not supported for {height}x{width} "
                             'images; expected square images of even size (the authors\' '
                             'centred squares are n x n with even sides)')
        return centred_squares_mask(height, freq, width_band)
    radius = normalised_frequency_radius(height, width)
    half = width_band / 2.0
    tol = 1e-9  # radii are exact multiples of 2/n; keep the half-open band stable
    mask = (radius >= freq - half - tol) & (radius < freq + half - tol)
    if not mask.any():
        raise ValueError(f'the band freq={freq}, width_band={width_band} holds no frequency of '
                         f'a {height}x{width} image (its frequency step is '
                         f'{2.0 / min(height, width):.3f}π); expected a wider band')
    return mask


def frequency_band_noise(shape: Tuple[int, ...], freq: float, eps: float, width_band: float = 0.1,
                         generator: Optional[torch.Generator] = None,
                         dtype: torch.dtype = torch.float32,
                         convention: str = 'exact') -> torch.Tensor:
    """Noise confined to one frequency band: ``Re(F^{-1}(M_f ⊙ F(ε · sign(N(0, 1)))))``.

    Args:
        shape (tuple): ``(..., H, W)``, e.g. the batch shape ``(B, C, H, W)``.
        freq (float): band centre in units of π, in [0, 1].
        eps (float): amplitude ε of the sign noise before filtering (>= 0).
        width_band (float): band width in units of π. Default 0.1.
        generator (torch.Generator, optional): for reproducible noise.
        dtype (torch.dtype): dtype of the returned noise.
        convention (str): how the band is drawn, ``'exact'`` (default) or ``'paper'``
            (:func:`frequency_band_mask`).

    Returns:
        Tensor: real noise of ``shape``; add it to the (normalised) images.
    """
    if len(shape) < 2:
        raise ValueError(f'shape={tuple(shape)} is not supported; expected (..., H, W)')
    if not eps >= 0:
        raise ValueError(f'eps={eps!r} is not supported; expected >= 0')
    mask = frequency_band_mask(shape[-2], shape[-1], freq, width_band, convention)
    delta = eps * torch.sign(torch.randn(shape, generator=generator, dtype=torch.float64))
    spectrum = torch.fft.fft2(delta) * mask
    return torch.fft.ifft2(spectrum).real.to(dtype)
