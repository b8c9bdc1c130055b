"""Talking-heads self-attention (CaiT's patch layers) with optional AttnScale and FeatScale.

AttnScale goes after the post-softmax head mixing, FeatScale on the projected output
(docs/methods.md §6, §7). Parameter names are timm's ``TalkingHeadAttn``'s.
"""
import torch
import torch.nn as nn

from mmstiff.utils.checks import check_positive_int
from .attn_scale import AttentionMapMixin, AttnScale
from .feat_scale import FeatScale
from .scaled_projection import folded_scales, projected_output


def mix_heads(proj: nn.Module, attn: torch.Tensor) -> torch.Tensor:
    """Apply the linear map ``proj`` (H -> H) along the head axis of maps ``(B, H, n, n)``."""
    return proj(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class TalkingHeadsAttention(nn.Module, AttentionMapMixin):
    """Multi-head self-attention with talking heads, optional AttnScale and FeatScale.

    Args:
        embed_dims (int): token width ``C``.
        num_heads (int): number of heads ``H``; must divide ``embed_dims``.
        qkv_bias (bool): bias of the ``qkv`` projection. Default True.
        attn_drop (float): dropout on the attention map. Default 0.
        proj_drop (float): dropout after the output projection. Default 0.
        attn_scale (bool): add per-head ω (after ``proj_w``). Default False.
        feat_scale (bool): add per-channel s, t on the projected output. Default False.
    """

    #: ``'auto'``, True or False (the backbone's ``fused``): AttnScale and FeatScale folded
    #: into the output projection where they can be
    #: (:func:`~.scaled_projection.folded_scales`), or False: layers of their own
    fold_scales = 'auto'

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0., attn_scale: bool = False,
                 feat_scale: bool = False):
        super().__init__()
        check_positive_int('embed_dims', embed_dims)
        check_positive_int('num_heads', num_heads)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims={embed_dims} is not a multiple of '
                             f'num_heads={num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.scale = self.head_dims**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj_l = nn.Linear(num_heads, num_heads)
        self.proj_w = nn.Linear(num_heads, num_heads)
        self.attn_drop = float(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.attn_scale = AttnScale(num_heads) if attn_scale else None
        self.feat_scale = FeatScale(embed_dims) if feat_scale else None

    def mixed_attention(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``A = P_w softmax(P_l q kᵀ / √d)`` of queries and keys ``(B, H, n, d)``."""
        logits = (q * self.scale) @ k.transpose(-2, -1)
        return mix_heads(self.proj_w, mix_heads(self.proj_l, logits).softmax(dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = self.mixed_attention(q, k)
        attn_drop = self.attn_drop if self.training else 0.
        explicit = self.attn_scale is not None and (self.keep_attn_map or attn_drop > 0)
        if explicit:
            attn = self.attn_scale.scale_matrix(attn)
        if self.keep_attn_map:
            self._store_attn_map(attn)
        if attn_drop > 0:
            attn = torch.dropout(attn, attn_drop, True)
        x = attn @ v
        fold_attn, fold_feat = folded_scales(self, explicit)
        if self.attn_scale is not None and not explicit and not fold_attn:
            x = self.attn_scale(x, v)
        return projected_output(self, x.transpose(1, 2).reshape(B, N, C), v, fold_attn, fold_feat)

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, num_heads={self.num_heads}'
