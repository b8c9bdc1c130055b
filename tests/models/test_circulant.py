"""Block-circulant linear layer and augmented shortcuts (docs/methods.md §9)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.models.layers.aug_shortcut import AugmentedShortcut
from mmstiff.models.layers.circulant import CirculantLinear, block_circulant_matrix, circulant_index


def dense_by_loops(vectors):
    """The block-circulant matrix entry by entry: C[p b + i, q b + j] = c[p, q, (i - j) % b]."""
    P, Q, b = vectors.shape
    dense = torch.empty(P * b, Q * b, dtype=vectors.dtype)
    for p in range(P):
        for q in range(Q):
            for i in range(b):
                for j in range(b):
                    dense[p * b + i, q * b + j] = vectors[p, q, (i - j) % b]
    return dense


def test_circulant_index_is_a_circulant():
    # b = 3: the rows are successive right shifts of [0, 2, 1]
    assert circulant_index(3).tolist() == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]


def test_circulant_matches_scipy_convention():
    linalg = pytest.importorskip('scipy.linalg')
    c = torch.arange(5.)
    expected = torch.as_tensor(linalg.circulant(c.numpy()), dtype=torch.float32)
    assert torch.equal(block_circulant_matrix(c.view(1, 1, 5)), expected)


@pytest.mark.parametrize('shape', [(1, 1, 4), (2, 3, 4), (3, 2, 1), (2, 2, 5)])
def test_block_circulant_matrix_equals_loops(shape):
    vectors = torch.randn(*shape)
    assert torch.equal(block_circulant_matrix(vectors), dense_by_loops(vectors))


@pytest.mark.parametrize('in_features,out_features,num_blocks,bias', [(16, 16, 4, True),
                                                                      (8, 16, 2, True),
                                                                      (12, 6, 3, False),
                                                                      (10, 10, 1, True)])
def test_circulant_linear_equals_dense_linear(in_features, out_features, num_blocks, bias):
    torch.manual_seed(0)
    layer = CirculantLinear(in_features, out_features, num_blocks=num_blocks, bias=bias)
    b = min(in_features, out_features) // num_blocks
    assert layer.weight_vectors.shape == (out_features // b, in_features // b, b)

    dense = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        dense.weight.copy_(dense_by_loops(layer.weight_vectors))
        if bias:
            dense.bias.copy_(layer.bias)
    x = torch.randn(2, 5, in_features)
    torch.testing.assert_close(layer(x), dense(x))


def test_circulant_gradient_sums_over_tied_entries():
    torch.manual_seed(0)
    layer = CirculantLinear(6, 6, num_blocks=2)
    x = torch.randn(4, 6)
    (layer(x)**2).sum().backward()

    dense_weight = dense_by_loops(layer.weight_vectors.detach()).requires_grad_()
    (F.linear(x, dense_weight, layer.bias.detach())**2).sum().backward()
    # every vector entry c[I, J, k] is tied to the entries (I b + i, J b + j) with (i - j) % b == k
    b = layer.block_size
    expected = torch.zeros_like(layer.weight_vectors)
    for r in range(6):
        for c in range(6):
            expected[r // b, c // b, (r % b - c % b) % b] += dense_weight.grad[r, c]
    torch.testing.assert_close(layer.weight_vectors.grad, expected)


def test_circulant_init_bound_and_parameter_count():
    layer = CirculantLinear(64, 64, num_blocks=4)
    assert sum(p.numel() for p in layer.parameters()) == 64 * 64 // 16 + 64
    bound = 1 / 64**0.5
    assert layer.weight_vectors.abs().max() <= bound and layer.bias.abs().max() <= bound
    assert 'index' not in layer.state_dict()


@pytest.mark.parametrize('kwargs,field', [
    (dict(in_features=10, out_features=10, num_blocks=3), 'num_blocks=3'),
    (dict(in_features=8, out_features=10, num_blocks=2), 'out_features=10'),
    (dict(in_features=0, out_features=4), 'in_features=0'),
])
def test_circulant_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CirculantLinear(**kwargs)


@pytest.mark.parametrize('num_paths', [1, 2, 3])
def test_augmented_shortcut_is_the_sum_of_its_paths(num_paths):
    torch.manual_seed(0)
    aug = AugmentedShortcut(8, num_paths=num_paths, num_blocks=2)
    x = torch.randn(2, 3, 8)
    expected = sum(F.gelu(x @ dense_by_loops(p.weight_vectors).T + p.bias) for p in aug.paths)
    torch.testing.assert_close(aug(x), expected)


def test_augmented_shortcut_bad_config():
    with pytest.raises(ValueError, match='num_paths=0'):
        AugmentedShortcut(8, num_paths=0)
    with pytest.raises(ValueError, match="act='tanh'"):
        AugmentedShortcut(8, act='tanh')
