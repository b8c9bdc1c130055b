"""ViT / DeiT with AttnScale, FeatScale, step-size adaptors and augmented shortcuts.

Each switch acts on its own set of layers: AttnScale and FeatScale (docs/methods.md §6, §7),
an adaptor on the MSA and/or MLP branch (§0, §1), the MSA without its attention matrix
(``replace_attention_layers``, §13 reading B) and augmented shortcuts (§9). Parameter names are
mmpretrain's ``VisionTransformer``'s; with the switches at their initial values the outputs
equal mmpretrain's.
"""
from collections.abc import Mapping
from typing import AbstractSet, Optional, Union

import numpy as np
import torch
from mmcv.cnn.bricks.transformer import FFN
from mmengine.model import ModuleList
from mmpretrain.models.backbones.vision_transformer import (TransformerEncoderLayer,
                                                            VisionTransformer)
from mmpretrain.models.utils import MultiheadAttention

from mmstiff.models.layers.attn_scale import AttentionMapMixin, AttnScale
from mmstiff.models.layers.aug_shortcut import AugmentedShortcut
from mmstiff.models.layers.feat_scale import FeatScale
from mmstiff.models.layers.scaled_projection import folded_scales, projected_output
from mmstiff.models.layers.value_branch import ValueBranch
from mmstiff.models.steps import StepBlock, build_adaptor, check_fused, resolve_adaptor, set_fused
from mmstiff.models.utils import Fused, LayerSelection, select_layers
from mmstiff.registry import MODELS

AUG_SHORTCUT_KEYS = ('num_paths', 'num_blocks', 'act', 'scale', 'branches')
BRANCHES = ('msa', 'mlp')


def check_replaced_layers(replaced: AbstractSet[int], msa_adaptor_layers: AbstractSet[int],
                          attn_scale_layers: AbstractSet[int]) -> None:
    """Check that every layer of ``replaced`` (StepNet on ViT, reading B) has an MSA adaptor
    and no AttnScale; all three are sets of layer indices.

    Raises:
        ValueError: naming ``replace_attention_layers``, the offending layers and the fix.
    """
    without_step = sorted(replaced - msa_adaptor_layers)
    if without_step:
        raise ValueError(
            f'replace_attention_layers holds the layers {without_step}, which have no '
            'msa_adaptor; expected each replaced layer to get one (the step size takes the '
            "attention's place): set msa_adaptor, e.g. dict(type='mmstiff.StepNetAdaptor') "
            "(dict(type='mmstiff.ConstantStep') for the attention-free control), and "
            'msa_adaptor_layers to include them')
    scaled = sorted(replaced & attn_scale_layers)
    if scaled:
        raise ValueError(f'replace_attention_layers and attn_scale_layers share the layers '
                         f'{scaled}; expected disjoint sets (a replaced layer has no attention '
                         'matrix to scale)')


def check_aug_shortcut(cfg: Optional[Mapping]) -> Optional[dict]:
    """Validate an ``aug_shortcut`` dict and fill its defaults (docs/methods.md §9)."""
    if cfg is None:
        return None
    if not isinstance(cfg, Mapping):
        raise ValueError(f'aug_shortcut={cfg!r} is not supported; expected None or a dict '
                         f'with keys among {AUG_SHORTCUT_KEYS}')
    unknown = set(cfg) - set(AUG_SHORTCUT_KEYS)
    if unknown:
        raise ValueError(f'aug_shortcut has unknown keys {sorted(unknown)}; expected keys '
                         f'among {AUG_SHORTCUT_KEYS}')
    cfg = dict(dict(num_paths=2, num_blocks=4, act='gelu', scale=1.0, branches=BRANCHES), **cfg)
    branches = cfg['branches']
    if isinstance(branches, str) or not set(branches) <= set(BRANCHES) or not branches:
        raise ValueError(f"aug_shortcut['branches']={branches!r} is not supported; expected "
                         f"a non-empty sequence drawn from {BRANCHES}")
    scale = cfg['scale']
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise ValueError(f"aug_shortcut['scale']={scale!r} is not supported; expected a "
                         'positive number (1.0: the paper\'s equation, 0.75: the public '
                         'implementation)')
    cfg['scale'] = float(scale)
    cfg['branches'] = tuple(branches)
    return cfg


