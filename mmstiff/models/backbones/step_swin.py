"""Swin Transformer with AttnScale and FeatScale (docs/methods.md §6, §7).

AttnScale acts on the window attention's output in closed form; FeatScale on the merged MSA
output, as the public Swin code does. Parameter names are mmpretrain's ``SwinTransformer``'s,
and older Swin checkpoints load as into mmpretrain's class.
"""
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn.bricks.drop import DropPath
from mmpretrain.models.backbones.swin_transformer import SwinTransformer
from mmpretrain.models.utils.attention import ShiftWindowMSA, WindowMSA

from mmstiff.models.layers.attn_scale import AttentionMapMixin, AttnScale
from mmstiff.models.layers.feat_scale import FeatScale
from mmstiff.models.layers.scaled_projection import folded_scales, projected_output
from mmstiff.models.steps import check_fused, set_fused
from mmstiff.models.utils import Fused, LayerSelection, select_layers
from mmstiff.registry import MODELS


def upgrade_swin_state_dict(state_dict: Dict[str, Any], prefix: str, version: Optional[int],
                            last_stage: int) -> Dict[str, Any]:
    """Upgrade, in place, the keys under ``prefix`` of a ``SwinTransformer`` state dict saved
    at checkpoint ``version`` (None: unknown, as in mmcls 0.x files) to the current version 3,
    as mmpretrain's ``SwinTransformer._load_from_state_dict`` does:

    * before version 2 the output norm of the last stage was ``norm.*``; it is
      ``norm{last_stage}.*`` now;
    * before version 3 the shift-window masks were saved as ``attn_mask`` buffers; they are
      computed now, so those keys are dropped.
    """
    if version is None or version < 2:
        old = prefix + 'norm.'
        for key in [k for k in state_dict if k.startswith(old)]:
            state_dict[f'{prefix}norm{last_stage}.{key[len(old):]}'] = state_dict.pop(key)
    if version is None or version < 3:
        for key in [k for k in state_dict if k.startswith(prefix) and 'attn_mask' in k]:
            del state_dict[key]
    return state_dict


