"""The MSA branch of a ViT block without its attention matrix (docs/methods.md §13, reading B).

``f(h) = W_o (W_v h + b_v) + b_o`` from the value rows of mmpretrain's fused ``qkv`` and its
``proj``, so ViT checkpoints load unchanged (the query and key rows load and go unused).
"""
from typing import List, Union

import torch
import torch.nn.functional as F
from mmpretrain.models.utils import MultiheadAttention

from .feat_scale import FeatScale
from .scaled_projection import folded_scales, projected_output


class ValueBranch(MultiheadAttention):
    """``f(h) = LayerScale(W_o (W_v h + b_v) + b_o)``: the MSA branch with no attention matrix.

    Args:
        embed_dims (int): token width ``C``.
        num_heads (int): kept for the parameter layout of ``MultiheadAttention``; the branch
            does not depend on it.
        attn_drop (float): accepted and unused (no attention matrix). Default 0.
        proj_drop (float): dropout after the output projection. Default 0.
        dropout_layer (dict): drop-path / dropout on the branch output, as
            ``MultiheadAttention``.
        qkv_bias (bool): whether ``qkv`` has a bias (its value part is used). Default True.
        layer_scale_init_value (float): LayerScale ``γ`` init; 0 disables it. Default 0.
        feat_scale (bool): FeatScale (docs/methods.md §7) on the projected output, before
            LayerScale and drop-path, as in :class:`StepMultiheadAttention`. Default False.
        init_cfg (dict, optional): MMEngine initialisation config.
    """

    #: ``'auto'``, True or False (the backbone's ``fused``): FeatScale folded into the
    #: output projection where it can be (:func:`~.scaled_projection.folded_scales`), or
    #: False: a layer of its own
    fold_scales = 'auto'

    def __init__(self, embed_dims: int, num_heads: int, attn_drop: float = 0.,
                 proj_drop: float = 0., dropout_layer: dict = dict(type='Dropout', drop_prob=0.),
                 qkv_bias: bool = True, layer_scale_init_value: Union[float, torch.Tensor] = 0.,
                 feat_scale: bool = False, init_cfg: Union[dict, List[dict], None] = None):
        super().__init__(embed_dims, num_heads, attn_drop=attn_drop, proj_drop=proj_drop,
                         dropout_layer=dropout_layer, qkv_bias=qkv_bias,
                         layer_scale_init_value=layer_scale_init_value, init_cfg=init_cfg)
        self.feat_scale = FeatScale(embed_dims) if feat_scale else None

    def value(self, h: torch.Tensor) -> torch.Tensor:
        """``W_v h + b_v`` from the value rows of the fused ``qkv`` projection."""
        c = self.embed_dims
        bias = self.qkv.bias
        return F.linear(h, self.qkv.weight[2 * c:], None if bias is None else bias[2 * c:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = projected_output(self, self.value(x), fold_feat=folded_scales(self)[1])
        return self.out_drop(self.gamma1(x))

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, attention matrix: none (value path only)'
