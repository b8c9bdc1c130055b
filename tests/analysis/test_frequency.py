"""High-frequency ratio and the Δ log amplitude profile against hand-computed spectra."""
import math

import pytest
import torch

from mmstiff.analysis import (as_maps, delta_log_amplitude, diagonal_frequencies,
                              high_frequency_ratio, log_amplitude_profile, tokens_to_maps)

EPS = 1e-6


def test_high_frequency_ratio_of_tokens_by_hand():
    # tokens (1, 2), (3, 4): DC = (2, 3); HC = ±(1, 1), ||HC||_F = 2, ||X||_F = sqrt(30)
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    assert torch.allclose(high_frequency_ratio(x), torch.tensor([2 / math.sqrt(30)]))
    # constant tokens are pure DC
    assert torch.allclose(high_frequency_ratio(torch.ones(2, 5, 3)), torch.zeros(2))


def test_high_frequency_ratio_of_feature_maps_uses_the_spatial_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)
    # spatial mean 2.5: HC = (-1.5, -.5, .5, 1.5), ||HC||^2 = 5, ||X||^2 = 30
    assert torch.allclose(high_frequency_ratio(x), torch.tensor([math.sqrt(5 / 30)]))
    with pytest.raises(ValueError, match='expected'):
        high_frequency_ratio(torch.ones(3, 4))


def _checkerboard(n):
    i = torch.arange(n)
    return (-1.0)**(i[:, None] + i[None, :])


def test_profile_of_dc_plus_nyquist_checkerboard():
    n, a, b = 8, 0.5, 2.0
    maps = (a + b * _checkerboard(n)).reshape(1, 1, n, n)
    freqs, profile = log_amplitude_profile(maps)
    assert torch.allclose(freqs, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
    # fft2: DC = a n^2, Nyquist (π, π) = b n^2, every other bin 0
    dc = math.log(a * n * n + EPS)
    expected = [
        0.0,
        math.log(EPS) - dc,
        math.log(EPS) - dc,
        math.log(EPS) - dc,
        math.log(b * n * n + EPS) - dc
    ]
    assert torch.allclose(profile, torch.tensor(expected, dtype=torch.float64), atol=1e-4)
    assert delta_log_amplitude(maps) == pytest.approx(math.log(b / a), abs=1e-4)


def test_profile_of_a_diagonal_cosine_and_channel_mean():
    # cos(2π k (i + j) / n) puts n^2 / 2 at (k, k) and (-k, -k), nothing at DC
    n, k = 8, 2
    i = torch.arange(n, dtype=torch.float64)
    wave = torch.cos(2 * math.pi * k * (i[:, None] + i[None, :]) / n).float()
    flat = torch.full((n, n), 3.0)  # only DC: 3 n^2
    maps = torch.stack([wave, flat]).unsqueeze(0)  # (1, 2, n, n): the mean over channels
    _, profile = log_amplitude_profile(maps)
    log0 = math.log(EPS)
    dc = (log0 + math.log(3 * n * n + EPS)) / 2
    at_k = (math.log(n * n / 2 + EPS) + log0) / 2
    elsewhere = log0
    expected = [0.0, elsewhere - dc, at_k - dc, elsewhere - dc, elsewhere - dc]
    assert torch.allclose(profile, torch.tensor(expected, dtype=torch.float64), atol=1e-3)


def test_diagonal_matches_the_shifted_spectrum():
    # the fast diagonal equals the centre-to-corner diagonal of the full shifted spectrum
    from mmstiff.analysis import log_amplitude_spectrum
    from mmstiff.analysis.frequency import diagonal_log_amplitude
    generator = torch.Generator().manual_seed(0)
    for size in (6, 7):
        maps = torch.randn(3, 2, size, size, generator=generator)
        spectrum = log_amplitude_spectrum(maps)
        idx = torch.arange(size // 2, -1, -1)
        # both transform in float32, summing in different orders: the log of a small
        # amplitude magnifies the rounding (unseeded maps missed 1e-5 by 1e-4 once)
        assert torch.allclose(diagonal_log_amplitude(maps), spectrum[idx, idx].double(), atol=1e-4)


def test_delta_log_amplitude_is_the_corner_of_the_full_spectrum():
    # the two-bin projection against the fft2 spectrum: odd and even sizes, a strided input
    from mmstiff.analysis import log_amplitude_spectrum
    gen = torch.Generator().manual_seed(3)
    for size in (2, 5, 6, 7, 16):
        maps = torch.randn(3, 4, size, size, generator=gen).relu() + 0.1
        spectrum = log_amplitude_spectrum(maps).double()
        # after fftshift the centre (0, 0) sits at size // 2 and the top-left corner holds
        # (-k, -k), k = size // 2, whose amplitude is that of (k, k) for real maps
        expected = float(spectrum[0, 0] - spectrum[size // 2, size // 2])
        assert delta_log_amplitude(maps) == pytest.approx(expected, abs=1e-4)
        strided = maps.transpose(2, 3)  # same maps, transposed: same diagonal
        assert delta_log_amplitude(strided) == pytest.approx(expected, abs=1e-4)
    with pytest.raises(ValueError, match='H == W'):
        delta_log_amplitude(torch.rand(1, 1, 4, 6))


def test_odd_size_frequencies_and_square_check():
    assert torch.allclose(
        diagonal_frequencies(7), torch.tensor([0, 2 / 7, 4 / 7, 6 / 7], dtype=torch.float64))
    freqs, profile = log_amplitude_profile(torch.rand(2, 3, 7, 7))
    assert freqs.shape == profile.shape == (4, )
    assert profile[0] == 0
    with pytest.raises(ValueError, match='H == W'):
        log_amplitude_profile(torch.rand(1, 1, 4, 6))


def test_tokens_to_maps_drops_extra_tokens_row_major():
    b, h, w, c = 2, 3, 4, 5
    tokens = torch.randn(b, 1 + h * w, c)
    maps = tokens_to_maps(tokens, num_extra_tokens=1, grid=(h, w))
    assert maps.shape == (b, c, h, w)
    assert torch.equal(maps[1, 2, 1, 3], tokens[1, 1 + 1 * w + 3, 2])
    square = as_maps(torch.randn(1, 1 + 9, 2), num_extra_tokens=1)
    assert square.shape == (1, 2, 3, 3)
    with pytest.raises(ValueError, match='square grid'):
        tokens_to_maps(torch.randn(1, 11, 2), num_extra_tokens=1)
