"""``convention='exact' | 'paper'`` of the frequency diagnostics (docs/methods.md §8).

``'paper'`` must give the numbers of the How-do-ViTs authors' code: the notebook's diagonal
(``roll`` by ``h/2``, ``diag()[h/2:]``, labels ``linspace(0, 1)``) and ``FreqAttack``'s band
(two centred squares of sides ``2 int((f ± s) h / 2π)``). Both are rebuilt here step by step
from their description, and checked on maps whose spectra are known in closed form.
"""
import math
import os.path as osp

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from script_modules import load_script  # tests/

from mmstiff.analysis.frequency import (delta_log_amplitude, diagonal_frequencies, diagonal_indices,
                                        log_amplitude_profile)
from mmstiff.analysis.noise import frequency_band_mask, frequency_band_noise

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def notebook_profile(maps):
    """The authors' notebook, step by step: log amplitude, roll by h/2, mean over batch and
    channels, the half diagonal from the centre, relative to its first point; x labels
    ``linspace(0, 1, len)``."""
    h, w = maps.shape[-2:]
    f = torch.log(torch.fft.fft2(maps.double()).abs() + 1e-6)
    f = torch.roll(f, shifts=(int(h / 2), int(w / 2)), dims=(2, 3)).mean(dim=(0, 1))
    latent = f.diag()[int(h / 2):]
    return np.linspace(0, 1, len(latent)), latent - latent[0]


def hand_built_4x4(a=2.0, b=1.0, c=0.25):
    """``a + b cos(2π (y + x) / 4) + c (-1)^(y + x)``: on the diagonal ``F(0, 0) = 16 a``,
    ``F(±1, ±1) = 8 b``, ``F(2, 2) = 16 c``."""
    pos = torch.arange(4, dtype=torch.float64)
    s = pos[:, None] + pos[None, :]
    return (a + b * torch.cos(2 * math.pi * s / 4) + c * torch.cos(math.pi * s)).view(1, 1, 4, 4)


