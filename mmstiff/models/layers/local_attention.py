"""Local (window) multi-head self-attention on convolutional feature maps, AlterNet's MSA.

Swin's window attention with one shared relative-position-bias table and no cyclic shift; maps
the window does not divide are padded and the padding masked as keys (docs/methods.md §10).
"""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch.types import Device

from mmstiff.utils.checks import check_positive_int
from .attn_scale import AttentionMapMixin


def relative_position_index(window_size: int) -> torch.Tensor:
    """``(N, N)`` index into the flattened ``(2w - 1)²`` bias table, ``N = w²``.

    Entry ``[i, j]`` is the offset of key ``j`` from query ``i``,
    ``(y_j - y_i + w - 1) · (2w - 1) + (x_j - x_i + w - 1)``, positions in row-major order.
    """
    w = window_size
    coords = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing='ij'))
    coords = coords.flatten(1)  # (2, N): y, x
    offset = coords[:, None, :] - coords[:, :, None] + w - 1  # (2, N, N): key - query
    return offset[0] * (2 * w - 1) + offset[1]


def window_padding(height: int, width: int, window_size: int) -> Tuple[int, int]:
    """``(pad_bottom, pad_right)`` that make a ``height × width`` map a multiple of the window."""
    return (-height) % window_size, (-width) % window_size


def padded_key_mask(height: int, width: int, window_size: int, dtype: torch.dtype = torch.float32,
                    device: Device = None) -> torch.Tensor:
    """Additive key mask ``(windows, 1, 1, N)`` of a zero-padded map: 0 at real positions,
    ``-inf`` at the padding. Windows in row-major order, as :class:`LocalSelfAttention` cuts."""
    pad_h, pad_w = window_padding(height, width, window_size)
    real = torch.zeros(height + pad_h, width + pad_w, dtype=torch.bool, device=device)
    real[:height, :width] = True
    w = window_size
    nh, nw = real.shape[0] // w, real.shape[1] // w
    real = real.view(nh, w, nw, w).permute(0, 2, 1, 3).reshape(nh * nw, 1, 1, w * w)
    mask = torch.zeros(real.shape, dtype=dtype, device=device)
    return mask.masked_fill(~real, float('-inf'))


class LocalSelfAttention(AttentionMapMixin, BaseModule):
    """Window multi-head self-attention of ``(B, C, H, W)`` maps with a relative position bias.

    Args:
        in_channels (int): channels ``C`` of the input map.
        out_channels (int, optional): channels of the output (the output projection's width).
            Default: ``in_channels``.
        num_heads (int): attention heads ``H``. Default 8.
        head_dim (int): channels per head ``d``; queries, keys and values have ``H · d``
            channels. Default 64.
        window_size (int): side ``w`` of the square windows. Default 7.
        proj_drop (float): dropout after the output projection. Default 0.
        init_cfg (dict, optional): mmengine init config.

    Parameters:
        qkv: 1×1 convolution ``C → 3 H d``, no bias.
        proj: 1×1 convolution ``H d → out_channels``, with bias.
        relative_position_bias_table: ``(2w - 1, 2w - 1)``, shared by all heads, initialised
            from N(0, 0.02²).

    Example:
        >>> attn = LocalSelfAttention(64, num_heads=2, head_dim=32, window_size=4)
        >>> attn(torch.rand(2, 64, 10, 12)).shape  # 10 is padded to 12 inside
        torch.Size([2, 64, 10, 12])
    """

    def __init__(self, in_channels: int, out_channels: Optional[int] = None, num_heads: int = 8,
                 head_dim: int = 64, window_size: int = 7, proj_drop: float = 0.,
                 init_cfg: Union[dict, List[dict], None] = None):
        super().__init__(init_cfg=init_cfg)
        check_positive_int('in_channels', in_channels)
        out_channels = in_channels if out_channels is None else out_channels
        check_positive_int('out_channels', out_channels)
        self.num_heads = check_positive_int('num_heads', num_heads)
        self.head_dim = check_positive_int('head_dim', head_dim)
        self.window_size = check_positive_int('window_size', window_size)
        if not 0 <= proj_drop < 1:
            raise ValueError(f'proj_drop={proj_drop!r} is not supported; expected a float in '
                             '[0, 1)')
        self.scale = head_dim**-0.5
        inner = num_heads * head_dim
        self.qkv = nn.Conv2d(in_channels, 3 * inner, 1, bias=False)
        self.proj = nn.Conv2d(inner, out_channels, 1)
        self.proj_drop = nn.Dropout(proj_drop)
        self.relative_position_bias_table = nn.Parameter(
            torch.randn(2 * window_size - 1, 2 * window_size - 1) * 0.02)
        self.register_buffer('relative_position_index', relative_position_index(window_size),
                             persistent=False)

    def relative_position_bias(self) -> torch.Tensor:
        """The ``(N, N)`` bias ``B`` added to every head's logits."""
        n = self.window_size**2
        return self.relative_position_bias_table.view(-1)[self.relative_position_index.view(
            -1)].view(n, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, height, width = x.shape
        w, heads, d = self.window_size, self.num_heads, self.head_dim
        pad_h, pad_w = window_padding(height, width, w)
        qkv = self.qkv(x)
        if pad_h or pad_w:
            qkv = F.pad(qkv, (0, pad_w, 0, pad_h))
        nh, nw = (height + pad_h) // w, (width + pad_w) // w
        # (B, 3 H d, nh w, nw w) -> 3 × (B · windows, H, N, d): 4-D, as the fused kernels take
        q, k, v = qkv.view(b, 3, heads, d, nh, w, nw,
                           w).permute(1, 0, 4, 6, 2, 5, 7, 3).reshape(3, b * nh * nw, heads, w * w,
                                                                      d).unbind(0)
        mask = self.relative_position_bias().to(q.dtype)
        if pad_h or pad_w:  # (windows, 1, N, N) per window, repeated over the batch
            mask = (mask + padded_key_mask(height, width, w, q.dtype, q.device)).repeat(b, 1, 1, 1)
        if self.keep_attn_map:
            attn = ((q * self.scale) @ k.transpose(-2, -1) + mask).softmax(dim=-1)
            self._store_attn_map(attn)
            out = attn @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        # (B · windows, H, N, d) -> (B, H d, nh w, nw w), cropped to the real map
        out = out.view(b, nh, nw, heads, w, w, d).permute(0, 3, 6, 1, 4, 2,
                                                          5).reshape(b, heads * d, nh * w,
                                                                     nw * w)[:, :, :height, :width]
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'num_heads={self.num_heads}, head_dim={self.head_dim}, '
                f'window_size={self.window_size}')
