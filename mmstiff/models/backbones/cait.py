"""CaiT (Class-Attention in Image Transformers) with AttnScale and FeatScale per patch layer.

Touvron et al., "Going deeper with Image Transformers", ICCV 2021
(https://arxiv.org/abs/2103.17239); AttnScale and FeatScale in the patch layers as in the
anti-oversmoothing paper (docs/methods.md §6, §7). Parameter names are timm's ``Cait``'s.
"""
from collections.abc import Mapping
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmengine.model.weight_init import trunc_normal_
from mmengine.utils import to_2tuple
from mmpretrain.models.backbones.base_backbone import BaseBackbone
from mmpretrain.models.utils import resize_pos_embed

from mmstiff.models.layers.class_attention import ClassAttention
from mmstiff.models.layers.talking_heads import TalkingHeadsAttention
from mmstiff.models.steps import check_fused, set_fused
from mmstiff.models.utils import Fused, InitConfig, LayerSelection, select_layers
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_indices

OUT_TYPES = ('raw', 'cls_token', 'featmap', 'avg_featmap')
ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads')
#: optional arch keys and their defaults (MLP ratio 4, two class-attention layers, ε = 1e-5)
ARCH_DEFAULTS = dict(feedforward_channels=None, num_cls_layers=2, layer_scale_init_value=1e-5)


class CaiTMlp(nn.Module):
    """``fc2(drop(GELU(fc1 x)))`` followed by dropout (timm's ``Mlp`` names)."""

    def __init__(self, embed_dims: int, feedforward_channels: int, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, feedforward_channels)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(feedforward_channels, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class LayerScaleLayer(nn.Module):
    """The parts both CaiT layer kinds share: pre-norms, MLP, LayerScale ``γ₁, γ₂``, drop-path.

    Args:
        embed_dims (int): token width ``C``.
        attn (nn.Module): the attention of the first step.
        feedforward_channels (int): hidden width of the MLP.
        layer_scale_init_value (float): ``ε``, the initial value of every entry of ``γ``.
        drop_rate (float): dropout inside the MLP. Default 0.
        drop_path_rate (float): drop-path probability of both steps. Default 0.
        norm_cfg (dict): the pre-norms. Default ``LN`` with ``eps=1e-6``.
    """

    def __init__(self, embed_dims: int, attn: nn.Module, feedforward_channels: int,
                 layer_scale_init_value: float, drop_rate: float = 0., drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-6)):
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = attn
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = CaiTMlp(embed_dims, feedforward_channels, drop_rate)
        self.gamma_1 = nn.Parameter(torch.full((embed_dims, ), float(layer_scale_init_value)))
        self.gamma_2 = nn.Parameter(torch.full((embed_dims, ), float(layer_scale_init_value)))
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()


class CaiTLayer(LayerScaleLayer):
    """A patch layer: talking-heads self-attention step, then the MLP step, with LayerScale.

    Args:
        embed_dims, num_heads, feedforward_channels, layer_scale_init_value: the sizes and
            LayerScale ``ε``.
        drop_rate (float): dropout after the attention projection and inside the MLP.
        attn_drop_rate (float): dropout on the attention map.
        drop_path_rate (float): drop-path probability of both steps.
        qkv_bias (bool): bias of the ``qkv`` projection.
        norm_cfg (dict): the pre-norms.
        attn_scale (bool): AttnScale in this layer's attention.
        feat_scale (bool): FeatScale on this layer's attention output.
    """

    #: read by the trajectory recorders (mmstiff.analysis.blocks); the class-attention layers
    #: step another state (the class token) and stay out of the patch trajectory
    residual_kind = 'transformer'

    def __init__(self, embed_dims: int, num_heads: int, feedforward_channels: int,
                 layer_scale_init_value: float, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6), attn_scale: bool = False,
                 feat_scale: bool = False):
        attn = TalkingHeadsAttention(embed_dims, num_heads, qkv_bias=qkv_bias,
                                     attn_drop=attn_drop_rate, proj_drop=drop_rate,
                                     attn_scale=attn_scale, feat_scale=feat_scale)
        super().__init__(embed_dims, attn, feedforward_channels, layer_scale_init_value, drop_rate,
                         drop_path_rate, norm_cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.gamma_1 * self.attn(self.norm1(x)))
        return x + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))


