"""The NSI's two norms from per-channel sums of squares, one step or many at once
(docs/methods.md §5; docs/diagnostics.md, "`StiffnessHook`").

A fused step, or the NSI's Triton kernel after a reference step, leaves per-(sample, channel)
sums of squares (:class:`~mmstiff.utils.step_sums.StepSums`). The norms are then four small
kernels per step (two sums over the channels, two square roots), more with a step size, each
a launch the host pays for between the blocks' large kernels. :func:`pending_norms` checks a
step's sums and Δ_t where they are recorded and launches nothing; :func:`norms_of_pending` then
takes the norms of every step of the iteration with one stacked computation per group of steps
of equal shapes (one group per stage of a ResNet). :func:`stiffness_norms_from_sums` is the
same for one step.
"""
import math
from collections import OrderedDict
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from mmstiff.utils.step_sums import StepSums


class StiffnessNorms(NamedTuple):
    """The two per-sample norms of the NSI, ``ζ = slope / state``
    (:func:`~mmstiff.analysis.stiffness_norms`).

    Attributes:
        slope (Tensor): ``(B,)`` ``||(x_{t+1} - x_t) / Δ_t||``.
        state (Tensor): ``(B,)`` ``||x_t||``.
    """
    slope: torch.Tensor
    state: torch.Tensor


class PendingNorms(NamedTuple):
    """A step's sums of squares and its Δ_t, checked, waiting for :func:`norms_of_pending`.

    Attributes:
        sums (StepSums): ``moved`` and ``state``, ``(B, C)`` float32.
        step (Tensor | float | None): Δ_t as the sums divide it: None for Δ_t = 1, a number, or
            a float32 ``(B or 1, C or 1)`` tensor (per sample, per channel or both).
    """
    sums: StepSums
    step: Optional[Union[torch.Tensor, float]]


def channel_step(step: torch.Tensor, layout: str) -> Optional[torch.Tensor]:
    """A step tensor of a state of ``layout`` as a float32 ``(B or 1, C or 1)`` tensor (a 0-d
    one for a single Δ), or None where it varies over the pooled axes (``H, W`` or the
    tokens), which the sums have summed over."""
    step = step if step.dtype == torch.float32 else step.float()
    if step.dim() == 0:
        return step
    pooled = (1, ) if layout == 'nlc' else (2, 3)
    if step.dim() != 1 + len(pooled) + 1 or any(step.shape[i] != 1 for i in pooled):
        return None
    return step.reshape(step.shape[0], -1)


def pending_norms(sums: StepSums, step: Optional[Union[torch.Tensor,
                                                       float]] = None) -> Optional[PendingNorms]:
    """``sums`` and ``step`` as a :class:`PendingNorms`, or None where ``step`` varies over
    the pooled axes (the caller takes the states then). No kernel is launched.

    Args:
        sums (StepSums): the step's sums of squares.
        step: Δ_t as for :func:`~mmstiff.analysis.stiffness_norms`: None, a number or a
            tensor broadcastable against the states.
    """
    if torch.is_tensor(step):
        step = channel_step(step, sums.layout)
        if step is None:
            return None
        return PendingNorms(sums, step.reshape(1, 1) if step.dim() == 0 else step)
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)):
            raise ValueError(f'step={step!r} is not supported; expected None, a number or a '
                             'tensor broadcastable against x_t')
        step = None if float(step) == 1.0 else float(step)
    return PendingNorms(sums, step)


def norms_of_pending(
    pending: Sequence[PendingNorms], step_means: bool = False
) -> Union[List[StiffnessNorms], List[Tuple[StiffnessNorms, Optional[torch.Tensor]]]]:
    """The :class:`StiffnessNorms` of each of ``pending`` (:class:`PendingNorms`), in order.

    Steps whose sums have one shape and device and whose Δ_t has one form (none, the same
    number, or tensors of one shape) are computed together: their sums stacked, then one
    reduction over the channels for all of them. The values are those of each step alone.

    With ``step_means``, each item is ``(norms, mean)`` instead, ``mean`` being the ``(B,)``
    per-sample mean of a tensor Δ_t over its channels
    (:func:`~mmstiff.analysis.mean_step_size`), taken from the same stacked Δ with one
    reduction per group, or None for a Δ_t that is not a tensor.
    """
    groups = OrderedDict()  # (sums' shape, device, Δ's form) -> indices into pending
    for i, item in enumerate(pending):
        step = item.step
        form = step if step is None or isinstance(step, float) else tuple(step.shape)
        key = (tuple(item.sums.moved.shape), item.sums.moved.device, form)
        groups.setdefault(key, []).append(i)
    norms = [None] * len(pending)
    means = [None] * len(pending)
    for (_, _, form), indices in groups.items():
        items = [pending[i] for i in indices]
        k = len(items)
        if form is None:  # Δ_t = 1: both norms in one reduction
            both = _stack([p.sums.moved for p in items] + [p.sums.state for p in items])
            both = both.sum(dim=-1).sqrt()
            slopes, states = both[:k], both[k:]
        else:
            states = _stack([p.sums.state for p in items]).sum(dim=-1).sqrt()
            step = form if isinstance(form, float) else _stack([p.step for p in items])
            # the norm over the pooled axes, then divided by the channel's Δ; a saturated
            # adaptor (Δ = 0) leaves 0 / 0 where nothing moved
            part = _stack([p.sums.moved for p in items]).sqrt() / step
            part.nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
            slopes = torch.linalg.vector_norm(part, dim=-1)
            if step_means and not isinstance(form, float):
                batch = items[0].sums.moved.shape[0]
                for i, mean in zip(indices, step.mean(dim=-1).expand(k, batch).unbind()):
                    means[i] = mean
        for i, slope, state in zip(indices, slopes.unbind(), states.unbind()):
            norms[i] = StiffnessNorms(slope, state)
    return list(zip(norms, means)) if step_means else norms


def stiffness_norms_from_sums(
        sums: StepSums, step: Optional[Union[torch.Tensor,
                                             float]] = None) -> Optional[StiffnessNorms]:
    """:func:`~mmstiff.analysis.stiffness_norms` from the per-(sample, channel) sums of squares
    a fused step wrote (:class:`~mmstiff.utils.step_sums.StepSums`), without another pass over
    the states.

    Args:
        sums (StepSums): ``moved`` ``(B, C)`` ``Σ (x_next - x_t)²`` and ``state`` ``(B, C)``
            ``Σ x_t²`` over the pooled axes of ``sums.layout``.
        step: Δ_t as for :func:`~mmstiff.analysis.stiffness_norms`.

    Returns:
        StiffnessNorms | None: the norms, or None where ``step`` is not constant over the pooled
        axes (per element), which the sums cannot divide: the caller takes the states then.
    """
    pending = pending_norms(sums, step)
    return None if pending is None else norms_of_pending([pending])[0]


def _stack(tensors):
    """``torch.stack``, but a view (no kernel) for a single tensor."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)
