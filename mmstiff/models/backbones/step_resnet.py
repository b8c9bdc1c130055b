"""ResNet with a step-size adaptor in its residual blocks (docs/methods.md §0, §1, §3, §4).

Each block is one Euler step ``x_{t+1} = act(x_t + Δ_t ⊙ f(x_t))``: ``f`` is the residual branch
up to its last norm, ``x_t`` the (downsampled) shortcut, and Δ_t comes from the block's
``step_adaptor`` (StepNet, SE, ...). Blocks without an adaptor take the plain step ``x_t + f``.

:class:`StepResNet` subclasses mmpretrain's ``ResNet`` and keeps every upstream parameter name,
so an mmpretrain (or converted torchvision) ResNet checkpoint loads with exactly the adaptor
parameters (``layerI.J.step_adaptor.*``) missing.
"""
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmpretrain.models.backbones.resnet import BasicBlock, Bottleneck, ResNet

from mmstiff.models.steps import (StepBlock, adaptor_placement, adaptor_with_norm, build_adaptor,
                                  check_adaptor_norm, check_fused, init_keeping_starts,
                                  release_adaptor_statistics, resolve_adaptor, set_fused,
                                  unfrozen_res_layers)
from mmstiff.models.steps.norm import check_norm_cfg
from mmstiff.models.utils import Fused, check_depth
from mmstiff.registry import MODELS


