"""AlterNet: a pre-activation ResNet whose stages end in local MSA blocks (docs/methods.md §10).

Park & Kim, *How Do Vision Transformers Work?*, ICLR 2022 (https://arxiv.org/abs/2202.06709).
The stage layout, stems, drop-path rule and block names are in docs/alternet.md.
"""
from collections import OrderedDict
from collections.abc import Sequence
from typing import List, Optional, Tuple, Type

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_activation_layer, build_conv_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmpretrain.models.backbones.resnet import ResNet

from mmstiff.models.layers.local_attention import LocalSelfAttention
from mmstiff.models.steps import check_fused, set_fused
from mmstiff.models.utils import Fused, InitConfig, check_depth
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_indices, check_non_negative_int, check_positive_int
from .preact_resnet import PreActBasicBlock, PreActBottleneck

STEMS = ('imagenet', 'cifar')


class PreActMSABlock(PreActBasicBlock):
    """Pre-activation local-MSA block: ``x_{t+1} = x_t + drop_path(f)``,
    ``f = attn(norm2(conv1(act(norm1(x)))))``.

    ``conv1`` is a 1×1 convolution ``in_channels → out_channels / expansion`` (no bias) and
    ``attn`` a :class:`LocalSelfAttention` back to ``out_channels``. Where the block changes
    the width, the projection shortcut (``downsample``) reads the pre-activated input, as in the
    conv blocks. The activation (GELU by default) is the ``relu`` attribute every
    pre-activation block of mmstiff applies before its branch.

    Args:
        in_channels (int): channels of the block input.
        out_channels (int): channels of the block output.
        stride (int): must be 1; the MSA keeps the map size.
        num_heads (int): attention heads. Default 8.
        head_dim (int): channels per head. Default 64.
        window_size (int): side of the attention windows. Default 7.
        drop_path_rate (float): stochastic depth rate of the branch. Default 0.
        conv_cfg, norm_cfg, act_cfg (dict): layer configs as in mmcv.
    """

    #: read by the trajectory recorders (mmstiff.analysis.blocks)
    residual_kind = 'preact'

    expansion = 1

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, num_heads: int = 8,
                 head_dim: int = 64, window_size: int = 7, drop_path_rate: float = 0.,
                 conv_cfg: Optional[dict] = None, norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'), init_cfg: InitConfig = None):
        if stride != 1:
            raise ValueError(f'stride={stride!r} is not supported by {type(self).__name__}; '
                             'expected 1 (an MSA block keeps the map size)')
        if not 0 <= drop_path_rate < 1:
            raise ValueError(f'drop_path_rate={drop_path_rate!r} is not supported; expected a '
                             'float in [0, 1)')
        if out_channels % self.expansion:
            raise ValueError(f'out_channels={out_channels} is not supported; expected a '
                             f'multiple of the block expansion {self.expansion}')
        super().__init__(in_channels, out_channels, stride=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                         act_cfg=act_cfg, init_cfg=init_cfg)
        self.attn = LocalSelfAttention(self.mid_channels, out_channels, num_heads=num_heads,
                                       head_dim=head_dim, window_size=window_size)
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else None

    def _build_branch(self, conv_cfg, norm_cfg):
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, self.in_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.conv1 = build_conv_layer(conv_cfg, self.in_channels, self.mid_channels, 1, bias=False)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, self.mid_channels, postfix=2)
        self.add_module(self.norm2_name, norm2)

    @property
    def residual_channels(self) -> int:
        """Channels of ``f``: the block's output channels (those of the MSA's output)."""
        return self.out_channels

    def residual(self, preact: torch.Tensor) -> torch.Tensor:
        """The residual branch ``f = attn(norm2(conv1(preact)))`` from the pre-activated input
        ``act(norm1(x))``: the windowed MSA of the 1×1-convolved map."""
        return self.attn(self.norm2(self.conv1(preact)))


class PreActMSABottleneck(PreActMSABlock):
    """:class:`PreActMSABlock` whose 1×1 convolution reduces to a quarter of the width, the
    MSA block of the bottleneck AlterNets (50/101/152)."""

    expansion = 4


#: MSA block matching each conv block kind.
MSA_BLOCKS = {PreActBasicBlock: PreActMSABlock, PreActBottleneck: PreActMSABottleneck}