class ClassAttentionLayer(LayerScaleLayer):
    """A class-attention layer: steps the class token, the patches are read, never changed.

    Args:
        embed_dims, num_heads, feedforward_channels, layer_scale_init_value: the sizes and
            LayerScale ``ε``.
        qkv_bias (bool): bias of the ``q``, ``k``, ``v`` projections.
        norm_cfg (dict): the pre-norms.
    """

    def __init__(self, embed_dims: int, num_heads: int, feedforward_channels: int,
                 layer_scale_init_value: float, qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6)):
        attn = ClassAttention(embed_dims, num_heads, qkv_bias=qkv_bias)
        super().__init__(embed_dims, attn, feedforward_channels, layer_scale_init_value,
                         norm_cfg=norm_cfg)

    def forward(self, cls_token: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        """``cls_token`` (B, 1, C) and ``patches`` (B, n, C) -> the next class token."""
        tokens = torch.cat((cls_token, patches), dim=1)
        cls_token = cls_token + self.drop_path(self.gamma_1 * self.attn(self.norm1(tokens)))
        return cls_token + self.drop_path(self.gamma_2 * self.mlp(self.norm2(cls_token)))


class ConvPatchEmbed(nn.Module):
    """Non-overlapping ``patch_size`` patches by one strided convolution (``proj``)."""

    def __init__(self, in_channels: int, embed_dims: int, patch_size: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dims, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """Images (B, 3, H, W) -> tokens (B, h·w, C) and the patch grid ``(h, w)``."""
        x = self.proj(x)
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def _check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f'{name}={value!r} is not supported; expected a number in [0, 1)')
    return float(value)


@MODELS.register_module()
class CaiT(BaseBackbone):
    """CaiT with AttnScale / FeatScale switchable per patch layer (see the module docstring).

    Args:
        arch (str | dict): a preset of :attr:`arch_zoo` (``'xxs24'``, ``'xxs36'``, ``'xs24'``,
            ``'s24'``, ``'s36'``, ``'m36'``, ``'m48'``; the paper's names without the
            resolution) or a dict with ``embed_dims``, ``num_layers`` (patch layers),
            ``num_heads`` and optionally ``feedforward_channels`` (default 4 · embed_dims),
            ``num_cls_layers`` (default 2) and ``layer_scale_init_value`` (default 1e-5).
            Default ``'s24'``.
        img_size (int | tuple): training input size; sets the position embedding. Inputs of
            another size get a resized embedding (``interpolate_mode``). Default 224.
        patch_size (int): Default 16.
        in_channels (int): Default 3.
        out_indices (int | Sequence[int]): patch layers whose output is returned; negative
            indices count from the end. The last patch layer's output is the one after the
            class-attention layers and the final norm, ``norm([c; x])``, as in timm. Default -1.
        out_type (str): ``'cls_token'`` (B, C) (last layer only), ``'featmap'`` (B, C, h, w)
            patches, ``'avg_featmap'`` (B, C) mean of the patches (timm's ``global_pool='avg'``)
            or ``'raw'`` (B, n, C) tokens (``1 + n`` at the last layer). Default
            ``'cls_token'``.
        drop_rate (float): dropout after the position embedding, the attention projection and
            inside the MLP of the patch layers. Default 0.
        attn_drop_rate (float): attention-map dropout of the patch layers. Default 0.
        drop_path_rate (float): drop-path probability of every patch layer (uniform across
            depth, as CaiT; the class-attention layers have none). Default 0.
        qkv_bias (bool): Default True.
        norm_cfg (dict): Default ``dict(type='LN', eps=1e-6)``.
        layer_scale_init_value (float, optional): LayerScale ``ε``; None takes the arch's
            (1e-5 up to 24 layers, 1e-6 deeper, as the paper).
        interpolate_mode (str): position-embedding resizing mode. Default ``'bicubic'``.
        frozen_stages (int): the patch embedding, the position embedding and patch layers
            ``1 .. frozen_stages`` stop training and stay in eval mode; with all of them
            frozen, the class token, the class-attention layers and the final norm too (as
            mmpretrain's ``VisionTransformer``). -1 (default) freezes nothing.
        attn_scale_layers: patch layers with AttnScale (ω init 0): None (default), ``'all'``,
            or a sequence of layer indices (negative ones count from the end).
        feat_scale_layers: patch layers with FeatScale (s, t init 0), the same way.
        fused (str | bool): ``'auto'`` (default) or True: AttnScale and FeatScale folded into
            the attention's output projection in training (True: always), or False: applied as
            layers of their own (docs/methods.md §7, "Folded into the projection").
        init_cfg (dict | list, optional): Default: timm's initialisation (truncated normal
            σ = 0.02 for linear weights, zero biases, unit LayerNorms; class token and position
            embedding truncated normal σ = 0.02 in :meth:`init_weights`).

    Attention maps of the patch layers are available through
    :func:`mmstiff.models.layers.attn_scale.record_attention_maps`.
    """

    arch_zoo = {
        'xxs24': dict(embed_dims=192, num_layers=24, num_heads=4, layer_scale_init_value=1e-5),
        'xxs36': dict(embed_dims=192, num_layers=36, num_heads=4, layer_scale_init_value=1e-5),
        'xs24': dict(embed_dims=288, num_layers=24, num_heads=6, layer_scale_init_value=1e-5),
        's24': dict(embed_dims=384, num_layers=24, num_heads=8, layer_scale_init_value=1e-5),
        's36': dict(embed_dims=384, num_layers=36, num_heads=8, layer_scale_init_value=1e-6),
        'm36': dict(embed_dims=768, num_layers=36, num_heads=16, layer_scale_init_value=1e-6),
        'm48': dict(embed_dims=768, num_layers=48, num_heads=16, layer_scale_init_value=1e-6),
    }
    #: the patch-layer states the trajectory recorders see carry no class token
    num_extra_tokens = 0

    def __init__(self, arch: Union[str, Mapping] = 's24',
                 img_size: Union[int, Tuple[int, int]] = 224, patch_size: int = 16,
                 in_channels: int = 3, out_indices: Union[int, Sequence[int]] = -1,
                 out_type: str = 'cls_token', drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 layer_scale_init_value: Optional[float] = None,
                 interpolate_mode: str = 'bicubic', frozen_stages: int = -1,
                 attn_scale_layers: LayerSelection = None,
                 feat_scale_layers: LayerSelection = None, fused: Fused = 'auto',
                 init_cfg: InitConfig = [
                     dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
                     dict(type='Constant', layer='LayerNorm', val=1., bias=0.)
                 ]):  # yapf: disable (it splits inside the annotations and defaults)
        super().__init__(init_cfg=init_cfg)
        fused = check_fused(fused)
        self.arch_settings = self._arch_settings(arch)
        if layer_scale_init_value is not None:
            self.arch_settings['layer_scale_init_value'] = layer_scale_init_value
        eps = self.arch_settings['layer_scale_init_value']
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
            raise ValueError(f'layer_scale_init_value={eps!r} is not supported; expected a '
                             'positive number (CaiT: 1e-5 up to 24 layers, 1e-6 deeper)')
        self.embed_dims = self.arch_settings['embed_dims']
        self.num_layers = self.arch_settings['num_layers']
        num_heads = self.arch_settings['num_heads']
        feedforward_channels = self.arch_settings['feedforward_channels'] or 4 * self.embed_dims
        drop_rate = _check_rate('drop_rate', drop_rate)
        attn_drop_rate = _check_rate('attn_drop_rate', attn_drop_rate)
        drop_path_rate = _check_rate('drop_path_rate', drop_path_rate)
        if out_type not in OUT_TYPES:
            raise ValueError(f'out_type={out_type!r} is not supported; expected one of '
                             f'{OUT_TYPES}')
        self.out_type = out_type
        self.out_indices = self._check_out_indices(out_indices)
        if out_type == 'cls_token' and self.out_indices != [self.num_layers - 1]:
            raise ValueError(f'out_indices={out_indices!r} is not supported with '
                             "out_type='cls_token': the class token exists only after the last "
                             f'patch layer; expected -1 or {self.num_layers - 1}')
        self.interpolate_mode = interpolate_mode

        img_size = to_2tuple(img_size)
        if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size < 1 \
                or img_size[0] % patch_size or img_size[1] % patch_size:
            raise ValueError(f'patch_size={patch_size!r} is not supported with img_size='
                             f'{img_size}; expected a positive int dividing both sides')
        self.patch_resolution = (img_size[0] // patch_size, img_size[1] // patch_size)
        self.patch_embed = ConvPatchEmbed(in_channels, self.embed_dims, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        num_patches = self.patch_resolution[0] * self.patch_resolution[1]
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, self.embed_dims))
        self.drop_after_pos = nn.Dropout(p=drop_rate)
        self._register_load_state_dict_pre_hook(self._prepare_pos_embed)

        attn_scale = select_layers('attn_scale_layers', attn_scale_layers, self.num_layers)
        feat_scale = select_layers('feat_scale_layers', feat_scale_layers, self.num_layers)
        self.blocks = nn.Sequential(*[
            CaiTLayer(self.embed_dims, num_heads, feedforward_channels, eps, drop_rate=drop_rate,
                      attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate,
                      qkv_bias=qkv_bias, norm_cfg=norm_cfg, attn_scale=i in attn_scale, feat_scale=i
                      in feat_scale) for i in range(self.num_layers)
        ])
        self.blocks_token_only = nn.ModuleList([
            ClassAttentionLayer(self.embed_dims, num_heads, feedforward_channels, eps,
                                qkv_bias=qkv_bias, norm_cfg=norm_cfg)
            for _ in range(self.arch_settings['num_cls_layers'])
        ])
        self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        if (isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int)
                or not -1 <= frozen_stages <= self.num_layers):
            raise ValueError(f'frozen_stages={frozen_stages!r} is not supported; expected an '
                             f'int in [-1, {self.num_layers}] (patch layers)')
        self.frozen_stages = frozen_stages
        set_fused(self, fused)
        self._freeze_stages()

    def frozen_modules(self) -> Tuple[List[nn.Module], List[nn.Parameter]]:
        """The modules (and parameters) that ``frozen_stages`` stops training."""
        if self.frozen_stages < 1:
            return [], []
        modules = [self.patch_embed] + list(self.blocks[:self.frozen_stages])
        params = [self.pos_embed]
        if self.frozen_stages == self.num_layers:
            modules += list(self.blocks_token_only) + [self.norm]
            params.append(self.cls_token)
        return modules, params

    def _freeze_stages(self):
        modules, params = self.frozen_modules()
        for module in modules:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False
        for param in params:
            param.requires_grad = False

    def train(self, mode: bool = True) -> 'CaiT':
        super().train(mode)
        self._freeze_stages()  # frozen layers keep eval mode (no dropout, no drop path)
        return self

    def _arch_settings(self, arch):
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'arch={arch!r} is not supported; expected one of '
                                 f'{sorted(self.arch_zoo)} or a dict')
            return dict(ARCH_DEFAULTS, **self.arch_zoo[arch.lower()])
        if not isinstance(arch, Mapping) or not set(ARCH_KEYS) <= set(arch) \
                or not set(arch) <= set(ARCH_KEYS) | set(ARCH_DEFAULTS):
            raise ValueError(f'arch={arch!r} is not supported; expected a preset name or a '
                             f'dict with keys {ARCH_KEYS} and optionally '
                             f'{tuple(ARCH_DEFAULTS)}')
        for key in ARCH_KEYS:
            value = arch[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'arch[{key!r}]={value!r} is not supported; expected a positive '
                                 f'int (arch={dict(arch)!r})')
        return dict(ARCH_DEFAULTS, **arch)

    def _check_out_indices(self, out_indices):
        single = isinstance(out_indices, int) and not isinstance(out_indices, bool)
        indices = check_indices('out_indices', [out_indices] if single else out_indices,
                                self.num_layers, what='patch layers', alternatives=('an int', ))
        if not indices:
            raise ValueError('out_indices=[] is not supported; expected at least one index')
        return sorted(indices)

    def init_weights(self) -> None:
        super().init_weights()
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            return
        trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self.cls_token, std=.02)

    def _prepare_pos_embed(self, state_dict, prefix, *args, **kwargs):
        """Resize a checkpoint's (square) position embedding to this backbone's patch grid."""
        name = prefix + 'pos_embed'
        if name not in state_dict or state_dict[name].shape == self.pos_embed.shape:
            return
        num_patches = state_dict[name].shape[1]
        side = int(round(num_patches**0.5))
        if side * side != num_patches:
            return  # not a square grid: left to the shape check of load_state_dict
        state_dict[name] = resize_pos_embed(state_dict[name], (side, side), self.patch_resolution,
                                            self.interpolate_mode, num_extra_tokens=0)

    def class_attention(self, patches: torch.Tensor) -> torch.Tensor:
        """Run the class-attention layers on ``patches``; returns ``norm([c; x])``."""
        cls_token = self.cls_token.expand(patches.shape[0], -1, -1)
        for layer in self.blocks_token_only:
            cls_token = layer(cls_token, patches)
        return self.norm(torch.cat((cls_token, patches), dim=1))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x, patch_resolution = self.patch_embed(x)
        x = x + resize_pos_embed(self.pos_embed, self.patch_resolution, patch_resolution,
                                 mode=self.interpolate_mode, num_extra_tokens=0)
        x = self.drop_after_pos(x)
        outs = []
        last = self.num_layers - 1
        for i, layer in enumerate(self.blocks):
            x = layer(x)
            if i == last:
                x = self.class_attention(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, patch_resolution, extra=int(i == last)))
        return tuple(outs)

    def _format_output(self, x, hw, extra):
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, extra:]
        if self.out_type == 'featmap':
            B = x.shape[0]
            return patches.reshape(B, *hw, -1).permute(0, 3, 1, 2)
        return patches.mean(dim=1)
