"""Pre-activation CIFAR ResNets with step-size adaptors (docs/methods.md §0, §1, §11).

The CIFAR family of He et al., *Identity Mappings in Deep Residual Networks* (ECCV 2016): a 3×3
stem convolution, three stages of pre-activation blocks (widths 16, 32, 64 for ``base_channels=16``,
strides 1, 2, 2), and a final BN-ReLU before global pooling. Every block is one Euler step

    x_{t+1} = x_t + Δ_t ⊙ f(x_t),    f = conv(act(norm(... conv(act(norm(x)))))),

with no activation after the add, so the step-size adaptor sits right after the last convolution
of the residual branch, before the add. ``x_t`` is the shortcut: the block input, or its
projection where the block changes shape. As in the reference code of the paper
(fb.resnet.torch ``preresnet.lua``), the projection shortcut reads the *pre-activated* input
``act(norm1(x))``.

Depths: ``6n + 2`` with basic blocks (20, 32, 56, 110, ...) and ``9n + 2`` with bottlenecks
(29, 47, 164, 1001, ...). ResNet-164 (bottleneck, n = 18) is the StepNet paper's CIFAR network.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_conv_layer, build_norm_layer
from mmengine.model import BaseModule
from mmengine.utils.dl_utils.parrots_wrapper import _BatchNorm
from mmpretrain.models.backbones.base_backbone import BaseBackbone

from mmstiff.models.steps import (adaptor_placement, adaptor_with_norm, check_adaptor_norm,
                                  check_fused, init_keeping_starts, release_adaptor_statistics,
                                  resolve_adaptor, set_fused, unfrozen_res_layers)
from mmstiff.models.steps.norm import check_norm_cfg
from mmstiff.models.utils import Fused, InitConfig, UnsupportedDepthError
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .step_resnet import StepBlockMixin, attach_adaptors

BLOCK_CHOICES = ('basic', 'bottleneck')


def preact_arch(depth: int, block: Optional[str] = None) -> Tuple[str, int]:
    """Block kind and blocks per stage of the pre-activation CIFAR ResNet of a given depth.

    Args:
        depth (int): ``6n + 2`` (basic blocks, two 3×3 convolutions each) or ``9n + 2``
            (bottlenecks, three convolutions each), ``n >= 1``.
        block (str, optional): ``'basic'`` or ``'bottleneck'``. ``None`` chooses as the paper's
            family does: basic blocks when ``depth = 6n + 2`` and ``depth < 164``
            (ResNet-20/56/110), bottlenecks otherwise (ResNet-29/164/1001).

    Returns:
        tuple[str, int]: the block kind and ``n``, the number of blocks in each of the three stages.

    Raises:
        ValueError: naming ``block`` and the valid forms; for ``depth`` an
            :class:`~mmstiff.models.utils.UnsupportedDepthError` (a ``KeyError`` too, as
            upstream's).
    """
    if block is not None and block not in BLOCK_CHOICES:
        raise ValueError(f'block={block!r} is not supported; expected None or one of '
                         f'{BLOCK_CHOICES}')
    if isinstance(depth, bool) or not isinstance(depth, int):
        raise UnsupportedDepthError(f'depth={depth!r} is not supported; expected an int of the '
                                    'form 6n+2 (basic blocks) or 9n+2 (bottlenecks), n >= 1')
    basic_ok = depth >= 8 and (depth - 2) % 6 == 0
    bottleneck_ok = depth >= 11 and (depth - 2) % 9 == 0
    if block is None:
        block = 'basic' if basic_ok and (depth < 164 or not bottleneck_ok) else 'bottleneck'
    if block == 'basic' and basic_ok:
        return block, (depth - 2) // 6
    if block == 'bottleneck' and bottleneck_ok:
        return block, (depth - 2) // 9
    raise UnsupportedDepthError(
        f'depth={depth!r} is not supported with block={block!r}; expected 6n+2 with '
        "block='basic' (8, 14, 20, 32, 56, 110, ...) or 9n+2 with block='bottleneck' (11, 20, "
        '29, 47, 164, 1001, ...), n >= 1')


class PreActBasicBlock(StepBlockMixin, BaseModule):
    """Pre-activation basic block: ``f = conv2(act(norm2(conv1(act(norm1(x))))))``, two 3×3 convs.

    The block returns ``x_t + Δ_t ⊙ f`` (no activation after the add); ``step_adaptor`` is None
    (Δ ≡ 1) until the backbone attaches one.

    Args:
        in_channels (int): channels of the block input.
        out_channels (int): channels of the block output (and of ``f``).
        stride (int): stride of the first convolution and of the projection shortcut.
        conv_cfg, norm_cfg, act_cfg (dict): layer configs as in mmcv.
    """

    #: read by the trajectory recorders (mmstiff.analysis.blocks)
    residual_kind = 'preact'

    expansion = 1

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 conv_cfg: Optional[dict] = None, norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU', inplace=True), init_cfg: InitConfig = None):
        super().__init__(init_cfg=init_cfg)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.mid_channels = out_channels // self.expansion
        self.stride = stride
        self._build_branch(conv_cfg, norm_cfg)
        self.relu = build_activation_layer(act_cfg)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = build_conv_layer(conv_cfg, in_channels, out_channels, 1,
                                               stride=stride, bias=False)

    def _build_branch(self, conv_cfg, norm_cfg):
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, self.in_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.conv1 = build_conv_layer(conv_cfg, self.in_channels, self.mid_channels, 3,
                                      stride=self.stride, padding=1, bias=False)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, self.mid_channels, postfix=2)
        self.add_module(self.norm2_name, norm2)
        self.conv2 = build_conv_layer(conv_cfg, self.mid_channels, self.out_channels, 3, padding=1,
                                      bias=False)

    @property
    def norm1(self) -> nn.Module:
        """The block's first norm (on its input ``x``)."""
        return getattr(self, self.norm1_name)

    @property
    def norm2(self) -> nn.Module:
        """The norm after ``conv1``."""
        return getattr(self, self.norm2_name)

    def residual(self, preact: torch.Tensor) -> torch.Tensor:
        """The residual branch ``f`` from the pre-activated input ``act(norm1(x))``."""
        return self.conv2(self.relu(self.norm2(self.conv1(preact))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        preact = self.relu(self.norm1(x))
        x_t = x if self.downsample is None else self.downsample(preact)
        return self.residual_step(x_t, self.residual(preact))


class PreActBottleneck(PreActBasicBlock):
    """Pre-activation bottleneck: 1×1 reduce, 3×3 (stride), 1×1 expand ×4, each after BN-act.

    Same arguments as :class:`PreActBasicBlock`; ``out_channels = 4 * mid_channels``.
    """

    expansion = 4

    def _build_branch(self, conv_cfg, norm_cfg):
        if self.out_channels % self.expansion:
            raise ValueError(f'out_channels={self.out_channels} is not supported; expected a '
                             f'multiple of the bottleneck expansion {self.expansion}')
        mid = self.mid_channels
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, self.in_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.conv1 = build_conv_layer(conv_cfg, self.in_channels, mid, 1, bias=False)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, mid, postfix=2)
        self.add_module(self.norm2_name, norm2)
        self.conv2 = build_conv_layer(conv_cfg, mid, mid, 3, stride=self.stride, padding=1,
                                      bias=False)
        self.norm3_name, norm3 = build_norm_layer(norm_cfg, mid, postfix=3)
        self.add_module(self.norm3_name, norm3)
        self.conv3 = build_conv_layer(conv_cfg, mid, self.out_channels, 1, bias=False)

    @property
    def norm3(self) -> nn.Module:
        """The norm after ``conv2``."""
        return getattr(self, self.norm3_name)

    def residual(self, preact: torch.Tensor) -> torch.Tensor:
        """The residual branch ``f = conv3(act(norm3(conv2(act(norm2(conv1(preact)))))))`` from the
        pre-activated input ``act(norm1(x))``."""
        out = self.conv2(self.relu(self.norm2(self.conv1(preact))))
        return self.conv3(self.relu(self.norm3(out)))


BLOCKS = dict(basic=PreActBasicBlock, bottleneck=PreActBottleneck)


@MODELS.register_module()
class PreActStepResNet(BaseBackbone):
    """Pre-activation CIFAR ResNet of adaptive Euler steps (docs/methods.md §0, §1, §4).

    Args:
        depth (int): ``6n + 2`` (basic) or ``9n + 2`` (bottleneck); see :func:`preact_arch`.
            ResNet-164 (bottleneck) is the StepNet paper's CIFAR backbone.
        block (str, optional): ``'basic'``, ``'bottleneck'``, or None to choose from the depth.
        in_channels (int): image channels, 3 (RGB) or 1 (grey). Default 3.
        base_channels (int): stem width and middle width of the first stage; stage ``i`` has
            middle width ``base_channels * 2**i`` and output width that times the block
            expansion (1 basic, 4 bottleneck). Default 16.
        strides (Sequence[int]): stride of the first block of each of the three stages.
            Default (1, 2, 2).
        adaptor (dict, optional): step-size adaptor config built in every chosen block, e.g.
            ``dict(type='mmstiff.StepNetAdaptor')``; None gives the plain network (Δ ≡ 1).
        adaptor_stages (Sequence[bool], optional): which stages get adaptors (None: all).
        adaptor_blocks (Sequence[Sequence[int] | None], optional): per stage, which blocks get
            adaptors (None: all); see :func:`mmstiff.models.steps.placement.adaptor_placement`.
        adaptor_norm (str): under ``norm_eval=True``, which adaptor BN layers keep updating
            their statistics: ``'auto'`` (default) those the first loaded state dict lacked
            (none when nothing was loaded), ``'follow'`` none, ``'train'`` all; adaptors of
            frozen stages never (docs/methods.md §3, "Starting from a plain checkpoint").
        adaptor_norm_cfg (dict, optional): the norm layer of the adaptors that have one
            (StepNet); None (default): ``norm_cfg`` (docs/methods.md §3, "The adaptor's
            normalisation").
        fused (str | bool): ``'auto'`` (default), True or False: the fused step or the
            reference; see :class:`~mmstiff.models.backbones.StepResNet`.
        out_indices (Sequence[int]): stages whose output is returned. The last stage's output
            passes through the final BN-act of pre-activation nets; earlier stages are returned
            as they are (un-normalised states of the trajectory). Default (2,).
        frozen_stages (int): stem and stages up to this index (1-based, as in mmpretrain) stop
            training; -1 freezes nothing.
        norm_eval (bool): keep every BN in eval mode while training (the adaptors' as
            ``adaptor_norm`` says).
        conv_cfg, norm_cfg, act_cfg (dict): layer configs as in mmcv.
        init_cfg (dict | list[dict]): Kaiming for convolutions, 1 for BN scales by default.

    Example:
        >>> import torch
        >>> net = PreActStepResNet(depth=20, adaptor=dict(type='mmstiff.ConstantStep'))
        >>> [tuple(y.shape) for y in net(torch.rand(2, 3, 32, 32))]
        [(2, 64, 8, 8)]
    """

    num_stages = 3

    def __init__(self, depth: int, block: Optional[str] = None, in_channels: int = 3,
                 base_channels: int = 16, strides: Sequence[int] = (1, 2, 2),
                 adaptor: Optional[dict] = None, adaptor_stages: Optional[Sequence[bool]] = None,
                 adaptor_blocks: Optional[Sequence[Optional[Sequence[int]]]] = None,
                 adaptor_norm: str = 'auto', adaptor_norm_cfg: Optional[dict] = None,
                 fused: Fused = 'auto', out_indices: Sequence[int] = (2, ), frozen_stages: int = -1,
                 norm_eval: bool = False, conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN', requires_grad=True),
                 act_cfg: dict = dict(type='ReLU', inplace=True), init_cfg: InitConfig = [
                     dict(type='Kaiming', layer=['Conv2d']),
                     dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])
                 ]):
        super().__init__(init_cfg)
        self.depth = depth
        self.block_kind, num_blocks = preact_arch(depth, block)
        self.stage_blocks = (num_blocks, ) * self.num_stages
        self._check_args(in_channels, base_channels, strides, out_indices, frozen_stages)
        self.adaptor = resolve_adaptor(adaptor)
        self.adaptor_stages = adaptor_stages
        self.adaptor_blocks = adaptor_blocks
        self.adaptor_norm = check_adaptor_norm(adaptor_norm)
        self.adaptor_norm_cfg = None if adaptor_norm_cfg is None \
            else check_norm_cfg(adaptor_norm_cfg)
        adaptor = adaptor_with_norm(self.adaptor, norm_cfg, self.adaptor_norm_cfg)
        self.fused = check_fused(fused)
        self.adaptor_placement = adaptor_placement(self.stage_blocks, adaptor_stages,
                                                   adaptor_blocks)
        self.base_channels = base_channels
        self.strides = tuple(strides)
        self.out_indices = tuple(i % self.num_stages for i in out_indices)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval

        block_cls = BLOCKS[self.block_kind]
        self.conv1 = build_conv_layer(conv_cfg, in_channels, base_channels, 3, padding=1,
                                      bias=False)
        self.res_layers = []
        channels = base_channels
        for i, (stride, mask) in enumerate(zip(self.strides, self.adaptor_placement)):
            out_channels = base_channels * 2**i * block_cls.expansion
            blocks = []
            for j in range(len(mask)):
                blocks.append(
                    block_cls(channels, out_channels, stride=stride if j == 0 else 1,
                              conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg))
                channels = out_channels
            layer_name = f'layer{i + 1}'
            self.add_module(layer_name, attach_adaptors(nn.Sequential(*blocks), adaptor, mask))
            self.res_layers.append(layer_name)
        self.final_norm_name, final_norm = build_norm_layer(norm_cfg, channels, postfix='_final')
        self.add_module(self.final_norm_name, final_norm)
        self.final_act = build_activation_layer(act_cfg)
        self.feat_dim = channels
        set_fused(self, fused)
        self._freeze_stages()

    def _check_args(self, in_channels, base_channels, strides, out_indices, frozen_stages):
        check_positive_int('in_channels', in_channels)
        check_positive_int('base_channels', base_channels)
        if len(strides) != self.num_stages:
            raise ValueError(f'strides={strides!r} has {len(strides)} entries; expected '
                             f'{self.num_stages} (one per stage)')
        if not out_indices or any(not -self.num_stages <= i < self.num_stages for i in out_indices):
            raise ValueError(f'out_indices={out_indices!r} is not supported; expected a '
                             f'non-empty sequence of stage indices in [-{self.num_stages}, '
                             f'{self.num_stages - 1}]')
        if not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'frozen_stages={frozen_stages!r} is not supported; expected an '
                             f'int in [-1, {self.num_stages}]')

    @property
    def final_norm(self) -> nn.Module:
        """The norm after the last stage, whose output is ``final_act(final_norm(x))``."""
        return getattr(self, self.final_norm_name)

    def _freeze_stages(self):
        if self.frozen_stages >= 0:
            for param in self.conv1.parameters():
                param.requires_grad = False
        for i in range(1, self.frozen_stages + 1):
            layer = getattr(self, f'layer{i}')
            layer.eval()
            for param in layer.parameters():
                param.requires_grad = False

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x = self.conv1(x)
        outs = []
        for i, layer_name in enumerate(self.res_layers):
            x = getattr(self, layer_name)(x)
            if i == self.num_stages - 1:
                x = self.final_act(self.final_norm(x))
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def init_weights(self) -> None:
        """``init_cfg`` (a ``Pretrained`` checkpoint last); then every adaptor the checkpoint
        did not hold gets its start back."""
        init_keeping_starts(self, super().init_weights)

    def train(self, mode: bool = True) -> 'PreActStepResNet':
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
            release_adaptor_statistics(unfrozen_res_layers(self), self.adaptor_norm, owner=self)
        return self
