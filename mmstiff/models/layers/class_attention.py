"""Class attention: the class token attends to itself and the patches (CaiT, §3).

CaiT (Touvron et al., 2021, https://arxiv.org/abs/2103.17239) inserts the class token only after
the patch layers. A class-attention layer updates the class token alone: with
``z = [x_cls; x_patches]``,

    q = W_q x_cls,   k = W_k z,   v = W_v z,   out = softmax(q kᵀ / √d) v,

a single query row per head, so the fused ``scaled_dot_product_attention`` kernel is used.
Parameter names are timm's ``ClassAttn`` (``q``, ``k``, ``v``, ``proj``).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.utils.checks import check_positive_int


class ClassAttention(nn.Module):
    """Multi-head attention of the class token over ``[class token; patches]``.

    Args:
        embed_dims (int): token width ``C``.
        num_heads (int): number of heads; must divide ``embed_dims``.
        qkv_bias (bool): bias of the ``q``, ``k``, ``v`` projections. Default True.
        attn_drop (float): dropout on the attention weights. Default 0.
        proj_drop (float): dropout after the output projection. Default 0.
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        check_positive_int('embed_dims', embed_dims)
        check_positive_int('num_heads', num_heads)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims={embed_dims} is not a multiple of '
                             f'num_heads={num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.k = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.attn_drop = float(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def _heads(self, x):
        B, N, _ = x.shape
        return x.reshape(B, N, self.num_heads, self.head_dims).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(B, 1 + n, C)``, the class token first; returns the update ``(B, 1, C)``."""
        B, _, C = x.shape
        q = self._heads(self.q(x[:, :1]))
        out = F.scaled_dot_product_attention(q, self._heads(self.k(x)), self._heads(self.v(x)),
                                             dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(B, 1, C)))

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, num_heads={self.num_heads}'
