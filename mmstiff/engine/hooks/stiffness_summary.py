"""The scalars :class:`~mmstiff.engine.hooks.StiffnessHook` logs, from resolved host records.

:func:`summarise_iterations` takes recorded iterations whose records
(:class:`~mmstiff.engine.hooks.step_stiffness.StepStiffness`) are resolved and on the host, and
gives each its ``{name: float}`` scalars, named as docs/diagnostics.md, "Logged quantities"
declares them (without the hook's ``stiffness/`` prefix). The iterations that share one
trajectory (the same steps, each seen for the same number of samples) are summarised together:
one stack of the NSI norms and one call of the stage statistics for all of them.
"""
import functools
from collections import OrderedDict
from typing import Dict, List, NamedTuple, Optional, Sequence

import torch

from mmstiff.analysis import (columnwise_pearson_correlation, nsi_step_correlation, stage_of,
                              trajectory_statistics)
from .step_stiffness import Steps

#: name of the whole-network trajectory among the per-stage ones.
NETWORK = 'network'


class StepSizeSummary(NamedTuple):
    """The step-size scalars of one step of one recorded iteration."""
    name: str
    mean: float
    nsi_correlation: Optional[float]  # None: Δ_t does not vary over the samples


class _AdaptedStep(NamedTuple):
    name: str
    nsi: torch.Tensor  # (B,) per-sample NSI
    step_size: torch.Tensor  # (B,) per-sample mean step size
    varies: bool


def summarise_iterations(iterations: Sequence[Steps], adjoint: bool) -> List[Dict[str, float]]:
    """The scalars of each of ``iterations`` (resolved records, float64 on the host), in order;
    with ``adjoint``, the adjoint norms and gains too."""
    summaries = [None] * len(iterations)
    trajectories = OrderedDict()  # (step names, samples per step) -> iteration indices
    for i, it in enumerate(iterations):
        length = _trajectory_length(it)
        if length:
            trajectories.setdefault((tuple(it), length), []).append(i)
        else:
            summaries[i] = _summarise_steps(it, adjoint)
    for (names, _), indices in trajectories.items():
        together = _summarise_trajectories([iterations[i] for i in indices], list(names), adjoint)
        for i, scalars in zip(indices, together):
            summaries[i] = scalars
    return summaries


def _summarise_trajectories(iterations, names, adjoint):
    """Iterations with the same steps, each seen for the same number of samples."""
    k, t = len(iterations), len(names)
    calls = [it[n] for it in iterations for n in names]  # every iteration's steps
    slopes = [_concat([c.slope for c in step_calls]) for step_calls in calls]
    states = [_concat([c.state for c in step_calls]) for step_calls in calls]
    # (2 * iterations * steps, samples) -> NSI (iterations, samples, steps)
    both = torch.stack(slopes + states).double().view(2, k, t, -1)
    zeta = (both[0] / both[1]).transpose(1, 2)
    stages, groups = _stage_groups(tuple(names))
    # a non-finite NSI in a stage makes that stage's μ, ratio and TNS non-finite (inf / inf
    # or NaN propagate), and the write leaves them out
    stats = trajectory_statistics(zeta.reshape(-1, t), groups.to(zeta.device))
    # (k, stages) means over the samples of each statistic
    mus, ratios, tnss = (
        s.view(k, zeta.shape[1], -1).mean(dim=1).tolist()
        for s in (stats.mu, stats.ratio, stats.area))
    summaries = []
    for i, (it, z, means) in enumerate(zip(iterations, zeta, zeta.mean(dim=1).tolist())):
        scalars = _step_scalars(it, names, means, z, adjoint)
        for stage, mu, ratio, tns in zip(stages, mus[i], ratios[i], tnss[i]):
            scalars[f'mu/{stage}'] = mu
            scalars[f'ratio/{stage}'] = ratio
            scalars[f'tns/{stage}'] = tns
        summaries.append(scalars)
    return summaries


def _summarise_steps(outputs, adjoint):
    """An iteration whose steps were seen for different numbers of samples (a block called
    more often than others): per-step scalars only, no common trajectory."""
    names = list(outputs)
    columns = [
        _concat([c.slope for c in outputs[n]]).double() / _concat([c.state
                                                                   for c in outputs[n]]).double()
        for n in names
    ]
    return _step_scalars(outputs, names, [float(c.mean()) for c in columns], columns, adjoint)


