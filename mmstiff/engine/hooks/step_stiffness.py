"""What :class:`~mmstiff.engine.hooks.StiffnessHook` keeps of one recorded step, and the one
place where what it waits for is taken.

A step's record is made during the forward pass (``StiffnessHook.reduce_step``), resolved once
after the backward pass (:func:`resolve_steps`, from the hook's ``compact``), brought to the
host with the other recorded iterations of a write (:func:`to_host`) and summarised
(:mod:`~mmstiff.engine.hooks.stiffness_summary`). Two things may wait in it, so that a recorded
pass launches nothing between the blocks' kernels: the NSI's norms, where the step's sums of
squares are there (a fused step's own pass, or the NSI kernel on the GPU;
:func:`~mmstiff.analysis.norms_of_pending` takes those of every step at once), and the adjoint
norms, which the backward pass leaves in the gradient hooks' slots (docs/methods.md §16).
"""
from collections import OrderedDict
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

import torch

from mmstiff.analysis import PendingNorms, norms_of_pending
from mmstiff.analysis.trajectory import AdjointEnds

#: one recorded iteration's steps: step name -> the record of each call of its block
Steps = Dict[str, List['StepStiffness']]


class StepStiffness(NamedTuple):
    """One recorded step (one call of a block), from the forward pass to its scalars.

    Attributes:
        slope (Tensor | None): ``(B,)`` ``||(x_{t+1} - x_t) / Δ_t||`` per sample, the NSI's
            numerator; None while ``sums`` waits.
        state (Tensor | None): ``(B,)`` ``||x_t||`` per sample, its denominator; None while
            ``sums`` waits.
        step_size (Tensor | None): ``(B,)`` mean step size Δ_t per sample; None for a step
            without an adaptor (Δ_t = 1), and for a tensor Δ_t while ``sums`` waits (its mean
            is taken with the norms).
        step_varies (bool): whether Δ_t is a tensor (it may vary over the samples, so its
            correlation with the NSI is defined).
        sums (PendingNorms | None): the step's sums of squares and Δ_t, waiting for
            :func:`resolve_steps`; None once the norms are there.
        adjoint (AdjointEnds | None): the gradient hooks' slots of the step's two ends, waiting
            for :func:`resolve_steps` after the backward pass; None once read (or without
            ``adjoint=True``).
        adjoint_start (Tensor | None): ``(B,)`` ``‖∂L/∂x_t‖`` per sample, divided by the AMP
            loss scale; None where ``x_t`` had no gradient or none was recorded.
        adjoint_end (Tensor | None): the same at ``x_{t+1}``.
    """
    slope: Optional[torch.Tensor]
    state: Optional[torch.Tensor]
    step_size: Optional[torch.Tensor]
    step_varies: bool
    sums: Optional[PendingNorms] = None
    adjoint: Optional[AdjointEnds] = None
    adjoint_start: Optional[torch.Tensor] = None
    adjoint_end: Optional[torch.Tensor] = None

    @property
    def resolved(self) -> bool:
        """Whether nothing waits in the record."""
        return self.sums is None and self.adjoint is None


def resolve_steps(steps: Optional[Steps],
                  loss_scale: Optional[Union[torch.Tensor, float]] = None) -> Optional[Steps]:
    """``steps`` with every record resolved: the norms of those whose sums wait, one stacked
    computation per group of steps of equal shapes, and the adjoint norms of every step, divided
    by ``loss_scale`` (None: 1) in one stacked operation per shape. ``steps`` itself where
    nothing waits; the values are those of each step computed alone."""
    if not steps or all(c.resolved for calls in steps.values() for c in calls):
        return steps
    pending = [c.sums for calls in steps.values() for c in calls if c.sums is not None]
    norms = iter(norms_of_pending(pending, step_means=True) if pending else ())
    adjoints = _adjoint_norms(steps, loss_scale)

    def resolve(c):
        if c.sums is not None:
            found, mean = next(norms)
            c = c._replace(slope=found.slope, state=found.state, sums=None,
                           step_size=c.step_size if c.step_size is not None else mean)
        if c.adjoint is not None:
            start, end = (None if s is None else adjoints.get(id(s)) for s in c.adjoint)
            c = c._replace(adjoint=None, adjoint_start=start, adjoint_end=end)
        return c

    return OrderedDict((name, [resolve(c) for c in calls]) for name, calls in steps.items())


def _adjoint_norms(steps, scale):
    """``{id(slot): norm / scale}`` of every gradient hook slot of ``steps`` that the backward
    pass reached, each slot once (the end of one step is the start of the next)."""
    slots = OrderedDict()
    for calls in steps.values():
        for c in calls:
            for slot in c.adjoint or ():
                if slot is not None and slot.norm is not None:
                    slots.setdefault(id(slot), slot)
    by_shape = OrderedDict()
    for key, slot in slots.items():
        by_shape.setdefault((slot.norm.shape, slot.norm.device), []).append(key)
    norms = {}
    for keys in by_shape.values():
        stacked = torch.stack([slots[k].norm for k in keys])
        if scale is not None:
            stacked = stacked / (scale.to(stacked.device) if torch.is_tensor(scale) else scale)
        norms.update(zip(keys, stacked.unbind()))
    return norms


#: the tensors of a resolved record that go to the host, in order
HOST_FIELDS = ('slope', 'state', 'step_size', 'adjoint_start', 'adjoint_end')


def to_host(iterations: Sequence[Steps]) -> List[Steps]:
    """Resolved recorded iterations with float64 CPU tensors: every norm, step size and
    adjoint norm of every step brought to the host in one transfer."""
    tensors = [
        t for it in iterations for calls in it.values() for c in calls
        for t in (getattr(c, f) for f in HOST_FIELDS) if t is not None
    ]
    if not tensors:
        return list(iterations)
    flat = torch.cat([t if t.dim() == 1 else t.reshape(-1) for t in tensors])
    parts = iter(flat.double().cpu().split([t.numel() for t in tensors]))

    def host(c):
        return c._replace(**{f: next(parts) for f in HOST_FIELDS if getattr(c, f) is not None})

    return [
        OrderedDict((name, [host(c) for c in calls]) for name, calls in it.items())
        for it in iterations
    ]


__all__ = ['StepStiffness', 'Steps', 'resolve_steps', 'to_host']