class StepMultiheadAttention(MultiheadAttention, AttentionMapMixin):
    """mmpretrain's :class:`MultiheadAttention` with optional AttnScale and FeatScale.

    The fused ``scaled_dot_product_attention`` stays in use; AttnScale is applied to its output
    in closed form (docs/methods.md §6), and in training folded with FeatScale into the output
    projection (``fold_scales``; docs/methods.md §7). The explicit-matrix path (``Â``
    materialised) is taken only while attention maps are recorded, or in training with
    attention dropout and AttnScale (so that dropout acts on ``Â``, as in the paper). FeatScale
    acts on the projected output before LayerScale and drop-path (docs/methods.md §7).

    Args:
        embed_dims (int), num_heads (int), **kwargs: as :class:`MultiheadAttention`
            (``qk_scale`` is not supported).
        attn_scale (bool): add per-head ω. Default False.
        feat_scale (bool): add per-channel s, t. Default False.
    """

    #: ``'auto'``, True or False (the backbone's ``fused``): AttnScale and FeatScale folded
    #: into the output projection where they can be (:func:`folded_scales`), or False: applied
    #: as layers of their own (the reference)
    fold_scales = 'auto'

    def __init__(self, embed_dims: int, num_heads: int, attn_scale: bool = False,
                 feat_scale: bool = False, **kwargs):
        if kwargs.get('qk_scale') is not None:
            raise ValueError(f"qk_scale={kwargs['qk_scale']!r} is not supported; expected "
                             'None (the scale is head_dims ** -0.5)')
        super().__init__(embed_dims, num_heads, **kwargs)
        self.attn_scale = AttnScale(num_heads) if attn_scale else None
        self.feat_scale = FeatScale(embed_dims) if feat_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn_drop = self.attn_drop if self.training else 0.
        explicit = self.keep_attn_map or (self.attn_scale is not None and attn_drop > 0)
        if explicit:
            x = self._explicit_attention(q, k, v, attn_drop)
        else:
            x = self.scaled_dot_product_attention(q, k, v, dropout_p=attn_drop)
        fold_attn, fold_feat = folded_scales(self, explicit)
        if self.attn_scale is not None and not explicit and not fold_attn:
            x = self.attn_scale(x, v)
        x = x.transpose(1, 2).reshape(B, N, self.embed_dims)
        x = self.out_drop(self.gamma1(projected_output(self, x, v, fold_attn, fold_feat)))
        if self.v_shortcut:
            x = v.squeeze(1) + x
        return x

    def _explicit_attention(self, q, k, v, dropout_p):
        attn = (q @ k.transpose(-2, -1) * self.head_dims**-0.5).softmax(dim=-1)
        if self.attn_scale is not None:
            attn = self.attn_scale.scale_matrix(attn)
        if self.keep_attn_map:
            self._store_attn_map(attn)
        if dropout_p > 0:
            attn = torch.dropout(attn, dropout_p, True)
        return attn @ v