def _step_scalars(outputs, names, means, columns, adjoint):
    """Per-step scalars of one iteration; ``columns``: the NSI of each step, a list or the
    columns of a (samples, steps) tensor."""
    if torch.is_tensor(columns):
        columns = columns.unbind(dim=1)  # one (samples,) column per step
    scalars = OrderedDict((f'nsi/{name}', mean) for name, mean in zip(names, means))
    if adjoint:
        scalars.update(_adjoint_scalars(outputs, names))
    if any(c.step_size is not None for calls in outputs.values() for c in calls):
        for summary in _step_size_summaries(outputs, names, columns):
            scalars[f'step/{summary.name}'] = summary.mean
            if summary.nsi_correlation is not None:
                scalars[f'nsi_step_corr/{summary.name}'] = summary.nsi_correlation
    return scalars


def _step_size_summaries(outputs, names, columns):
    """A :class:`StepSizeSummary` of each step with an adaptor; the correlations of all of
    them in one vectorised call."""
    found = []
    for name, column in zip(names, columns):
        calls = outputs[name]
        steps = [c.step_size for c in calls if c.step_size is not None]
        if steps:
            step = _concat(steps)
            varies = any(c.step_varies for c in calls) and step.numel() == column.numel()
            found.append(_AdaptedStep(name, column, step, varies))
    if not found:
        return []
    if len({f.step_size.numel() for f in found}) == 1:
        means = torch.stack([f.step_size for f in found]).double().mean(dim=1).tolist()
    else:
        means = [float(f.step_size.double().mean()) for f in found]
    varying = [f for f in found if f.varies]
    corrs = []
    if varying and len({f.nsi.numel() for f in varying}) == 1:
        corrs = columnwise_pearson_correlation(
            torch.stack([f.nsi for f in varying], dim=1),
            torch.stack([f.step_size for f in varying], dim=1)).tolist()
    elif varying:
        corrs = [nsi_step_correlation(f.nsi, f.step_size) for f in varying]
    corrs = iter(corrs)
    return [
        StepSizeSummary(f.name, mean,
                        next(corrs) if f.varies else None) for f, mean in zip(found, means)
    ]


def _adjoint_scalars(outputs, names):
    """``adjoint/<step>``, ``adjoint_end/<step>`` and ``adjoint_gain/<step>`` of one iteration:
    the batch means of ``‖a_t‖``, ``‖a_{t+1}‖`` and ``‖a_t‖ / ‖a_{t+1}‖``, for the steps whose
    calls all had the adjoint at that end; one stacked computation per number of samples,
    whatever the number of steps."""
    starts, ends = OrderedDict(), OrderedDict()
    for name in names:
        calls = outputs[name]
        if calls and all(c.adjoint_start is not None for c in calls):
            starts[name] = _concat([c.adjoint_start for c in calls])
        if calls and all(c.adjoint_end is not None for c in calls):
            ends[name] = _concat([c.adjoint_end for c in calls])
    both = [n for n in starts if n in ends and starts[n].numel() == ends[n].numel()]
    found = {}
    for metric, columns in (('adjoint', starts), ('adjoint_end', ends), ('adjoint_gain', both)):
        groups = OrderedDict()  # samples -> names
        for name in columns:
            groups.setdefault((starts if metric != 'adjoint_end' else ends)[name].numel(),
                              []).append(name)
        for group in groups.values():
            if metric == 'adjoint_gain':
                values = (torch.stack([starts[n] for n in group]).double() /
                          torch.stack([ends[n] for n in group]).double()).mean(dim=1)
            else:
                values = torch.stack([columns[n] for n in group]).double().mean(dim=1)
            found.update(((metric, n), v) for n, v in zip(group, values.tolist()))
    scalars = OrderedDict()
    for metric in ('adjoint', 'adjoint_end', 'adjoint_gain'):
        for name in names:
            if (metric, name) in found:
                scalars[f'{metric}/{name}'] = found[(metric, name)]
    return scalars


@functools.lru_cache(maxsize=8)
def _stage_groups(names):
    """The stages (each stage, then the whole network) and their ``(stages, steps)`` bool
    membership, for one order of step names (the same at every recorded iteration)."""
    stages = OrderedDict()
    for j, name in enumerate(names):
        stages.setdefault(stage_of(name) or NETWORK, []).append(j)
    stages[NETWORK] = list(range(len(names)))
    groups = torch.zeros(len(stages), len(names), dtype=torch.bool)
    for g, cols in enumerate(stages.values()):
        groups[g, cols] = True
    return list(stages), groups


def _trajectory_length(outputs):
    """The number of samples every step of one iteration was seen for (all calls of a block
    pooled), or 0 when the steps differ in it or there is no step."""
    lengths = {sum(c.slope.numel() for c in calls) for calls in outputs.values()}
    return lengths.pop() if len(lengths) == 1 else 0


def _concat(tensors):
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


__all__ = ['summarise_iterations', 'StepSizeSummary', 'NETWORK']
