"""Sums of squares a fused residual step can hand to a trajectory recorder (docs/methods.md §0,
"The fused step"; the NSI they give: §5).

A recorder that needs only the norms of a block's steps opens a :class:`StepSumsRequest` on
the block when its forward pass starts (:func:`open_step_sums` sets it as the block's
``step_sums_request``); each fused step of the block appends its :class:`StepSums` to it (the
reference step gives none), and the recorder closes it when the block's forward pass ends.
Models and recorders meet here, in the lowest layer, so neither imports the other.
"""
from typing import List, NamedTuple, Optional

import torch


def is_step_block(module: object) -> bool:
    """Whether ``module`` is one of mmstiff's step blocks, which can run the fused step: its
    class has a ``fused`` switch (an upstream block has none, and gives no sums)."""
    return hasattr(type(module), 'fused')


class StepSums(NamedTuple):
    """Per-(sample, channel) sums of squares over the pooled axes of one step.

    Attributes:
        moved (Tensor): ``(B, C)`` float32 ``Σ (x_{t+1} - x_t)²``.
        state (Tensor): ``(B, C)`` float32 ``Σ x_t²``.
        layout (str): the states' layout, ``'nchw'`` or ``'nlc'``.
    """
    moved: torch.Tensor
    state: torch.Tensor
    layout: str

    def first(self, n: Optional[int]) -> 'StepSums':
        """The sums of the first ``n`` samples (all for None)."""
        if n is None:
            return self
        return StepSums(self.moved[:n], self.state[:n], self.layout)


class StepSumsRequest:
    """One block's request for the :class:`StepSums` of its steps.

    Args:
        state_act (bool): the recorder's ``x_t`` is the block's ReLU of the step's shortcut
            (a post-activation block's projected shortcut), not the shortcut itself.

    Attributes:
        sums (list): the :class:`StepSums` the block's steps gave, in order.
    """

    __slots__ = ('state_act', 'sums')

    def __init__(self, state_act: bool = False):
        self.state_act = bool(state_act)
        self.sums = []

    def complete(self, count: int) -> Optional[List[StepSums]]:
        """The sums of the block's ``count`` steps, or None unless each of them gave its sums."""
        if len(self.sums) != count or any(s is None for s in self.sums):
            return None
        return list(self.sums)


def open_step_sums(state_act: bool = False, block: Optional[object] = None) -> StepSumsRequest:
    """A new :class:`StepSumsRequest`, set as ``block``'s ``step_sums_request`` (its steps give
    their sums to it until :func:`close_step_sums`); with ``block`` None no step sees it."""
    request = StepSumsRequest(state_act)
    if block is not None:
        block.step_sums_request = request
    return request


def close_step_sums(request: StepSumsRequest, block: Optional[object] = None) -> None:
    """Take ``request`` off ``block`` (no effect where the block holds another request)."""
    if block is not None and getattr(block, 'step_sums_request', None) is request:
        block.step_sums_request = None
