"""Sums of squares a fused residual step can hand to a trajectory recorder (docs/methods.md §0,
"The fused step"; the NSI they give: §5).

A recorder that needs only the norms of a step asks for them by opening a
:class:`StepSumsRequest` when a block's forward pass starts; every residual step of the block
then appends its :class:`StepSums` (or None where it cannot give them: the reference step, an
activation or a rescaling the step does not see) to each open request, and the recorder closes
it when the block's forward pass ends. Models and recorders meet here, in the lowest layer, so
neither imports the other.
"""
from typing import NamedTuple

import torch


def is_step_block(module):
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

    def first(self, n):
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
        sums (list): what each step of the block gave, in order (a :class:`StepSums` or None).
    """

    __slots__ = ('state_act', 'sums')

    def __init__(self, state_act=False):
        self.state_act = bool(state_act)
        self.sums = []

    def complete(self, count):
        """The sums of the block's ``count`` steps, or None unless exactly ``count`` steps gave
        them."""
        if len(self.sums) != count or any(s is None for s in self.sums):
            return None
        return list(self.sums)


_OPEN = []  # the open requests, innermost last


def open_step_sums(state_act=False):
    """Open and return a :class:`StepSumsRequest` (close it with :func:`close_step_sums`)."""
    request = StepSumsRequest(state_act)
    _OPEN.append(request)
    return request


def close_step_sums(request):
    """Close ``request`` (no effect if it is not open)."""
    for i in range(len(_OPEN) - 1, -1, -1):
        if _OPEN[i] is request:
            del _OPEN[i]
            return


def open_requests():
    """The open requests, innermost last (a step gives its sums to each)."""
    return _OPEN
