"""M_feat, M_attn and the spectral response of attention maps against hand computation."""
import math

import numpy as np
import pytest
import torch

from mmstiff.analysis import (attention_column_cosine_similarity, attention_spectral_response,
                              token_cosine_similarity)


def test_token_cosine_similarity_by_hand():
    # pairs: (1,0)-(0,1): 0, (1,0)-(1,1): 1/√2, (0,1)-(1,1): 1/√2  -> mean √2/3
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    assert torch.allclose(
        token_cosine_similarity(x), torch.tensor([math.sqrt(2) / 3], dtype=torch.float64))
    # |cos| counts opposite tokens as similar (Eq. 76 takes the absolute value)
    assert float(token_cosine_similarity(torch.tensor([[1.0, 0.0], [-2.0, 0.0]]))) == \
        pytest.approx(1.0)
    with pytest.raises(ValueError, match='at least 2'):
        token_cosine_similarity(torch.ones(1, 1, 4))


def test_token_cosine_similarity_equals_the_pairwise_loop():
    """The Gram-matrix form against normalised vectors compared pair by pair, float64, with
    a zero token (cosine 0 with every other, as ``F.normalize`` makes it) and a tiny one."""
    torch.manual_seed(0)
    x = torch.randn(3, 7, 5)
    x[1, 2] = 0.0
    x[2, 4] *= 1e-20
    expected = []
    for sample in x.double():
        unit = torch.nn.functional.normalize(sample, dim=-1)
        pairs = [abs(float(unit[i] @ unit[j])) for i in range(7) for j in range(i + 1, 7)]
        expected.append(sum(pairs) / len(pairs))
    got = token_cosine_similarity(x)
    assert got.dtype == torch.float64
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-6)
    # float64 input stays float64 throughout
    assert torch.allclose(
        token_cosine_similarity(x.double()), torch.tensor(expected, dtype=torch.float64),
        atol=1e-12)


def test_attention_column_cosine_similarity_by_hand():
    head1 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]])
    # columns (1,0,0), (0,.5,.5), (0,.5,.5): cosines 0, 0, 1 -> 1/3; the identity head gives 0
    attn = torch.stack([head1, torch.eye(3)]).unsqueeze(0)  # (1, 2, 3, 3)
    assert torch.allclose(
        attention_column_cosine_similarity(attn), torch.tensor([1 / 6], dtype=torch.float64))
    # rows vs columns: a map whose rows are equal has distinct (orthogonal) columns
    rows_equal = torch.tensor([[1.0, 0.0], [1.0, 0.0]])[None, None]
    assert float(attention_column_cosine_similarity(rows_equal)) == pytest.approx(0.0)


def test_spectral_response_of_low_pass_all_pass_filters():
    n = 6
    uniform = torch.full((n, n), 1.0 / n)
    expected = torch.zeros(n, dtype=torch.float64)
    expected[0] = 1
    assert torch.allclose(attention_spectral_response(uniform), expected, atol=1e-12)
    assert torch.allclose(
        attention_spectral_response(torch.eye(n)), torch.ones(n, dtype=torch.float64))
    shift = torch.roll(torch.eye(n), 1, dims=1)  # a permutation: all-pass
    assert torch.allclose(attention_spectral_response(shift), torch.ones(n, dtype=torch.float64))


def test_spectral_response_matches_numpy_fft():
    gen = torch.Generator().manual_seed(0)
    attn = torch.softmax(torch.randn(2, 3, 5, 5, generator=gen), dim=-1)
    # Λ = F A F^H with the unitary DFT: fft over rows (axis -2), then ifft over columns
    a = attn.double().numpy()
    lam = np.fft.ifft(np.fft.fft(a, axis=-2, norm='ortho'), axis=-1, norm='ortho')
    expected = torch.from_numpy(np.linalg.norm(lam, axis=-1))
    assert torch.allclose(attention_spectral_response(attn), expected, atol=1e-10)


def test_token_cosine_similarity_ignores_an_enclosing_autocast():
    """Recorders read the states inside the model's autocast region: the Gram product stays in
    float32 there (a bfloat16 product is off by ~1e-2; a float16 one overflows to NaN on CUDA
    for norms above 256)."""
    torch.manual_seed(0)
    x = 40 * torch.randn(2, 9, 64)
    unit = torch.nn.functional.normalize(x.double(), dim=-1)
    cos = (unit @ unit.transpose(-1, -2)).abs()
    expected = (cos.sum(dim=(-1, -2)) - 9) / (9 * 8)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        got = token_cosine_similarity(x)
    assert torch.allclose(got, expected, atol=1e-6, rtol=0)
