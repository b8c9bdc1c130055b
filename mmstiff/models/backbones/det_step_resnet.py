"""The detection ResNet with step-size adaptors (docs/methods.md §1, §4; StepNet COCO experiments).

:class:`DetStepResNet` subclasses mmdet's ``ResNet`` and keeps its whole contract:
``out_indices=(0, 1, 2, 3)``, ``frozen_stages``, ``norm_eval=True`` (which freezes the
statistics of the adaptors' BN too where a loaded checkpoint held them; ``adaptor_norm``),
``init_cfg=dict(type='Pretrained', ...)``, ``dcn`` / ``stage_with_dcn`` and ``plugins``. The
parameter names are mmdet's, so ``torchvision://resnet50`` or any mmdet ResNet checkpoint loads
with only ``layerI.J.step_adaptor.*`` missing.

mmdet's ``plugins`` can only reach Bottleneck blocks and never see the shortcut ``x_t``; the
adaptor here works in BasicBlock depths (18, 34) too and gives StepNet the ``x_t`` it needs.
"""
from typing import Optional

import torch
import torch.nn as nn
from mmdet.models.backbones.resnet import BasicBlock, Bottleneck, ResNet

from mmstiff.registry import MODELS
from .step_resnet import StepBasicBlock, StepBlockMixin, StepPlacementMixin, step_arch_settings


class DetStepBasicBlock(StepBlockMixin, BasicBlock):
    """mmdet ``BasicBlock`` whose residual update is ``x_t + Δ_t ⊙ f``."""

    # mmdet's and mmpretrain's BasicBlock name their layers alike: one branch serves both
    residual_body = StepBasicBlock.residual_body


class DetStepBottleneck(StepBlockMixin, Bottleneck):
    """mmdet ``Bottleneck`` (``dcn`` and ``plugins`` included) whose residual update is
    ``x_t + Δ_t ⊙ f``; the adaptor comes after the ``after_conv3`` plugins."""

    @property
    def last_norm(self) -> Optional[nn.Module]:
        """``norm3``, or None where ``after_conv3`` plugins follow it (then part of the body)."""
        return None if self._after_conv3_plugins() else self.norm3

    def _after_conv3_plugins(self):
        return self.with_plugins and bool(self.after_conv3_plugin_names)

    def residual_body(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch of the block input ``x`` up to the input of its last norm, with the
        ``after_conv1`` and ``after_conv2`` plugins; where ``after_conv3`` plugins follow, up to
        their output (``norm3`` included, :attr:`last_norm` then None)."""
        out = self.relu(self.norm1(self.conv1(x)))
        if self.with_plugins:
            out = self.forward_plugin(out, self.after_conv1_plugin_names)
        out = self.relu(self.norm2(self.conv2(out)))
        if self.with_plugins:
            out = self.forward_plugin(out, self.after_conv2_plugin_names)
        out = self.conv3(out)
        if self._after_conv3_plugins():
            out = self.forward_plugin(self.norm3(out), self.after_conv3_plugin_names)
        return out


# force: takes the name over from the placeholder of lazy_det.py
@MODELS.register_module(force=True)
class DetStepResNet(StepPlacementMixin, ResNet):
    """mmdet ResNet (depth 18/34/50/101/152) whose blocks are adaptive Euler steps.

    Args:
        depth (int): 18, 34 (BasicBlock) or 50, 101, 152 (Bottleneck).
        adaptor (dict, optional): step-size adaptor config, e.g.
            ``dict(type='mmstiff.StepNetAdaptor')``; None gives exactly mmdet's ``ResNet``.
        adaptor_stages (Sequence[bool], optional): which stages get adaptors (None: all).
        adaptor_blocks (Sequence[Sequence[int] | None], optional): per stage, which blocks
            (negative indices allowed); see :func:`mmstiff.models.steps.adaptor_placement`.
        adaptor_norm (str): ``'auto'`` (default), ``'follow'`` or ``'train'``: which adaptor BN
            layers learn their statistics under ``norm_eval=True``; see
            :class:`~mmstiff.models.backbones.StepResNet`. With ``'auto'``, adaptors grafted onto
            ``torchvision://resnet50`` learn theirs, while those loaded from an ImageNet
            StepNet checkpoint stay frozen with the backbone's BN; a backbone that loaded
            nothing keeps them all frozen.
        adaptor_norm_cfg (dict, optional): the adaptors' norm layer; None (default): the
            backbone's ``norm_cfg``. The COCO configs set ``dict(type='SyncBN')``.
        **kwargs: every other argument of mmdet's ``ResNet`` (``out_indices``,
            ``frozen_stages``, ``norm_eval``, ``dcn``, ``plugins``, ``init_cfg``, ...).
    """

    arch_settings = step_arch_settings(ResNet.arch_settings, {
        BasicBlock: DetStepBasicBlock,
        Bottleneck: DetStepBottleneck
    })

    def __init__(self, depth: int, **kwargs):
        super().__init__(depth, **kwargs)
        # mmdet picks the zero-init of the last norm by ``block is BasicBlock``; restore it
        # for the subclassed blocks so a from-scratch init matches mmdet's ResNet.
        if self.zero_init_residual and kwargs.get('init_cfg') is None \
                and kwargs.get('pretrained') is None:
            last_norm = 'norm2' if self.block is DetStepBasicBlock else 'norm3'
            for name in self.res_layers:
                for block in getattr(self, name):
                    block.init_cfg = dict(type='Constant', val=0, override=dict(name=last_norm))