class StepWindowMSA(WindowMSA, AttentionMapMixin):
    """mmpretrain's :class:`WindowMSA` with optional AttnScale (per-head ω, init 0).

    Without AttnScale and while no attention map is recorded, the upstream forward runs
    unchanged. With AttnScale, the upstream attention ``A V`` plus the closed form, folded into
    the output projection in training (``fold_scales``); ``Â`` itself is formed only while
    recording attention maps, or in training with attention dropout (so that dropout acts on
    ``Â``).
    """

    #: ``'auto'``, True or False (the backbone's ``fused``): AttnScale folded into the
    #: output projection where it can be (:func:`folded_scales`), or False: a layer of its
    #: own
    fold_scales = 'auto'

    def __init__(self, embed_dims: int, window_size: Sequence[int], num_heads: int,
                 attn_scale: bool = False, **kwargs):
        super().__init__(embed_dims, window_size, num_heads, **kwargs)
        self.attn_scale = AttnScale(num_heads) if attn_scale else None

    def relative_position_bias(self) -> torch.Tensor:
        """The (H, n, n) relative position bias of the window."""
        n = self.window_size[0] * self.window_size[1]
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        return bias.view(n, n, -1).permute(2, 0, 1)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        explicit = self.keep_attn_map or (self.attn_scale is not None and self.training
                                          and self.attn_drop.p > 0)
        if self.attn_scale is None and not explicit:
            return super().forward(x, mask)
        B_, N, C = x.shape
        H = self.num_heads
        q, k, v = self.qkv(x).reshape(B_, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
        bias = self.relative_position_bias()  # (H, n, n)
        if mask is not None:  # (nW, n, n) -> windows grouped per image
            bias = bias + mask.unsqueeze(1)  # (nW, H, n, n)
            nW = mask.shape[0]
            q, k, v = (t.view(B_ // nW, nW, *t.shape[1:]) for t in (q, k, v))
        attn = (q * self.scale @ k.transpose(-2, -1) + bias).softmax(dim=-1)
        if explicit:
            if self.attn_scale is not None:
                attn = self.attn_scale.scale_matrix(attn)
            if self.keep_attn_map:
                self._store_attn_map(attn.reshape(B_, self.num_heads, N, N))
            out = self.attn_drop(attn) @ v
        else:  # eval, or no attention dropout
            out = attn @ v
        fold_attn, _ = folded_scales(self, explicit)
        if self.attn_scale is not None and not explicit and not fold_attn:
            out = self.attn_scale(out, v)
        x = out.reshape(B_, H, N, -1).transpose(1, 2).reshape(B_, N, C)
        return projected_output(self, x, v.reshape(B_, H, N, -1), fold_attn)


class StepShiftWindowMSA(ShiftWindowMSA):
    """mmpretrain's :class:`ShiftWindowMSA` on :class:`StepWindowMSA`, with optional FeatScale.

    Args:
        embed_dims, num_heads, window_size, **kwargs: as :class:`ShiftWindowMSA` (``window_msa``
            is fixed to :class:`StepWindowMSA`; the other keyword arguments reach it).
        attn_scale (bool): AttnScale in the window attention.
        feat_scale (bool): FeatScale on the merged MSA output (token mean over the feature map).
    """

    def __init__(self, embed_dims: int, num_heads: int, window_size: int, attn_scale: bool = False,
                 feat_scale: bool = False, **kwargs):
        super().__init__(embed_dims, num_heads, window_size, window_msa=StepWindowMSA,
                         attn_scale=attn_scale, **kwargs)
        if feat_scale and not isinstance(self.drop, (DropPath, nn.Identity)):
            raise ValueError(f'feat_scale=True needs a per-sample dropout_layer (DropPath), '
                             f'got {type(self.drop).__name__}; expected DropPath')
        self.feat_scale = FeatScale(embed_dims) if feat_scale else None

    def forward(self, query: torch.Tensor, hw_shape: Tuple[int, int]) -> torch.Tensor:
        x = super().forward(query, hw_shape)
        return x if self.feat_scale is None else self.feat_scale(x)


@MODELS.register_module()
class StepSwin(SwinTransformer):
    """Swin Transformer with AttnScale and FeatScale (docs/methods.md §6, §7).

    Every argument of mmpretrain's :class:`SwinTransformer` is accepted unchanged. Blocks are
    numbered across stages (Swin-S: 0..23); each switch takes ``None`` (off), ``'all'`` or a
    sequence of block indices (negative ones count from the end).

    Args:
        arch (str | dict): as :class:`SwinTransformer`, e.g. ``'small'``.
        attn_scale_layers: blocks with AttnScale (ω per head, init 0). Default None.
        feat_scale_layers: blocks with FeatScale (s, t per channel, init 0). Default None.
        fused (str | bool): ``'auto'`` (default) or True: AttnScale folded into the window
            attention's output projection in training (True: always), or False: applied as a
            layer of its own (docs/methods.md §7, "Folded into the projection"). FeatScale acts
            on the merged windows and stays a layer.
        **kwargs: the other arguments of :class:`SwinTransformer`.

    Attention maps per block and head, shape (batch · windows, H, n, n), are available through
    :func:`mmstiff.models.layers.attn_scale.record_attention_maps`.
    """

    def __init__(self, arch: Union[str, dict] = 'tiny', attn_scale_layers: LayerSelection = None,
                 feat_scale_layers: LayerSelection = None, fused: Fused = 'auto', **kwargs):
        fused = check_fused(fused)
        super().__init__(arch=arch, **kwargs)
        blocks = [block for stage in self.stages for block in stage.blocks]
        attn_scale = select_layers('attn_scale_layers', attn_scale_layers, len(blocks))
        feat_scale = select_layers('feat_scale_layers', feat_scale_layers, len(blocks))
        for i, block in enumerate(blocks):
            block.attn = self._rebuild_attention(block.attn, i in attn_scale, i in feat_scale)
        set_fused(self, fused)

    def train(self, mode: bool = True) -> 'StepSwin':
        """Upstream ``train`` (frozen stages, ``norm_eval``), returning the module as
        ``nn.Module.train`` does (mmpretrain's returns None)."""
        super().train(mode)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        """Upgrade an older checkpoint version (:func:`upgrade_swin_state_dict`), then load."""
        upgrade_swin_state_dict(state_dict, prefix, local_metadata.get('version'),
                                len(self.stages) - 1)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    @staticmethod
    def _rebuild_attention(old, attn_scale, feat_scale):
        """A :class:`StepShiftWindowMSA` with the settings (and drop-path module) of ``old``."""
        w_msa = old.w_msa
        if type(w_msa) is not WindowMSA:
            raise ValueError(f'window attention {type(w_msa).__name__} is not supported; '
                             'expected WindowMSA (leave window_msa in attn_cfgs unset)')
        if feat_scale and not isinstance(old.drop, (DropPath, nn.Identity)):
            raise ValueError(f'feat_scale needs a per-sample drop-path in every chosen block, '
                             f'got {type(old.drop).__name__}; expected DropPath')
        new = StepShiftWindowMSA(embed_dims=w_msa.embed_dims, num_heads=w_msa.num_heads,
                                 window_size=old.window_size, shift_size=old.shift_size,
                                 pad_small_map=old.pad_small_map, qkv_bias=w_msa.qkv.bias
                                 is not None, qk_scale=w_msa.scale, attn_drop=w_msa.attn_drop.p,
                                 proj_drop=w_msa.proj_drop.p, attn_scale=attn_scale,
                                 feat_scale=feat_scale)
        new.drop = old.drop  # keeps this block's drop-path rate
        return new
