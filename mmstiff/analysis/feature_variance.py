"""Feature-map variance along the trajectory (docs/methods.md §12).

:func:`feature_map_variance` is the metric, :func:`step_variance` a ``reduce`` for the
trajectory recorder, and :func:`variance_trajectory` orders its outputs into the states of the
How-do-ViTs paper's Fig. 9.
"""
from collections import OrderedDict
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch

from mmstiff.utils.checks import check_non_negative_int
from mmstiff.utils.layout import check_layout, infer_layout

if TYPE_CHECKING:
    from .trajectory import StepRecord

#: name of the state that enters the first recorded step.
INPUT = 'input'
#: suffix of the state a step starts from when it is not the previous step's output (a
#: projected shortcut: the subsampling between stages).
SHORTCUT_SUFFIX = '.shortcut'


class StepVariance(NamedTuple):
    """The feature-map variance around one recorded step.

    Attributes:
        name (str): the step's record name (``layer1.0``, ``layers.3.msa``).
        kind (str): the record's kind (``'block'``, ``'msa'``, ``'mlp'``).
        before (Tensor): ``(B,)`` variance of ``x_t``.
        after (Tensor): ``(B,)`` variance of ``x_{t+1}``.
        shape (tuple[int]): the state's shape without the batch axis (``x_t`` and ``x_{t+1}``
            share it).
    """
    name: str
    kind: str
    before: torch.Tensor
    after: torch.Tensor
    shape: Tuple[int, ...]


def feature_map_variance(x: torch.Tensor, layout: Optional[str] = None,
                         num_extra_tokens: int = 0) -> torch.Tensor:
    """Per-sample feature-map variance: over positions per channel (unbiased), mean over
    channels.

    Args:
        x (Tensor): ``(B, C, H, W)`` maps or ``(B, N, C)`` tokens.
        layout (str, optional): ``'nchw'`` or ``'nlc'``; inferred from ``x.dim()`` if None.
        num_extra_tokens (int): leading non-patch tokens of a token state, left out.

    Returns:
        Tensor: ``(B,)`` in float64 (nan where a state has a single position).
    """
    layout = infer_layout(x) if layout is None else check_layout(layout)
    check_non_negative_int('num_extra_tokens', num_extra_tokens)
    x = x.detach().double()
    if layout == 'nchw':
        if x.dim() != 4:
            raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, C, H, W) for nchw')
        positions = x.flatten(2)  # (B, C, P)
        return positions.var(dim=2).mean(dim=1)
    if x.dim() != 3:
        raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, N, C) for nlc')
    if num_extra_tokens >= x.shape[1]:
        raise ValueError(f'num_extra_tokens={num_extra_tokens} leaves no token of the '
                         f'{x.shape[1]}')
    return x[:, num_extra_tokens:].var(dim=1).mean(dim=1)


def step_variance(record: 'StepRecord', num_extra_tokens: int = 0) -> StepVariance:
    """A ``reduce`` for :class:`~mmstiff.analysis.TrajectoryRecorder`: the
    :class:`StepVariance` of one :class:`~mmstiff.analysis.StepRecord`.

    Use ``functools.partial(step_variance, num_extra_tokens=n)`` for token states with ``n``
    leading extra tokens.
    """
    extra = num_extra_tokens if record.x_t.dim() == 3 else 0
    return StepVariance(record.name, record.kind,
                        feature_map_variance(record.x_t, num_extra_tokens=extra),
                        feature_map_variance(record.x_next, num_extra_tokens=extra),
                        tuple(record.x_t.shape[1:]))


class VarianceState(NamedTuple):
    """One state of the trajectory and its variance.

    Attributes:
        kind (str): ``'input'``, ``'shortcut'`` (a projected state a step starts from) or the
            kind of the step it follows (``'block'``, ``'msa'``, ``'mlp'``).
        step (str): the record name of the step the state belongs to.
        variance (Tensor): ``(S,)`` per sample, over every recorded forward pass.
    """
    kind: str
    step: str
    variance: torch.Tensor


def variance_trajectory(
        outputs: Mapping[str, Sequence[StepVariance]]) -> 'OrderedDict[str, VarianceState]':
    """The states of the trajectory, in order, from a recorder's outputs of
    :func:`step_variance`.

    Args:
        outputs (Mapping[str, list[StepVariance]]): ``recorder.outputs``: per record name, one
            :class:`StepVariance` per forward pass (batches), in trajectory order.

    Returns:
        OrderedDict[str, VarianceState]: ``'input'`` (the state the first step starts from),
        then for every step its ``'<step>.shortcut'`` state where the step does not start
        from the previous step's state (its shape differs: a projection), and ``'<step>'``,
        the state after it. The variance of each holds every sample of every pass.
    """
    states = OrderedDict()
    previous_shape = None
    for name, calls in outputs.items():
        if not calls:
            continue
        before = torch.cat([c.before for c in calls])
        after = torch.cat([c.after for c in calls])
        shape = calls[0].shape
        if previous_shape is None:
            states[INPUT] = VarianceState(INPUT, name, before)
        elif shape != previous_shape:
            states[name + SHORTCUT_SUFFIX] = VarianceState('shortcut', name, before)
        states[name] = VarianceState(calls[0].kind, name, after)
        previous_shape = shape
    return states


__all__ = [
    'StepVariance', 'VarianceState', 'feature_map_variance', 'step_variance', 'variance_trajectory',
    'INPUT', 'SHORTCUT_SUFFIX'
]