def test_hand_built_4x4_profile_in_both_conventions():
    maps = hand_built_4x4()
    freqs, profile = log_amplitude_profile(maps)
    assert freqs.tolist() == [0.0, 0.5, 1.0]
    torch.testing.assert_close(
        profile, torch.tensor([0.0, math.log(8 / 32), math.log(4 / 32)], dtype=torch.float64),
        atol=1e-6, rtol=0)
    assert delta_log_amplitude(maps) == pytest.approx(math.log(4 / 32), abs=1e-6)
    # the notebook: two points, the centre and the bin 0.5π, the latter labelled 1.0π
    freqs, profile = log_amplitude_profile(maps, convention='paper')
    assert freqs.tolist() == [0.0, 1.0]
    torch.testing.assert_close(profile, torch.tensor([0.0, math.log(8 / 32)], dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert delta_log_amplitude(maps,
                               convention='paper') == pytest.approx(math.log(8 / 32), abs=1e-6)
    labels, expected = notebook_profile(maps)
    assert labels.tolist() == freqs.tolist()
    torch.testing.assert_close(profile, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize('size', [2, 4, 5, 6, 7, 8, 14])
def test_paper_convention_is_the_notebook_on_random_maps(size):
    torch.manual_seed(size)
    maps = torch.randn(3, 5, size, size)
    freqs, profile = log_amplitude_profile(maps, convention='paper')
    labels, expected = notebook_profile(maps)
    assert len(profile) == size - size // 2
    np.testing.assert_allclose(freqs.numpy(), labels)
    torch.testing.assert_close(profile, expected, atol=2e-5, rtol=0)
    assert delta_log_amplitude(maps,
                               convention='paper') == pytest.approx(float(expected[-1]), abs=2e-5)
    # the same bins as the exact profile, one fewer on even sizes (the Nyquist bin)
    exact_freqs, exact = log_amplitude_profile(maps)
    torch.testing.assert_close(exact[:len(profile)], profile, atol=1e-5, rtol=0)
    assert len(exact) == len(profile) + (1 - size % 2)
    assert exact_freqs[-1] == (1.0 if size % 2 == 0 else (size - 1) / size)


def test_odd_sizes_agree_in_value_and_differ_in_labels():
    torch.manual_seed(0)
    maps = torch.randn(2, 3, 5, 5)
    exact_freqs, exact = log_amplitude_profile(maps)
    paper_freqs, paper = log_amplitude_profile(maps, convention='paper')
    torch.testing.assert_close(exact, paper)
    assert exact_freqs.tolist() == pytest.approx([0.0, 0.4, 0.8])
    assert paper_freqs.tolist() == [0.0, 0.5, 1.0]
    assert delta_log_amplitude(maps) == pytest.approx(delta_log_amplitude(maps, 'paper'))


def test_diagonal_indices_and_frequencies():
    assert diagonal_indices(4).tolist() == [2, 1, 0]
    assert diagonal_indices(4, 'paper').tolist() == [2, 3]
    assert diagonal_indices(5, 'paper').tolist() == [2, 3, 4]
    assert diagonal_frequencies(14, 'paper').tolist() == pytest.approx([k / 6 for k in range(7)])
    assert diagonal_frequencies(14).tolist() == pytest.approx([k / 7 for k in range(8)])


@pytest.mark.parametrize('call', [
    lambda: log_amplitude_profile(torch.randn(1, 1, 4, 4), convention='authors'),
    lambda: delta_log_amplitude(torch.randn(1, 1, 4, 4), convention=None),
    lambda: frequency_band_mask(8, 8, 0.5, convention='Paper'),
])
def test_unknown_convention_names_the_field(call):
    with pytest.raises(ValueError, match="convention=.* is not supported; expected one of"):
        call()


def freq_attack_mask(size, freq, width_band):
    """``FreqAttack._fourier_mask``'s mask rebuilt from its description: ``f = freq π``,
    ``s = width_band π / 2``, centred ones squares padded to ``size``, their difference, and
    the ``roll`` back to the unshifted layout."""
    f, s = freq * math.pi, width_band / 2 * math.pi

    def centre(side):
        side = min(max(side, 0), size)
        return F.pad(torch.ones(side, side), [int((size - side) / 2)] * 4)

    shifted = centre(int(((f + s) * size) / (2 * math.pi)) * 2) - \
        centre(int(((f - s) * size) / (2 * math.pi)) * 2)
    return torch.roll(shifted, shifts=(size // 2, size // 2), dims=(0, 1)) > 0


def as_mask(size, frequencies):
    mask = torch.zeros(size, size, dtype=torch.bool)
    for ky, kx in frequencies:
        mask[ky % size, kx % size] = True
    return mask


def test_paper_band_on_8x8_is_two_floor_rounded_squares():
    # f + s = 0.625π: side 2 int(2.5) = 4, k in {-2, -1, 0, 1}; f - s = 0.375π: side
    # 2 int(1.5) = 2, k in {-1, 0}
    outer = {(y, x) for y in (-2, -1, 0, 1) for x in (-2, -1, 0, 1)}
    inner = {(y, x) for y in (-1, 0) for x in (-1, 0)}
    paper = frequency_band_mask(8, 8, 0.5, 0.25, convention='paper')
    assert torch.equal(paper, as_mask(8, outer - inner)) and int(paper.sum()) == 12
    assert paper[-2 % 8, 0] and not paper[2, 0]  # k = -2 kept, k = +2 not
    # the exact band [0.375, 0.625): Chebyshev radius 0.5, max(|k_y|, |k_x|) = 2
    ring = {(y, x) for y in range(-4, 4) for x in range(-4, 4) if max(abs(y), abs(x)) == 2}
    assert torch.equal(frequency_band_mask(8, 8, 0.5, 0.25), as_mask(8, ring))
    assert len(ring) == 16


def test_paper_band_rounding_can_hold_the_dc_term():
    # 0.3π ± 0.1π on 8 x 8: sides 2 int(1.6) = 2 and 2 int(0.8) = 0, the square {-1, 0}²
    paper = frequency_band_mask(8, 8, 0.3, 0.2, convention='paper')
    assert torch.equal(paper, as_mask(8, {(y, x) for y in (-1, 0) for x in (-1, 0)}))
    assert paper[0, 0]
    exact = frequency_band_mask(8, 8, 0.3, 0.2)  # [0.2, 0.4): max(|k|) = 1, no DC
    assert int(exact.sum()) == 8 and not exact[0, 0]


@pytest.mark.parametrize('size', [8, 14, 32])
@pytest.mark.parametrize('width_band', [0.1, 0.2, 0.4])
def test_paper_band_is_the_freq_attack_mask(size, width_band):
    for freq in [round(0.1 * i, 1) for i in range(11)]:
        expected = freq_attack_mask(size, freq, width_band)
        assert torch.equal(frequency_band_mask(size, size, freq, width_band, 'paper'),
                           expected), freq


def test_paper_band_may_be_empty_and_then_adds_no_noise():
    # 0 ± 0.05π on 32 x 32: side 2 int(0.8) = 0, as FreqAttack draws it
    assert not frequency_band_mask(32, 32, 0.0, 0.1, convention='paper').any()
    noise = frequency_band_noise((2, 3, 32, 32), 0.0, 0.5, 0.1, convention='paper')
    assert torch.equal(noise, torch.zeros(2, 3, 32, 32))
    assert int(frequency_band_mask(32, 32, 0.0, 0.1).sum()) == 1  # exact: the DC bin


def test_paper_noise_filters_sign_noise_through_the_mask():
    shape = (2, 3, 8, 8)
    noise = frequency_band_noise(shape, 0.5, 0.3, 0.25,
                                 torch.Generator().manual_seed(4), dtype=torch.float64,
                                 convention='paper')
    delta = 0.3 * torch.sign(
        torch.randn(shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    mask = freq_attack_mask(8, 0.5, 0.25)
    torch.testing.assert_close(noise, torch.fft.ifft2(torch.fft.fft2(delta) * mask).real)


@pytest.mark.parametrize('height, width', [(7, 7), (8, 6)])
def test_paper_band_needs_square_even_images(height, width):
    with pytest.raises(ValueError, match=f"convention='paper' is not supported for "
                       f'{height}x{width} images'):
        frequency_band_mask(height, width, 0.5, convention='paper')
    assert frequency_band_mask(height, width, 0.5, 0.2).any()  # exact: any size


def tool(name):
    """The analysis tool ``tools/analysis/<name>.py`` as a module."""
    return load_script(f'tools/analysis/{name}.py', f'{name}_tool')


def test_spectrum_tool_threads_the_convention():
    spectrum = tool('spectrum')
    torch.manual_seed(5)
    maps = torch.randn(2, 4, 6, 6)
    for convention in ('exact', 'paper'):
        stats = spectrum.StateStats(convention)
        stats.add(maps, 0, None)
        result = stats.result()
        freqs, profile = log_amplitude_profile(maps, convention)
        assert result['freqs'] == pytest.approx(freqs.tolist())
        assert result['profile'] == pytest.approx(profile.tolist(), abs=1e-5)
        assert result['dlogamp'] == pytest.approx(delta_log_amplitude(maps, convention), abs=1e-5)


class Recorder(torch.nn.Module):
    """A classifier stand-in that predicts class 0 and keeps the inputs it saw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, inputs, data_samples, mode='predict'):
        from mmpretrain.structures import DataSample
        self.seen.append(inputs.clone())
        return [DataSample().set_pred_label(0).set_gt_label(0) for _ in range(len(inputs))]


def test_freq_noise_tool_threads_the_convention():
    freq_noise = tool('freq_noise')
    model = Recorder()
    inputs = torch.zeros(2, 3, 32, 32)
    result = freq_noise.analyse(model, [(inputs, None)], [0.0, 0.5], 0.2, 0.1, 7,
                                convention='paper')
    assert [b['num_bins'] for b in result['bands']
            ] == [int(freq_attack_mask(32, f, 0.1).sum()) for f in (0.0, 0.5)]
    assert result['bands'][0]['num_bins'] == 0
    generator = torch.Generator().manual_seed(7)
    expected = [
        frequency_band_noise(inputs.shape, f, 0.2, 0.1, generator, convention='paper')
        for f in (0.0, 0.5)
    ]
    torch.testing.assert_close(model.seen[1], expected[0])  # seen[0]: the clean batch
    torch.testing.assert_close(model.seen[2], expected[1])
    with pytest.raises(SystemExit):
        freq_noise.main(['config.py', 'checkpoint.pth', '--convention', 'authors'])
