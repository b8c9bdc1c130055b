"""mmpretrain's ``ResNet_CIFAR`` with step-size adaptors in its blocks (docs/methods.md §0, §1, §4).

The CIFAR variant differs from :class:`~mmstiff.models.backbones.StepResNet` only in its stem (a
3×3 stride-1 convolution, no max-pool), so it reuses the step blocks of ``step_resnet``: each block
computes ``x_{t+1} = act(x_t + Δ_t ⊙ f(x_t))`` with the adaptor after the last norm of the
residual branch, before the add. Parameter names are ``ResNet_CIFAR``'s, so its checkpoints load
with only the adaptors' parameters missing; with ``adaptor=None`` (or Δ ≡ 1) the outputs are
exactly ``ResNet_CIFAR``'s.
"""
from mmpretrain.models.backbones.resnet_cifar import ResNet_CIFAR

from mmstiff.registry import MODELS
from .step_resnet import StepPlacementMixin, StepResNet


@MODELS.register_module()
class StepResNet_CIFAR(StepPlacementMixin, ResNet_CIFAR):
    """``ResNet_CIFAR`` (3×3 stem, no max-pool) whose blocks are adaptive Euler steps.

    Args:
        depth (int): 18, 34 (basic blocks), 50, 101, 152 (bottlenecks), as ``ResNet_CIFAR``.
        adaptor (dict, optional): step-size adaptor config built in every chosen block, e.g.
            ``dict(type='mmstiff.StepNetAdaptor')``; None gives ``ResNet_CIFAR`` exactly.
        adaptor_stages (Sequence[bool], optional): which stages get adaptors (None: all).
        adaptor_blocks (Sequence[Sequence[int] | None], optional): per stage, which blocks get
            adaptors (None: all); see :func:`mmstiff.models.steps.adaptor_placement`.
        **kwargs: every other argument of mmpretrain's ``ResNet_CIFAR`` (``stem_channels``,
            ``base_channels``, ``out_indices``, ``norm_eval``, ...).

    Example:
        >>> import torch
        >>> net = StepResNet_CIFAR(depth=18, adaptor=dict(type='mmstiff.StepNetAdaptor'))
        >>> [tuple(y.shape) for y in net(torch.rand(2, 3, 32, 32))]
        [(2, 512, 4, 4)]
    """

    arch_settings = StepResNet.arch_settings