def alternating_layout(num_blocks: int, num_msa: int) -> Tuple[str, ...]:
    """Kinds of the blocks of one stage, MSA replacing every second block from the end.

    Args:
        num_blocks (int): blocks in the stage.
        num_msa (int): MSA blocks in the stage, ``0 <= num_msa <= num_blocks // 2``.

    Returns:
        tuple[str]: ``'conv'`` or ``'msa'`` per block, e.g. ``(4, 1)`` ->
        ``('conv', 'conv', 'conv', 'msa')`` and ``(6, 3)`` -> ``('conv', 'msa') * 3``.
    """
    if not 0 <= num_msa <= num_blocks // 2:
        raise ValueError(f'{num_msa} MSA blocks in a stage of {num_blocks} blocks is not '
                         f'supported; expected 0 to {num_blocks // 2} (MSA blocks alternate '
                         'with conv blocks from the end of the stage)')
    return ('conv', ) * (num_blocks - 2 * num_msa) + ('conv', 'msa') * num_msa


def stochastic_depth_rates(num_blocks: int, drop_path_rate: float) -> List[float]:
    """``drop_path_rate · j / (L - 1)`` for the ``L = num_blocks`` blocks, ``j = 0 .. L - 1``."""
    return torch.linspace(0, drop_path_rate, num_blocks).tolist()


def _check_per_stage(name, values, num_stages):
    """``values`` as a tuple of ``num_stages`` non-negative ints, one per stage."""
    if isinstance(values,
                  (str, bytes)) or not isinstance(values, Sequence) or len(values) != num_stages:
        raise ValueError(f'{name}={values!r} is not supported; expected {num_stages} '
                         'non-negative ints, one per stage')
    return tuple(check_non_negative_int(f'{name}[{i}]', v) for i, v in enumerate(values))


