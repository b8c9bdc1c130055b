"""Augmented shortcuts: parallel learnable paths beside the identity (docs/methods.md §9).

Augmented shortcuts for vision transformers (Tang et al., NeurIPS 2021), Eq. (6)/(10) and the
supplement:

    Z_{l+1} = Z_l + MSA(LN Z_l) + Σ_{i=1..T} σ(LN(Z_l) Θ_{l,i}),

with ``Θ_{l,i}`` block-circulant (:class:`~mmstiff.models.layers.circulant.CirculantLinear`) and
``σ = GELU``; the same is added beside the MLP branch. The public implementation uses ``T = 2``
and multiplies the whole sum (identity included) by 3/4; backbones expose that factor as an
option.

:class:`AugmentedShortcut` computes the ``T`` paths with a single matmul: their expanded
matrices are stacked into one ``(T·d, d)`` weight.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.utils.checks import check_positive_int
from .circulant import CirculantLinear

ACTIVATIONS = {'gelu': nn.GELU, 'relu': nn.ReLU, 'identity': nn.Identity}


class AugmentedShortcut(nn.Module):
    """``Σ_{i=1..T} σ(x Θ_i + b_i)`` for tokens ``x`` (..., d) (docs/methods.md §9).

    Args:
        channels (int): the token width ``d`` (input and output).
        num_paths (int): ``T``, the number of parallel paths. Default 2.
        num_blocks (int): circulant blocks per side of each ``Θ_i`` (block size
            ``d / num_blocks``). Default 4, as the public implementation.
        act (str): ``σ``: ``'gelu'`` (default), ``'relu'`` or ``'identity'``.
        bias (bool): learnable bias per path. Default True.
    """

    def __init__(self, channels: int, num_paths: int = 2, num_blocks: int = 4, act: str = 'gelu',
                 bias: bool = True):
        super().__init__()
        check_positive_int('num_paths', num_paths)
        if act not in ACTIVATIONS:
            raise ValueError(f'act={act!r} is not supported; expected one of '
                             f'{sorted(ACTIVATIONS)}')
        self.channels = channels
        self.num_paths = num_paths
        self.paths = nn.ModuleList(
            CirculantLinear(channels, channels, num_blocks=num_blocks, bias=bias)
            for _ in range(num_paths))
        self.act = ACTIVATIONS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.num_paths == 1:
            return self.act(self.paths[0](x))
        weight = torch.cat([path.weight for path in self.paths])
        bias = None
        if self.paths[0].bias is not None:
            bias = torch.cat([path.bias for path in self.paths])
        y = self.act(F.linear(x, weight, bias))
        return y.unflatten(-1, (self.num_paths, self.channels)).sum(dim=-2)

    def extra_repr(self) -> str:
        return f'channels={self.channels}, num_paths={self.num_paths}'