class StepBlockMixin(StepBlock):
    """The Euler step shared by the convolutional step blocks: ``act(x_t + Δ_t ⊙ f)``.

    A post-activation block implements :meth:`residual_body` (``f`` before its last norm) and
    inherits the forward pass; the pre-activation blocks have their own forward and use
    :meth:`residual_step` only. The step itself is ``take_step`` (:class:`StepBlock`).

    A block gets its adaptor from :func:`attach_adaptors`; without one, ``step_adaptor`` is
    None and the block computes the plain ``x_t + f``, exactly the upstream ResNet block.
    """

    #: whether the fused step may fold the branch's last BN (False: the BN runs as a module
    #: and the step keeps f; for measuring the fold against the unfolded fused step)
    fold_norm = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_adaptor = None

    @property
    def residual_channels(self) -> int:
        """Channels of ``f``: the output channels of the last conv of the residual branch."""
        last_conv = self.conv3 if hasattr(self, 'conv3') else self.conv2
        return last_conv.out_channels

    def residual_step(self, x_t: torch.Tensor, f: torch.Tensor, act: Optional[nn.Module] = None,
                      norm: Optional[nn.Module] = None) -> torch.Tensor:
        """``act(x_t + Δ_t ⊙ drop_path(f))``, Δ_t from the adaptor (1 without one); with
        ``norm``, f is its input (the fused step may fold it)."""
        drop_path = getattr(self, 'drop_path', None)
        return self.take_step(x_t, f, self.step_adaptor, act=act, drop_path=drop_path, norm=norm,
                              request=self.step_sums_request)

    def residual_body(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        """The residual branch of the block input ``x`` up to the input of its last norm."""
        raise NotImplementedError

    @property
    def last_norm(self) -> Optional[nn.Module]:
        """The norm layer that ends the residual branch (None: :meth:`residual_body` is f)."""
        return self.norm3 if hasattr(self, 'conv3') else self.norm2

    def residual_branch(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch ``f`` of the block input ``x``, up to its last norm."""
        y = self.residual_body(x)
        norm = self.last_norm
        return y if norm is None else norm(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``act(x_t + Δ_t ⊙ f)``, with the upstream ``with_cp`` handling."""

        def _inner_forward(x):
            y = self.residual_body(x)
            identity = x if self.downsample is None else self.downsample(x)
            norm = self.last_norm
            if norm is not None and not self.fold_norm:
                y, norm = norm(y), None
            return self.residual_step(identity, y, self.relu, norm=norm)

        if self.with_cp and x.requires_grad:
            return cp.checkpoint(_inner_forward, x, use_reentrant=False)
        return _inner_forward(x)


def attach_adaptors(res_layer: nn.Sequential, adaptor: Optional[dict],
                    flags: Sequence[bool]) -> nn.Sequential:
    """Give block ``j`` of ``res_layer`` a freshly built adaptor where ``flags[j]`` is True."""
    if adaptor is None:
        return res_layer
    for block, flag in zip(res_layer, flags):
        if flag:
            block.step_adaptor = build_adaptor(adaptor, block.residual_channels, 'nchw')
    return res_layer


class StepBasicBlock(StepBlockMixin, BasicBlock):
    """mmpretrain ``BasicBlock`` whose residual update is ``x_t + Δ_t ⊙ f``."""

    def residual_body(self, x: torch.Tensor) -> torch.Tensor:
        """``conv2(relu(norm1(conv1(x))))``: the branch up to the input of ``norm2``."""
        return self.conv2(self.relu(self.norm1(self.conv1(x))))


class StepBottleneck(StepBlockMixin, Bottleneck):
    """mmpretrain ``Bottleneck`` whose residual update is ``x_t + Δ_t ⊙ f``."""

    def residual_body(self, x: torch.Tensor) -> torch.Tensor:
        """``conv3(relu(norm2(conv2(relu(norm1(conv1(x)))))))``: the branch up to the input of
        ``norm3``."""
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.relu(self.norm2(self.conv2(out)))
        return self.conv3(out)


def step_arch_settings(arch_settings: Dict[int, Tuple[type, Tuple[int, ...]]],
                       step_blocks: Dict[type, type]) -> Dict[int, Tuple[type, Tuple[int, ...]]]:
    """An upstream ResNet's ``arch_settings`` with each block class replaced by its step block.

    Args:
        arch_settings (dict): ``{depth: (block class, blocks per stage)}`` of the upstream.
        step_blocks (dict): ``{upstream block class: step block class}``.
    """
    return {depth: (step_blocks[block], stages) for depth, (block, stages) in arch_settings.items()}


class StepPlacementMixin:
    """Validates depth, adaptor and placement before the upstream ResNet builds its layers,
    then gives each chosen block its adaptor (the arguments of :class:`StepResNet`).

    The adaptors normalise with the backbone's ``norm_cfg`` unless ``adaptor_norm_cfg`` is set.
    It also keeps the adaptors' start through ``init_weights`` and, under ``norm_eval``, lets
    the adaptors' BN learn the statistics a checkpoint did not hold (``adaptor_norm``).
    """

    def __init__(self, depth: int, adaptor: Optional[dict] = None,
                 adaptor_stages: Optional[Sequence[bool]] = None,
                 adaptor_blocks: Optional[Sequence[Optional[Sequence[int]]]] = None,
                 adaptor_norm: str = 'auto', adaptor_norm_cfg: Optional[dict] = None,
                 fused: Fused = 'auto', **kwargs):
        self.adaptor_norm = check_adaptor_norm(adaptor_norm)
        self.adaptor_norm_cfg = None if adaptor_norm_cfg is None \
            else check_norm_cfg(adaptor_norm_cfg)
        check_fused(fused)
        self._prepare_steps(depth, kwargs.get('num_stages', 4), adaptor, adaptor_stages,
                            adaptor_blocks)
        # a conflict between the adaptor's own norm_cfg and adaptor_norm_cfg fails here
        adaptor_with_norm(self.adaptor, None, self.adaptor_norm_cfg)
        super().__init__(depth, **kwargs)
        self.fused = fused
        set_fused(self, fused)

    def _prepare_steps(self, depth, num_stages, adaptor, adaptor_stages, adaptor_blocks):
        check_depth(depth, self.arch_settings, type(self).__name__)
        stage_blocks = self.arch_settings[depth][1][:num_stages]
        self.adaptor = resolve_adaptor(adaptor)
        self.adaptor_stages = adaptor_stages
        self.adaptor_blocks = adaptor_blocks
        self.adaptor_placement = adaptor_placement(stage_blocks, adaptor_stages, adaptor_blocks)

    def make_res_layer(self, **kwargs) -> nn.Sequential:
        """The stage the upstream ``make_res_layer(**kwargs)`` builds, each block the placement
        chooses in it given a new adaptor (its norm: ``adaptor_norm_cfg``, else the backbone's
        ``norm_cfg``); unchanged without an adaptor."""
        res_layer = super().make_res_layer(**kwargs)
        stage = len(self.res_layers)  # the upstream loop appends the name after this call
        adaptor = adaptor_with_norm(self.adaptor, self.norm_cfg, self.adaptor_norm_cfg)
        return attach_adaptors(res_layer, adaptor, self.adaptor_placement[stage])

    def init_weights(self) -> None:
        """The upstream initialisation (``init_cfg``, a ``Pretrained`` checkpoint last); then
        every adaptor the checkpoint did not hold gets its start back."""
        init_keeping_starts(self, super().init_weights)

    def train(self, mode: bool = True) -> nn.Module:
        """The upstream ``train`` (frozen stages, ``norm_eval``); then, under ``norm_eval``,
        the BN of the adaptors outside the frozen stages that ``adaptor_norm`` lets learn
        their statistics goes back to train mode."""
        super().train(mode)
        if mode and self.norm_eval:
            release_adaptor_statistics(unfrozen_res_layers(self), self.adaptor_norm, owner=self)
        return self


@MODELS.register_module()
class StepResNet(StepPlacementMixin, ResNet):
    """mmpretrain ResNet (depth 18/34/50/101/152) whose blocks are adaptive Euler steps.

    Args:
        depth (int): 18, 34 (BasicBlock) or 50, 101, 152 (Bottleneck).
        adaptor (dict, optional): config of the step-size adaptor, e.g.
            ``dict(type='mmstiff.StepNetAdaptor')``; each chosen block builds its own with
            ``channels`` and ``layout='nchw'`` filled in. None: every block is a plain step and
            the network is exactly mmpretrain's ``ResNet``.
        adaptor_stages (Sequence[bool], optional): which stages get adaptors (None: all).
        adaptor_blocks (Sequence[Sequence[int] | None], optional): per stage, which blocks
            (negative indices allowed); see :func:`mmstiff.models.steps.adaptor_placement`.
        adaptor_norm (str): under ``norm_eval=True``, which adaptor BN layers keep updating
            their statistics while every BN of the backbone is frozen: ``'auto'`` (default)
            those whose statistics the first loaded state dict lacked (none when nothing was
            loaded), ``'follow'`` none, ``'train'`` all; adaptors of frozen stages never
            (docs/methods.md §3, "Starting from a plain checkpoint").
        adaptor_norm_cfg (dict, optional): the norm layer of the adaptors that have one
            (StepNet), e.g. ``dict(type='SyncBN')``. None (default): the backbone's
            ``norm_cfg`` (docs/methods.md §3, "The adaptor's normalisation").
        fused (str | bool): ``'auto'`` (default) or False: the reference step; True: the fused
            step (:func:`~mmstiff.models.steps.choose_step`), with the same values
            (docs/methods.md §0, "The fused step").
        **kwargs: every other argument of mmpretrain's ``ResNet``.

    The adaptor sits after the last norm of the residual branch, before the add, and sees the
    shortcut output as ``x_t`` (docs/methods.md §1). Bad settings (depth, adaptor type, stage mask
    length, block index) raise ``ValueError`` naming the value before any layer is built.
    """

    arch_settings = step_arch_settings(ResNet.arch_settings, {
        BasicBlock: StepBasicBlock,
        Bottleneck: StepBottleneck
    })
