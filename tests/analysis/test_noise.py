"""Frequency-band masks and noise (How-do-ViTs paper, Fig. 2b) against hand-counted bins."""
import pytest
import torch

from mmstiff.analysis import frequency_band_mask, frequency_band_noise


def test_mask_bins_by_hand():
    # an 8-point axis has normalised frequencies 0, ±.25, ±.5, ±.75, -1 (units of π)
    assert int(frequency_band_mask(8, 8, 0.0).sum()) == 1  # the DC bin only
    assert bool(frequency_band_mask(8, 8, 0.0)[0, 0])
    # Chebyshev ring of radius 1 (index 1): 3 x 3 - 1 bins
    assert int(frequency_band_mask(8, 8, 0.25).sum()) == 8
    # radius 1.0π: every bin in row 4 or column 4: 8 + 8 - 1
    mask = frequency_band_mask(8, 8, 1.0)
    assert int(mask.sum()) == 15 and bool(mask[4, 0]) and bool(mask[0, 4])


def test_mask_argument_checks():
    with pytest.raises(ValueError, match='freq='):
        frequency_band_mask(8, 8, 1.5)
    with pytest.raises(ValueError, match='width_band='):
        frequency_band_mask(8, 8, 0.5, 0.0)
    with pytest.raises(ValueError, match='holds no frequency'):
        frequency_band_mask(4, 4, 0.25)  # a 4-point axis has 0, .5, 1 only


def test_noise_lies_in_its_band():
    shape, freq, eps = (2, 3, 16, 16), 0.5, 0.1
    noise = frequency_band_noise(shape, freq, eps, generator=torch.Generator().manual_seed(1),
                                 dtype=torch.float64)
    delta = eps * torch.sign(
        torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    mask = frequency_band_mask(16, 16, freq)
    spectrum = torch.fft.fft2(noise)
    # inside the band: the spectrum of δ; outside: nothing
    assert torch.allclose(spectrum[..., mask], torch.fft.fft2(delta)[..., mask], atol=1e-9)
    assert float(spectrum[..., ~mask].abs().max()) < 1e-9
    assert abs(float(noise.mean())) < 1e-12  # no DC in a band away from 0
    with pytest.raises(ValueError, match='eps='):
        frequency_band_noise(shape, freq, -1.0)
