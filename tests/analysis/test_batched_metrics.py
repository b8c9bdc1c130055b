"""The batched and fused variants of the metrics equal the functions they stand in for.

The diagnostics hooks compute, during the forward pass, a few numbers per state
(:func:`frequency_summary`, the NSI norms) and, when they write, the rest for every state at
once (:func:`delta_log_amplitudes`); M_attn of softmax maps takes an O(N²) form. Each is
checked here against the plain per-state function, on random inputs and hand-made cases.
"""
import math

import pytest
import torch

from mmstiff.analysis import (attention_column_cosine_similarity, delta_log_amplitude,
                              delta_log_amplitudes, diagonal_end_bins, frequency_summary,
                              high_frequency_ratio, softmax_column_cosine_similarity,
                              stiffness_norms, tokens_to_maps)


@pytest.mark.parametrize('size', [2, 5, 8])
@pytest.mark.parametrize('convention', ['exact', 'paper'])
def test_end_bins_give_the_delta_log_amplitude_of_each_state(size, convention):
    gen = torch.Generator().manual_seed(size)
    states = [torch.randn(3, 4, size, size, generator=gen) for _ in range(5)]
    bins = torch.stack([diagonal_end_bins(x, convention=convention) for x in states])
    assert bins.shape == (5, 3, 4, 3)
    batched = delta_log_amplitudes(bins)  # every state in one call
    assert batched.dtype == torch.float64 and batched.shape == (5, )
    for x, value in zip(states, batched.tolist()):
        assert value == pytest.approx(delta_log_amplitude(x, convention), abs=1e-6)


def test_end_bins_by_hand():
    # F(0, 0) = the sum; at the Nyquist bin of an even map F(k, k) = Σ (-1)^(y + x) x[y, x]
    i = torch.arange(4)
    board = (-1.0)**(i[:, None] + i[None, :])
    maps = (2.0 + 3.0 * board).reshape(1, 1, 4, 4)
    bins = diagonal_end_bins(maps)
    assert torch.allclose(bins, torch.tensor([[[32.0, 48.0, 0.0]]]), atol=1e-4)


def test_end_bins_of_tokens_read_the_patch_grid_in_place():
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randn(2, 1 + 16, 6, generator=gen)  # a class token and a 4 x 4 grid
    maps = tokens_to_maps(tokens, num_extra_tokens=1)
    assert torch.allclose(
        diagonal_end_bins(tokens, num_extra_tokens=1), diagonal_end_bins(maps), atol=1e-5)
    with pytest.raises(ValueError, match='square grid'):
        diagonal_end_bins(torch.randn(2, 1 + 8, 6), num_extra_tokens=1, grid=(2, 4))
    with pytest.raises(ValueError, match='H == W'):
        diagonal_end_bins(torch.randn(1, 2, 4, 6))
    with pytest.raises(ValueError, match=r'\(\.\.\., B, C, 3\)'):
        delta_log_amplitudes(torch.randn(2, 4))


@pytest.mark.parametrize('shape, extra', [((3, 4, 8, 8), 0), ((3, 4, 4, 6), 0), ((3, 1 + 16, 8), 1),
                                          ((3, 1 + 8, 8), 1)])
def test_frequency_summary_equals_the_two_functions(shape, extra):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(*shape, generator=gen) + 0.5
    hf, bins = frequency_summary(x, num_extra_tokens=extra)
    assert torch.allclose(hf, high_frequency_ratio(x), rtol=1e-5)
    square = (x.dim() == 4 and shape[-1] == shape[-2]) or (x.dim() == 3 and shape[1] == 17)
    if square:
        assert torch.allclose(bins, diagonal_end_bins(x, num_extra_tokens=extra), atol=1e-5)
    else:
        assert bins is None  # a 4 x 6 map, or 8 patch tokens on no square grid
    # a map constant over its positions is all DC
    hf, _ = frequency_summary(torch.full((2, 3, 4, 4), 7.0))
    assert torch.equal(hf, torch.zeros(2))


def _softmax_maps(*shape, seed=0, sharpness=3.0):
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(sharpness * torch.randn(*shape, generator=gen), dim=-1)


def test_softmax_column_similarity_equals_the_general_function():
    for attn in (
            _softmax_maps(4, 3, 9, 9),
            _softmax_maps(3, 9, 9, seed=1),
            _softmax_maps(2, 2, 6, 6, sharpness=30.0),  # nearly one-hot rows
            torch.full((1, 2, 5, 5), 0.2)):  # uniform: every column the same
        expected = attention_column_cosine_similarity(attn)
        # float32 maps, float64 sums: within 1e-7 of the float64 pairwise cosines
        assert torch.allclose(softmax_column_cosine_similarity(attn), expected, atol=1e-7)
    assert float(softmax_column_cosine_similarity(torch.full((1, 5, 5), 0.2))) == \
        pytest.approx(1.0)
    # a column no query attends to is a zero vector: cosine 0 with every other column
    attn = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert float(softmax_column_cosine_similarity(attn)) == pytest.approx(
        float(attention_column_cosine_similarity(attn)))
    # columns (.5, 1, 0), (.5, 0, 1), 0: cos 0.25 / 1.25 for the first pair, 0 for the others
    assert float(softmax_column_cosine_similarity(attn)) == pytest.approx(0.2 / 3)


def test_softmax_column_similarity_is_for_non_negative_maps_only():
    # with a negative entry |cos| != cos: the general function is the one to use
    attn = torch.tensor([[[1.0, -1.0], [1.0, 1.0]]])
    assert float(attention_column_cosine_similarity(attn)) == pytest.approx(0.0)
    assert float(softmax_column_cosine_similarity(attn)) == pytest.approx(0.0, abs=1e-7)
    attn = torch.tensor([[[1.0, -1.0], [0.0, 1.0]]])  # columns (1, 0), (-1, 1): |cos| = 1/√2
    assert float(attention_column_cosine_similarity(attn)) == pytest.approx(1 / math.sqrt(2))
    assert float(softmax_column_cosine_similarity(attn)) == pytest.approx(-1 / math.sqrt(2))


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_stiffness_norms_of_low_precision_states_are_float32_and_exact(dtype):
    # under autocast the states are float16 / bfloat16; the norms are taken in float32 of
    # the states as they are
    gen = torch.Generator().manual_seed(3)
    x_t = torch.randn(4, 3, 5, 5, generator=gen).to(dtype)
    x_next = (x_t.float() + 0.01 * torch.randn(4, 3, 5, 5, generator=gen)).to(dtype)
    slope, state = stiffness_norms(x_t, x_next)
    assert slope.dtype == state.dtype == torch.float32
    reference = stiffness_norms(x_t.float(), x_next.float())
    assert torch.allclose(slope, reference.slope, rtol=1e-6)
    assert torch.allclose(state, reference.state, rtol=1e-6)