class StepTransformerEncoderLayer(StepBlock, TransformerEncoderLayer):
    """One ViT block as two Euler steps, with the switches of :class:`StepViT`.

    Args:
        (upstream args): as mmpretrain's :class:`TransformerEncoderLayer`.
        attn_scale (bool): AttnScale in this block's attention.
        feat_scale (bool): FeatScale on this block's MSA output.
        msa_adaptor (dict, optional): step-size adaptor config for the MSA branch, built with
            ``channels=embed_dims, layout='nlc'``; ``Δ = adaptor(x, f)`` scales the branch
            output ``f`` (after drop-path / LayerScale).
        mlp_adaptor (dict, optional): the same for the MLP branch.
        replace_attention (bool): drop the attention matrix of the MSA branch, which becomes
            :class:`ValueBranch`, ``f = proj(V(LN1 x))`` (StepNet on ViT, reading B, module
            docstring); needs ``msa_adaptor`` and excludes ``attn_scale``. Default False.
        aug_shortcut (dict, optional): checked by :func:`check_aug_shortcut`; the paths read
            the branch's LN output and are added beside the identity, outside the step size:
            ``x' = scale · (x + Σ_i σ(LN(x) Θ_i) + Δ ⊙ f)``.
    """

    step_layout = 'nlc'

    def __init__(self, embed_dims: int, num_heads: int, feedforward_channels: int,
                 layer_scale_init_value: Union[float, torch.Tensor] = 0., drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0., num_fcs: int = 2,
                 qkv_bias: bool = True, ffn_type: str = 'origin', act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'), attn_scale: bool = False,
                 feat_scale: bool = False, msa_adaptor: Optional[dict] = None,
                 mlp_adaptor: Optional[dict] = None, replace_attention: bool = False,
                 aug_shortcut: Optional[dict] = None, init_cfg: Optional[dict] = None):
        if replace_attention and msa_adaptor is None:
            raise ValueError('replace_attention=True needs an msa_adaptor (the step size that '
                             "takes the attention's place), got msa_adaptor=None; expected e.g. "
                             "dict(type='mmstiff.StepNetAdaptor')")
        if replace_attention and attn_scale:
            raise ValueError('attn_scale=True is not supported with replace_attention=True; '
                             'expected attn_scale=False (there is no attention matrix to scale)')
        super().__init__(embed_dims, num_heads, feedforward_channels,
                         layer_scale_init_value=layer_scale_init_value, drop_rate=drop_rate,
                         attn_drop_rate=attn_drop_rate, drop_path_rate=drop_path_rate,
                         num_fcs=num_fcs, qkv_bias=qkv_bias, ffn_type=ffn_type, act_cfg=act_cfg,
                         norm_cfg=norm_cfg, init_cfg=init_cfg)
        attn_args = dict(embed_dims=embed_dims, num_heads=num_heads, attn_drop=attn_drop_rate,
                         proj_drop=drop_rate, dropout_layer=dict(type='DropPath',
                                                                 drop_prob=drop_path_rate),
                         qkv_bias=qkv_bias, layer_scale_init_value=layer_scale_init_value,
                         feat_scale=feat_scale)
        self.attn = ValueBranch(**attn_args) if replace_attention else \
            StepMultiheadAttention(**attn_args, attn_scale=attn_scale)
        self.msa_adaptor = build_adaptor(
            resolve_adaptor(msa_adaptor, 'msa_adaptor'), embed_dims, 'nlc')
        self.mlp_adaptor = build_adaptor(
            resolve_adaptor(mlp_adaptor, 'mlp_adaptor'), embed_dims, 'nlc')
        aug_shortcut = check_aug_shortcut(aug_shortcut)
        self.msa_aug = self.mlp_aug = None
        self.aug_scale = 1.0
        if aug_shortcut is not None:
            self.aug_scale = aug_shortcut['scale']
            aug_args = dict(num_paths=aug_shortcut['num_paths'],
                            num_blocks=aug_shortcut['num_blocks'], act=aug_shortcut['act'])
            if 'msa' in aug_shortcut['branches']:
                self.msa_aug = AugmentedShortcut(embed_dims, **aug_args)
            if 'mlp' in aug_shortcut['branches']:
                self.mlp_aug = AugmentedShortcut(embed_dims, **aug_args)
        self._plain_msa = self.msa_adaptor is None and self.msa_aug is None \
            and self.aug_scale == 1.0
        self._plain_mlp = self.mlp_adaptor is None and self.mlp_aug is None \
            and self.aug_scale == 1.0

    def _ffn_branch(self, h):
        """The MLP branch output ``f`` alone (LayerScale and drop-path included)."""
        ffn = self.ffn
        if isinstance(ffn, FFN):
            return ffn.dropout_layer(ffn.gamma2(ffn.layers(h)))
        return ffn(h, identity=0.)

    def _euler_step(self, x, h, f, adaptor, aug):
        shortcut = x if aug is None else x + aug(h)
        x_next = self.take_step(x, f, adaptor, shortcut=shortcut, request=self.step_sums_request,
                                measurable=self.aug_scale == 1.0)
        return x_next * self.aug_scale if self.aug_scale != 1.0 else x_next

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        if self._plain_msa:
            x = x + self.attn(h)
        else:
            x = self._euler_step(x, h, self.attn(h), self.msa_adaptor, self.msa_aug)
        h = self.ln2(x)
        if self._plain_mlp:
            return self.ffn(h, identity=x)
        return self._euler_step(x, h, self._ffn_branch(h), self.mlp_adaptor, self.mlp_aug)