@MODELS.register_module()
class AlterNet(ResNet):
    """AlterNet backbone, depth 18/34/50/101/152 (Park & Kim, ICLR 2022, §4, Appendix E).

    A subclass of mmpretrain's ``ResNet`` with its contract (``depth``, ``out_indices``,
    ``frozen_stages``, ``norm_eval``, ``with_cp``, ``init_cfg``) whose stages are
    pre-activation conv blocks ending in alternating local-MSA blocks; see the module
    docstring and docs/alternet.md.

    Args:
        depth (int): 18, 34 (basic blocks (2, 2, 2, 2) / (3, 4, 6, 4)) or 50, 101, 152
            (bottlenecks (3, 4, 6, 4) / (3, 4, 23, 4) / (3, 8, 36, 4)). Stage 4 has one block
            more than the ResNet of that depth (18 excepted), as in the paper.
        stem (str): ``'imagenet'`` (7×7 stride-2 conv + max pool, 224² inputs) or ``'cifar'``
            (3×3 stride-1 conv, 32² inputs). Default ``'imagenet'``.
        in_channels (int): image channels. Default 3.
        base_channels (int): stem width and middle width of stage 1; stage ``i`` has middle
            width ``base_channels · 2^i``. Default 64.
        strides (Sequence[int]): stride of the first block of each stage. Default (1, 2, 2, 2).
        num_msa_blocks (Sequence[int], optional): MSA blocks per stage; None: (0, 1, 1, 1) for
            depth 18, (0, 1, 3, 2) otherwise.
        num_heads (Sequence[int]): attention heads per stage. Default (3, 6, 12, 24).
        head_dim (int): channels per head. Default 64.
        window_size (int): attention window side; 7 for ImageNet, 4 for CIFAR in the paper.
            Maps it does not divide are padded and the padding masked out (see
            :class:`~mmstiff.models.layers.LocalSelfAttention`). Default 7.
        drop_path_rate (float): stochastic depth rate of the last block; block ``j`` gets
            ``drop_path_rate · j / (L - 1)``, used by the MSA blocks. Default 0.
        out_indices (Sequence[int]): stages whose output is returned (negative indices count
            from the end). Only the last stage's output is normalised (final BN-act).
            Default (3, ).
        frozen_stages (int): the stem and stages ``1 .. frozen_stages`` stop training (with
            all 4, the final norm too); -1 freezes nothing. Default -1.
        norm_eval (bool): keep every BN in eval mode while training. Default False.
        with_cp (bool): checkpoint each block (recompute it in the backward pass). Default False.
        fused (str | bool): ``'auto'`` (default), True or False: the fused step of the conv and
            MSA blocks or the reference; see :class:`~mmstiff.models.backbones.StepResNet`.
        conv_cfg, norm_cfg (dict): layer configs as in mmcv.
        act_cfg (dict): activation of the conv blocks and of the final norm. Default ReLU.
        msa_act_cfg (dict): pre-activation of the MSA blocks. Default GELU.
        init_cfg (dict | list[dict]): mmpretrain's ResNet default (Kaiming convolutions, unit
            BN scales); the relative position bias tables start from N(0, 0.02²).

    Example:
        >>> net = AlterNet(depth=50, stem='cifar', window_size=4, out_indices=(0, 1, 2, 3))
        >>> [tuple(y.shape) for y in net(torch.rand(1, 3, 32, 32))]
        [(1, 256, 32, 32), (1, 512, 16, 16), (1, 1024, 8, 8), (1, 2048, 4, 4)]
    """

    arch_settings = {
        18: (PreActBasicBlock, (2, 2, 2, 2)),
        34: (PreActBasicBlock, (3, 4, 6, 4)),
        50: (PreActBottleneck, (3, 4, 6, 4)),
        101: (PreActBottleneck, (3, 4, 23, 4)),
        152: (PreActBottleneck, (3, 8, 36, 4)),
    }
    msa_settings = {
        18: (0, 1, 1, 1),
        34: (0, 1, 3, 2),
        50: (0, 1, 3, 2),
        101: (0, 1, 3, 2),
        152: (0, 1, 3, 2)
    }
    num_stages = 4

    def __init__(self, depth: int, stem: str = 'imagenet', in_channels: int = 3,
                 base_channels: int = 64, strides: Sequence[int] = (1, 2, 2, 2),
                 num_msa_blocks: Optional[Sequence[int]] = None,
                 num_heads: Sequence[int] = (3, 6, 12, 24), head_dim: int = 64,
                 window_size: int = 7, drop_path_rate: float = 0.,
                 out_indices: Sequence[int] = (3, ), frozen_stages: int = -1,
                 norm_eval: bool = False, with_cp: bool = False, fused: Fused = 'auto',
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN', requires_grad=True),
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 msa_act_cfg: dict = dict(type='GELU'),
                 init_cfg: InitConfig = [
                     dict(type='Kaiming', layer=['Conv2d']),
                     dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])
                 ]):  # yapf: disable (it splits inside the annotations and defaults)
        # every setting is checked before a layer is built; the upstream constructor then
        # builds the stem and the stages through _make_stem_layer and make_res_layer
        check_depth(depth, self.arch_settings, 'AlterNet')
        self.fused = check_fused(fused)
        if stem not in STEMS:
            raise ValueError(f'stem={stem!r} is not supported; expected one of {STEMS}')
        stage_blocks = self.arch_settings[depth][1]
        num_msa_blocks = _check_per_stage(
            'num_msa_blocks',
            self.msa_settings[depth] if num_msa_blocks is None else num_msa_blocks, self.num_stages)
        self.block_layouts = tuple(
            alternating_layout(n, m) for n, m in zip(stage_blocks, num_msa_blocks))
        self.num_msa_blocks = num_msa_blocks
        self.num_heads = _check_per_stage('num_heads', num_heads, self.num_stages)
        if any(h < 1 for h, m in zip(self.num_heads, num_msa_blocks) if m):
            raise ValueError(f'num_heads={num_heads!r} is not supported; expected a positive '
                             'number of heads in every stage that has MSA blocks')
        strides = tuple(
            check_positive_int(f'strides[{i}]', s)
            for i, s in enumerate(_check_per_stage('strides', strides, self.num_stages)))
        self.head_dim = check_positive_int('head_dim', head_dim)
        self.window_size = check_positive_int('window_size', window_size)
        check_positive_int('in_channels', in_channels)
        check_positive_int('base_channels', base_channels)
        if not 0 <= drop_path_rate < 1:
            raise ValueError(f'drop_path_rate={drop_path_rate!r} is not supported; expected a '
                             'float in [0, 1)')
        self.drop_path_rate = drop_path_rate
        self.drop_path_rates = stochastic_depth_rates(sum(stage_blocks), drop_path_rate)
        out_indices = check_indices('out_indices', out_indices, self.num_stages, what='stages')
        if not out_indices:
            raise ValueError('out_indices=() is not supported; expected at least one stage index')
        if (isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int)
                or not -1 <= frozen_stages <= self.num_stages):
            raise ValueError(f'frozen_stages={frozen_stages!r} is not supported; expected an '
                             f'int in [-1, {self.num_stages}]')
        self.stem_type = stem
        self.act_cfg = act_cfg
        self.msa_act_cfg = msa_act_cfg
        super().__init__(depth, in_channels=in_channels, stem_channels=base_channels,
                         base_channels=base_channels, num_stages=self.num_stages, strides=strides,
                         dilations=(1, ) * self.num_stages, out_indices=tuple(sorted(out_indices)),
                         frozen_stages=frozen_stages, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                         norm_eval=norm_eval, with_cp=with_cp, zero_init_residual=False,
                         init_cfg=init_cfg)
        self.final_norm_name, final_norm = build_norm_layer(norm_cfg, self.feat_dim,
                                                            postfix='_final')
        self.add_module(self.final_norm_name, final_norm)
        self.final_act = build_activation_layer(act_cfg)
        set_fused(self, fused)
        self._freeze_stages()

    @property
    def final_norm(self) -> nn.Module:
        """The norm after the last stage, whose output is ``final_act(final_norm(x))``."""
        return getattr(self, self.final_norm_name)

    def _make_stem_layer(self, in_channels, stem_channels):
        if self.stem_type == 'imagenet':
            self.conv1 = build_conv_layer(self.conv_cfg, in_channels, stem_channels, 7, stride=2,
                                          padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.conv1 = build_conv_layer(self.conv_cfg, in_channels, stem_channels, 3, padding=1,
                                          bias=False)
            self.maxpool = nn.Identity()

    def make_res_layer(self, block: Type[PreActBasicBlock], num_blocks: int, in_channels: int,
                       out_channels: int, stride: int, conv_cfg: Optional[dict], norm_cfg: dict,
                       **kwargs) -> nn.Sequential:
        """One stage: pre-activation conv blocks and MSA blocks in the stage's layout, named
        ``conv{j}`` / ``msa{j}`` by their position ``j``."""
        stage = len(self.res_layers)  # the upstream loop appends the name after this call
        first = sum(len(layout) for layout in self.block_layouts[:stage])
        blocks = OrderedDict()
        for j, kind in enumerate(self.block_layouts[stage]):
            if kind == 'conv':
                blocks[f'conv{j}'] = block(in_channels, out_channels,
                                           stride=stride if j == 0 else 1, conv_cfg=conv_cfg,
                                           norm_cfg=norm_cfg, act_cfg=self.act_cfg)
            else:
                blocks[f'msa{j}'] = MSA_BLOCKS[block](
                    in_channels, out_channels, num_heads=self.num_heads[stage],
                    head_dim=self.head_dim, window_size=self.window_size,
                    drop_path_rate=self.drop_path_rates[first + j], conv_cfg=conv_cfg,
                    norm_cfg=norm_cfg, act_cfg=self.msa_act_cfg)
            in_channels = out_channels
        return nn.Sequential(blocks)

    def _freeze_stages(self):
        if self.frozen_stages >= 0:
            for param in self.conv1.parameters():
                param.requires_grad = False
        frozen = [getattr(self, f'layer{i}') for i in range(1, self.frozen_stages + 1)]
        if self.frozen_stages == self.num_stages and hasattr(self, 'final_norm_name'):
            frozen.append(self.final_norm)
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'AlterNet':
        """Upstream ``train`` (frozen stages, ``norm_eval``), returning the module as
        ``nn.Module.train`` does."""
        super().train(mode)
        return self

    def _run_stage(self, stage, x):
        for block in stage:
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x = self.maxpool(self.conv1(x))
        outs = []
        for i, layer_name in enumerate(self.res_layers):
            x = self._run_stage(getattr(self, layer_name), x)
            if i == self.num_stages - 1:
                x = self.final_act(self.final_norm(x))
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)
