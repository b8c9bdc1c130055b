"""A step-size adaptor as an mmdet ResNet plugin (docs/methods.md §3).

mmdet's ``ResNet`` inserts plugins into its Bottleneck blocks by position; at
``position='after_conv3'`` a plugin maps the residual ``f`` (after ``norm3``) to ``Δ ⊙ f``
just before the add, so the block computes ``x_t + Δ ⊙ f`` — an adaptive Euler step:

    backbone=dict(
        type='ResNet', depth=50,
        plugins=[dict(cfg=dict(type='mmstiff.StepPlugin'),            # SE step by default
                      position='after_conv3', stages=(False, True, True, True))])

Why StepNet cannot be a plugin: a plugin only receives the branch tensor ``f``; the block
computes its shortcut ``x_t`` after the plugins have run, so ``GAP(x_t)`` and the next state
``x_t + f`` that StepNet's step size depends on are out of reach. StepNet (or any adaptor that
reads ``x_t``) therefore lives inside the block: use ``mmstiff.DetStepResNet`` (detection) or
``mmstiff.StepResNet`` (classification), which also work for BasicBlock depths 18 and 34,
where mmdet accepts no plugins at all.
"""
from typing import Optional

import torch
from mmengine.model import BaseModule

from mmstiff.models.steps import StepNetAdaptor, build_adaptor, resolve_adaptor
from mmstiff.registry import MODELS


@MODELS.register_module()
class StepPlugin(BaseModule):
    """``f -> Δ(f) ⊙ f`` with Δ from a step-size adaptor that reads the residual only.

    Args:
        in_channels (int): channels of ``f``; mmdet's plugin builder passes it.
        adaptor (dict): the step-size adaptor; default ``dict(type='mmstiff.SEAdaptor')``.
            Adaptors that need the state ``x_t`` (``StepNetAdaptor``) are refused, see the
            module docstring.
        init_cfg (dict, optional): MMEngine initialisation config.

    The adaptor is the ``step_adaptor`` submodule, so trajectory recorders find it the same
    way as in :class:`mmstiff.DetStepResNet`.
    """

    _abbr_ = 'step_plugin'

    def __init__(self, in_channels: int, adaptor: dict = dict(type='mmstiff.SEAdaptor'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if adaptor is None:
            raise ValueError("adaptor=None is not supported; expected a dict with a 'type', "
                             "e.g. dict(type='mmstiff.SEAdaptor')")
        resolved = resolve_adaptor(adaptor)
        if issubclass(resolved['type'], StepNetAdaptor):
            raise ValueError(f"adaptor type {adaptor['type']!r} needs the state x_t, which a "
                             "plugin never sees; use backbone type='mmstiff.DetStepResNet' "
                             "with adaptor=dict(type='mmstiff.StepNetAdaptor') instead")
        self.step_adaptor = build_adaptor(resolved, in_channels, 'nchw')

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        step = self.step_adaptor(None, f)
        return step * f