@MODELS.register_module()
class StepViT(VisionTransformer):
    """Vision Transformer / DeiT with AttnScale, FeatScale, step-size adaptors, augmented shortcuts.

    Every argument of mmpretrain's :class:`VisionTransformer` is accepted unchanged. Each switch
    takes a set of layers: ``None`` (off), ``'all'``, or a sequence of layer indices (negative
    indices count from the end).

    Args:
        arch (str | dict): as :class:`VisionTransformer`, e.g. ``'deit-small'``.
        attn_scale_layers: layers with AttnScale (docs/methods.md §6, ω init 0). Default None.
        feat_scale_layers: layers with FeatScale (docs/methods.md §7, s, t init 0). Default None.
        msa_adaptor (dict, optional): step-size adaptor on the MSA branch, e.g.
            ``dict(type='mmstiff.StepNetAdaptor')``; built per layer with
            ``channels=embed_dims, layout='nlc'``. Default None.
        msa_adaptor_layers: layers that get ``msa_adaptor``. Default ``'all'``.
        mlp_adaptor (dict, optional): the same for the MLP branch. Default None.
        mlp_adaptor_layers: layers that get ``mlp_adaptor``. Default ``'all'``.
        replace_attention_layers: layers whose MSA branch loses its attention matrix and keeps
            the value and output projections, ``x' = x + Δ ⊙ proj(V(LN1 x))`` (StepNet on ViT,
            reading B, see the module docstring and docs/methods.md §13). Each must be among
            the ``msa_adaptor_layers`` of an ``msa_adaptor`` and none may have AttnScale.
            Checkpoint keys are unchanged. Default None.
        aug_shortcut (dict, optional): augmented shortcuts (docs/methods.md §9), keys
            ``num_paths`` (T, default 2), ``num_blocks`` (circulant blocks per side, default 4),
            ``act`` (default ``'gelu'``), ``scale`` (1.0, or 0.75 as the public
            implementation: the whole block update is multiplied by it) and ``branches``
            (default ``('msa', 'mlp')``). Default None.
        aug_shortcut_layers: layers that get ``aug_shortcut``. Default ``'all'``.
        fused (str | bool): ``'auto'`` (default), True or False: the fused step of the adapted
            branches (layout ``'nlc'``) or the reference, see
            :class:`~mmstiff.models.backbones.StepResNet`; and AttnScale and FeatScale folded
            into the attention's output projection (``'auto'``: in training, True: always) or
            applied as layers of their own (False; docs/methods.md §7, "Folded into the
            projection").
        **kwargs: the other arguments of :class:`VisionTransformer`.

    Attention maps (per layer and head) are available through
    :func:`mmstiff.models.layers.attn_scale.record_attention_maps`.
    """

    def __init__(self, arch: Union[str, dict] = 'base', attn_scale_layers: LayerSelection = None,
                 feat_scale_layers: LayerSelection = None, msa_adaptor: Optional[dict] = None,
                 msa_adaptor_layers: LayerSelection = 'all', mlp_adaptor: Optional[dict] = None,
                 mlp_adaptor_layers: LayerSelection = 'all',
                 replace_attention_layers: LayerSelection = None,
                 aug_shortcut: Optional[dict] = None, aug_shortcut_layers: LayerSelection = 'all',
                 fused: Fused = 'auto', **kwargs):
        self.fused = check_fused(fused)
        msa_adaptor = resolve_adaptor(msa_adaptor, 'msa_adaptor')
        mlp_adaptor = resolve_adaptor(mlp_adaptor, 'mlp_adaptor')
        super().__init__(arch=arch, **kwargs)
        n = self.num_layers
        attn_scale = select_layers('attn_scale_layers', attn_scale_layers, n)
        feat_scale = select_layers('feat_scale_layers', feat_scale_layers, n)
        msa = select_layers('msa_adaptor_layers', msa_adaptor_layers, n) \
            if msa_adaptor is not None else frozenset()
        mlp = select_layers('mlp_adaptor_layers', mlp_adaptor_layers, n) \
            if mlp_adaptor is not None else frozenset()
        replace = select_layers('replace_attention_layers', replace_attention_layers, n)
        check_replaced_layers(replace, msa, attn_scale)
        aug_shortcut = check_aug_shortcut(aug_shortcut)
        aug = select_layers('aug_shortcut_layers', aug_shortcut_layers, n) \
            if aug_shortcut is not None else frozenset()

        layer_cfgs = self._upstream_layer_cfgs(**kwargs)
        self.layers = ModuleList(
            StepTransformerEncoderLayer(
                **layer_cfgs[i], attn_scale=i in attn_scale, feat_scale=i in feat_scale,
                msa_adaptor=msa_adaptor if i in msa else None, mlp_adaptor=mlp_adaptor if i in
                mlp else None, replace_attention=i in replace, aug_shortcut=aug_shortcut if i in
                aug else None) for i in range(n))
        set_fused(self, fused)
        if self.frozen_stages > 0:
            self._freeze_stages()

    def train(self, mode: bool = True) -> 'StepViT':
        """Upstream ``train``, returning the module as ``nn.Module.train`` does (mmpretrain's
        ``BaseBackbone.train`` returns None)."""
        super().train(mode)
        return self

    def _upstream_layer_cfgs(self, drop_rate=0., drop_path_rate=0., qkv_bias=True,
                             norm_cfg=dict(type='LN', eps=1e-6), layer_scale_init_value=0.,
                             layer_cfgs=dict(), **unused):
        """The per-layer configs :class:`VisionTransformer` builds its layers from.

        The drop-path rates are Python floats, where upstream's are NumPy floats: ``torch.compile``
        cannot branch on a NumPy value (``if drop_prob == 0``) and would cut the graph of
        every layer there."""
        dpr = np.linspace(0, drop_path_rate, self.num_layers).tolist()
        if isinstance(layer_cfgs, dict):
            layer_cfgs = [layer_cfgs] * self.num_layers
        cfgs = []
        for i in range(self.num_layers):
            cfg = dict(embed_dims=self.embed_dims, num_heads=self.arch_settings['num_heads'],
                       feedforward_channels=self.arch_settings['feedforward_channels'],
                       layer_scale_init_value=layer_scale_init_value, drop_rate=drop_rate,
                       drop_path_rate=dpr[i], qkv_bias=qkv_bias, norm_cfg=norm_cfg)
            cfg.update(layer_cfgs[i])
            cfgs.append(cfg)
        return cfgs
