"""Block-circulant linear layer, the Θ of augmented shortcuts (METHODS.md §9).

A block-circulant matrix is a grid of ``P × Q`` blocks, each a ``b × b`` circulant matrix: block
``(I, J)`` is fully described by one vector ``c[I, J] ∈ R^b`` and holds
``C[i, j] = c[I, J, (i - j) mod b]`` (the convention of ``scipy.linalg.circulant``: ``c`` is the
first column). A ``d_out × d_in`` layer then has ``d_out · d_in / b`` parameters instead of
``d_out · d_in``.

The forward pass expands the vectors into the dense matrix once (a single gather of
``d_out · d_in`` entries, negligible next to the token matmul) and calls one dense
``F.linear``, which keeps the fast BLAS kernel; :func:`block_circulant_matrix` is that expansion
as a pure function.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def circulant_index(block_size):
    """Index matrix ``(b, b)`` with entry ``(i - j) mod b``: ``c[index]`` is the circulant of ``c``."""
    rows = torch.arange(block_size)
    return (rows[:, None] - rows[None, :]) % block_size


def block_circulant_index(out_blocks, in_blocks, block_size):
    """Flat gather index ``(P·b, Q·b)`` into the ``(P, Q, b)`` vectors of a block-circulant matrix.

    Entry ``(I·b + i, J·b + j)`` points at ``c[I, J, (i - j) mod b]`` of the flattened vectors.
    """
    local = circulant_index(block_size)  # (b, b)
    block = torch.arange(out_blocks * in_blocks).view(out_blocks, in_blocks) * block_size
    index = block[:, None, :, None] + local[None, :, None, :]  # (P, b, Q, b)
    return index.reshape(out_blocks * block_size, in_blocks * block_size)


def block_circulant_matrix(vectors):
    """Dense ``(P·b, Q·b)`` matrix of the block-circulant matrix given by ``vectors`` ``(P, Q, b)``."""
    out_blocks, in_blocks, block_size = vectors.shape
    index = block_circulant_index(out_blocks, in_blocks, block_size).to(vectors.device)
    return vectors.reshape(-1)[index]


class CirculantLinear(nn.Module):
    """``y = x Θᵀ + bias`` with a block-circulant ``Θ`` (augmented shortcuts, METHODS.md §9).

    The block size follows the public implementation of augmented shortcuts: the smaller of the
    two feature sizes is cut into ``num_blocks`` circulant blocks, so ``b = min(d_in, d_out) /
    num_blocks`` and the grid is ``(d_out / b) × (d_in / b)``.

    Args:
        in_features (int): input size ``d_in``.
        out_features (int): output size ``d_out``.
        num_blocks (int): number of circulant blocks along the smaller side. Default 4.
        bias (bool): add a learnable bias. Default True.

    Parameters:
        weight_vectors: ``(d_out / b, d_in / b, b)``, one generating vector per block.
        bias: ``(d_out,)`` or None.

    Initialisation matches :class:`torch.nn.Linear`: uniform in ``±1/sqrt(d_in)``.
    """

    def __init__(self, in_features, out_features, num_blocks=4, bias=True):
        super().__init__()
        for name, value in (('in_features', in_features), ('out_features', out_features),
                            ('num_blocks', num_blocks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'{name}={value!r} is not supported; expected a positive int')
        smaller = min(in_features, out_features)
        if smaller % num_blocks:
            raise ValueError(f'num_blocks={num_blocks} does not divide min(in_features, '
                             f'out_features)={smaller}; expected a divisor of {smaller}')
        self.block_size = smaller // num_blocks
        for name, value in (('in_features', in_features), ('out_features', out_features)):
            if value % self.block_size:
                raise ValueError(f'{name}={value} is not a multiple of the circulant block size '
                                 f'{self.block_size} (= min(in_features, out_features) / '
                                 f'num_blocks); expected a multiple of {self.block_size}')
        self.in_features = in_features
        self.out_features = out_features
        self.num_blocks = num_blocks
        out_blocks = out_features // self.block_size
        in_blocks = in_features // self.block_size
        self.weight_vectors = nn.Parameter(torch.empty(out_blocks, in_blocks, self.block_size))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.register_buffer('index', block_circulant_index(out_blocks, in_blocks,
                                                            self.block_size), persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight_vectors, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    @property
    def weight(self):
        """The dense ``(d_out, d_in)`` matrix Θ, expanded from :attr:`weight_vectors`."""
        return self.weight_vectors.reshape(-1)[self.index]

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f'in_features={self.in_features}, out_features={self.out_features}, '
                f'block_size={self.block_size}, bias={self.bias is not None}')
