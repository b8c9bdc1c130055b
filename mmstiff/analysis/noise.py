"""Frequency-band noise (docs/methods.md §8; *How Do Vision Transformers Work?*,
arXiv:2202.06709, §3, Fig. 2b).

    x_noise = x + Re(F^{-1}(M_f ⊙ F(δ))),    δ = ε · sign(N(0, 1)),

where ``M_f`` keeps the 2-D frequencies whose normalised Chebyshev radius
``max(|ω_y|, |ω_x|) / π`` lies in the band ``[f - w/2, f + w/2)`` (a square annulus of width
``w = 0.1`` around ``f``). Each axis' normalised frequency is ``2 · fftfreq(n)``, in [-1, 1).
The accuracy drop of a classifier under this noise, band by band, shows which frequencies it
relies on (ViTs are hurt by low-frequency noise, ResNets by high-frequency noise).
"""
import torch


def normalised_frequency_radius(height, width):
    """``(H, W)`` Chebyshev radius ``max(|ω_y|, |ω_x|)`` in units of π, unshifted FFT layout."""
    fy = torch.fft.fftfreq(height, dtype=torch.float64).abs() * 2.0
    fx = torch.fft.fftfreq(width, dtype=torch.float64).abs() * 2.0
    return torch.maximum(fy[:, None], fx[None, :])


def frequency_band_mask(height, width, freq, width_band=0.1):
    """Boolean ``(H, W)`` mask of the band ``[freq - width_band/2, freq + width_band/2)``.

    Args:
        height, width (int): spatial size of the images.
        freq (float): centre of the band, normalised frequency in [0, 1] (units of π).
        width_band (float): width of the band in units of π. Default 0.1.

    Raises:
        ValueError: a frequency outside [0, 1], a non-positive width, or a band that holds no
            frequency of an image of this size (pick a wider band).
    """
    if not 0.0 <= freq <= 1.0:
        raise ValueError(f'freq={freq!r} is not supported; expected a normalised frequency in '
                         '[0, 1] (units of π)')
    if not width_band > 0:
        raise ValueError(f'width_band={width_band!r} is not supported; expected > 0')
    radius = normalised_frequency_radius(height, width)
    half = width_band / 2.0
    tol = 1e-9  # radii are exact multiples of 2/n; keep the half-open band stable
    mask = (radius >= freq - half - tol) & (radius < freq + half - tol)
    if not mask.any():
        raise ValueError(f'the band freq={freq}, width_band={width_band} holds no frequency of '
                         f'a {height}x{width} image (its frequency step is '
                         f'{2.0 / min(height, width):.3f}π); expected a wider band')
    return mask


def frequency_band_noise(shape, freq, eps, width_band=0.1, generator=None, dtype=torch.float32):
    """Noise confined to one frequency band: ``Re(F^{-1}(M_f ⊙ F(ε · sign(N(0, 1)))))``.

    Args:
        shape (tuple): ``(..., H, W)``, e.g. the batch shape ``(B, C, H, W)``.
        freq (float): band centre in units of π, in [0, 1].
        eps (float): amplitude ε of the sign noise before filtering (>= 0).
        width_band (float): band width in units of π. Default 0.1.
        generator (torch.Generator, optional): for reproducible noise.
        dtype (torch.dtype): dtype of the returned noise.

    Returns:
        Tensor: real noise of ``shape``; add it to the (normalised) images.
    """
    if len(shape) < 2:
        raise ValueError(f'shape={tuple(shape)} is not supported; expected (..., H, W)')
    if not eps >= 0:
        raise ValueError(f'eps={eps!r} is not supported; expected >= 0')
    mask = frequency_band_mask(shape[-2], shape[-1], freq, width_band)
    delta = eps * torch.sign(torch.randn(shape, generator=generator, dtype=torch.float64))
    spectrum = torch.fft.fft2(delta) * mask
    return torch.fft.ifft2(spectrum).real.to(dtype)
