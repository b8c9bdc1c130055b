"""Neural stiffness index (NSI) and total neural stiffness (TNS) (docs/methods.md §5).

Tensors in, tensors (per sample) or Python floats (over the data) out; TNS in its closed form.
"""
import math
from typing import TYPE_CHECKING, NamedTuple, Optional, Union

import numpy as np
import torch
from torch.types import Device

from mmstiff.utils.step_sums import StepSums
from .stiffness_sums import StiffnessNorms, channel_step, stiffness_norms_from_sums
from .triton_sums import state_sums_apply, try_state_sums

if TYPE_CHECKING:
    from .scratch import ScratchBuffer

#: a step size Δ_t: a number, or a tensor broadcastable against the states
_StepSize = Union[torch.Tensor, float]


class TrajectoryStatistics(NamedTuple):
    """The per-trajectory numbers of :func:`trajectory_statistics`, float64 on the CPU.

    Attributes:
        mu (Tensor): μ = mean_t ζ_t.
        ratio (Tensor): the max/mean ratio ζ*/μ.
        area (Tensor): the TNS area ``(ζ*/μ - 1) · ζ*``.
    """
    mu: torch.Tensor
    ratio: torch.Tensor
    area: torch.Tensor


def _check_tensor(name, value, min_dim=1):
    if not torch.is_tensor(value):
        raise ValueError(f'{name} must be a torch.Tensor, got {type(value).__name__}')
    if value.dim() < min_dim:
        raise ValueError(f'{name} has shape {tuple(value.shape)}; expected at least {min_dim} '
                         'dimension(s) with the batch first')
    return value


def _broadcasts_to(shape, target):
    """Whether ``shape`` broadcasts to ``target`` unchanged, by the rule
    ``torch.broadcast_shapes`` applies (trailing sizes equal or 1), in plain Python, without a
    torch call: the recorders check every step's Δ."""
    if len(shape) > len(target):
        return False
    return all(size in (1, full) for size, full in zip(reversed(shape), reversed(target)))


def neural_stiffness_index(x_t: torch.Tensor, x_next: torch.Tensor,
                           step: Optional[_StepSize] = None) -> torch.Tensor:
    """Per-sample NSI of one Euler step, ζ_NSI(x_t) (Appendix B, Lemma 1; docs/methods.md §5).

    Args:
        x_t (Tensor): the state before the step, ``(B, ...)`` (for a block that downsamples,
            the shortcut output, so that it has the shape of ``x_next``).
        x_next (Tensor): the state after the step, same shape as ``x_t``.
        step (Tensor | float, optional): the step size Δ_t the block reports, broadcastable
            against ``x_t`` (e.g. ``(B, C, 1, 1)`` per channel); the difference is divided by it
            elementwise. None means Δ_t = 1 (plain residual block).

    Returns:
        Tensor: ``(B,)`` float tensor, ``||(x_next - x_t) / Δ_t||_2 / ||x_t||_2`` per sample
        (norms over all non-batch elements). Elements whose step size underflowed to 0 and
        that did not move (0 / 0) carry no slope information and count as 0; a zero state
        gives ``inf``; callers decide how to skip non-finite values.
    """
    norms = stiffness_norms(x_t, x_next, step)
    return norms.slope / norms.state


def stiffness_norms(x_t: torch.Tensor, x_next: torch.Tensor, step: Optional[_StepSize] = None,
                    scratch: Optional['ScratchBuffer'] = None) -> StiffnessNorms:
    """The numerator and denominator of the NSI, ``(||(x_next - x_t)/Δ_t||, ||x_t||)`` per sample.

    :func:`neural_stiffness_index` is their ratio; keeping the two ``(B,)`` norms lets a caller
    that reduces many steps divide them all at once. ``x_t``, ``x_next`` and ``step`` as for
    :func:`neural_stiffness_index`; ``scratch`` (a :class:`~mmstiff.analysis.ScratchBuffer`,
    optional) holds the difference ``x_next - x_t`` instead of a new tensor, for a caller that
    reduces step after step.

    On CUDA, for (B, C, H, W) maps or (B, N, C) tokens with Δ_t constant over the pooled axes
    (a number, per sample or per channel), one Triton kernel reads both states once and writes
    their per-channel sums of squares (:func:`~mmstiff.analysis.triton_sums.state_sums`): no
    difference is written. Either way the norms are numbers: no gradient flows through them.

    Returns:
        StiffnessNorms: ``(slope, state)``, two ``(B,)`` float tensors.
    """
    x_t, x_next, step = _checked_step(x_t, x_next, step)
    sums = _kernel_sums(x_t, x_next, step)
    if sums is not None:  # on the GPU: one pass over both states, no temporary
        return stiffness_norms_from_sums(sums, step)
    x_t = _as_float(x_t)
    features = tuple(range(1, x_t.dim()))
    # ||x_t|| first: the difference then reads x_t from the cache, not from memory
    state = torch.linalg.vector_norm(x_t, dim=features)
    # the one full-size temporary, ours to overwrite (float32: a float16 / bfloat16 state
    # under autocast is converted once, and the difference taken in place, exactly)
    diff = _difference(x_t, x_next, scratch)
    if step is None:
        return StiffnessNorms(torch.linalg.vector_norm(diff, dim=features), state)
    # ||diff / Δ||: Δ is constant along the axes where it has size 1 (a per-channel Δ over
    # the spatial axes), so take the norm along those first and divide the (small) result
    step = step.reshape((1, ) * (diff.dim() - step.dim()) + tuple(step.shape))
    axes = [i for i in range(1, diff.dim()) if step.shape[i] == 1]
    if axes:
        part = torch.linalg.vector_norm(diff, dim=axes, keepdim=True) / step
    else:  # a step per element: |diff| / Δ in place
        part = diff.abs_().div_(step)
    # a saturated adaptor (sigmoid underflow, Δ = 0) leaves 0 / 0 where nothing moved
    part.nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)
    return StiffnessNorms(torch.linalg.vector_norm(part.flatten(1), dim=1), state)


def kernel_step_sums(x_t: torch.Tensor, x_next: torch.Tensor,
                     step: Optional[_StepSize] = None) -> Optional[StepSums]:
    """The per-(sample, channel) sums of squares :func:`stiffness_norms` takes its norms from
    where it runs the Triton kernel (CUDA; (B, C, H, W) maps or (B, N, C) tokens; Δ_t constant
    over the pooled axes), for a caller that takes the norms of many steps at once
    (:func:`~mmstiff.analysis.stiffness_sums.norms_of_pending`).

    Args:
        x_t, x_next, step: as for :func:`stiffness_norms`; checked as it checks them where the
            kernel could take them (elsewhere :func:`stiffness_norms` checks them).

    Returns:
        StepSums | None: the sums, or None where :func:`stiffness_norms` reads the states with
        PyTorch's operators instead (off CUDA, a per-element Δ_t, a kernel that could not run).
    """
    if not (torch.is_tensor(x_t) and torch.is_tensor(x_next) and state_sums_apply(x_t, x_next)):
        return None  # (no check here: a CPU run pays for it once, in stiffness_norms)
    return _kernel_sums(*_checked_step(x_t, x_next, step))


def _checked_step(x_t, x_next, step):
    """``(x_t, x_next, step)`` checked: states of one shape (a per-sample number made a column),
    ``step`` None for Δ_t = 1 or a float32 tensor that broadcasts to the states."""
    _check_tensor('x_t', x_t)
    _check_tensor('x_next', x_next)
    if x_t.shape != x_next.shape:
        raise ValueError(f'x_next has shape {tuple(x_next.shape)}; expected the shape of x_t, '
                         f'{tuple(x_t.shape)}')
    if step is not None:
        if torch.is_tensor(step):
            step = _as_float(step)
        elif isinstance(step, bool) or not isinstance(step, (int, float)):
            raise ValueError(f'step={step!r} is not supported; expected None, a number or a '
                             'tensor broadcastable against x_t')
        if not torch.is_tensor(step) and float(step) == 1.0:
            step = None  # (a tensor is not read on the host: that would wait for the device)
    if x_t.dim() == 1:  # one number per sample
        x_t, x_next = x_t[:, None], x_next[:, None]
        if torch.is_tensor(step) and step.dim() == 1:
            step = step[:, None]
    if step is not None and not torch.is_tensor(step):
        step = torch.full((), float(step), device=x_t.device)  # filled there, not copied
    if step is not None and not _broadcasts_to(step.shape, x_t.shape):
        raise ValueError(f'step has shape {tuple(step.shape)}; expected a shape that '
                         f'broadcasts to the states, {tuple(x_t.shape)}')
    return x_t, x_next, step


def _kernel_sums(x_t, x_next, step):
    if not state_sums_apply(x_t, x_next):
        return None
    layout = 'nchw' if x_t.dim() == 4 else 'nlc'
    if step is not None and channel_step(step, layout) is None:
        return None  # a Δ_t that varies over the pooled axes, which the sums cannot divide
    return try_state_sums(x_t, x_next)


def _difference(x_t, x_next, scratch):
    """``x_next - x_t`` in float32 (``x_t`` already is), into ``scratch`` when given, else a
    new tensor. A float16 / bfloat16 ``x_next`` is promoted inside the subtraction, exactly."""
    out = (torch.empty_like(x_t) if scratch is None else scratch.take(x_next.shape, x_next.device))
    return torch.sub(x_next, x_t, out=out)


def _as_float(x):
    return x if x.dtype == torch.float32 else x.float()


def mean_step_size(step: _StepSize, batch_size: int, device: Device = None) -> torch.Tensor:
    """Per-sample mean of a step size Δ_t over its non-batch elements, ``(B,)``.

    A Python number or a tensor with a batch axis of 1 (a step shared by all samples) is
    broadcast to ``batch_size`` samples; a number's values are made on ``device`` (default the
    CPU), a tensor's stay on its own.
    """
    if torch.is_tensor(step):
        step = _as_float(step.detach())  # (no `to` call for a float32 Δ: none to launch)
        if step.dim() == 0:
            return step.expand(batch_size).clone()
        flat = step.reshape(step.shape[0], -1).mean(dim=1)
        if flat.shape[0] == 1 and batch_size != 1:
            flat = flat.expand(batch_size).clone()
        if flat.shape[0] != batch_size:
            raise ValueError(f'step has batch size {step.shape[0]}; expected {batch_size} or 1')
        return flat
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        raise ValueError(f'step={step!r} is not supported; expected a number or a tensor')
    return torch.full((batch_size, ), float(step), device=device)


def _check_trajectories(zeta):
    _check_tensor('zeta', zeta)
    if zeta.dim() != 2 or zeta.shape[1] == 0:
        raise ValueError(f'zeta has shape {tuple(zeta.shape)}; expected (num_samples, '
                         'num_steps) with at least one step (NSI per sample and block)')
    return zeta.double()


def trajectory_mean(zeta: torch.Tensor) -> torch.Tensor:
    """μ = mean_t ζ_NSI(x_t) of each trajectory; ``zeta`` is ``(num_samples, num_steps)``."""
    return _check_trajectories(zeta).mean(dim=1)


def trajectory_statistics(zeta: torch.Tensor,
                          groups: Optional[torch.Tensor] = None) -> TrajectoryStatistics:
    """μ, the max/mean ratio ζ*/μ and the TNS area ``(ζ*/μ - 1) · ζ*`` of each trajectory.

    One pass for the three per-trajectory numbers the other functions return one at a time
    (:func:`trajectory_mean`, :func:`stiffness_ratio`, :func:`tns_per_trajectory`), optionally
    for several trajectories made of subsets of the steps at once (each stage of a network and
    the whole network).

    Args:
        zeta (Tensor): ``(num_samples, num_steps)`` NSI of every block for each sample.
        groups (Tensor, optional): ``(num_groups, num_steps)`` bool, row ``g`` marking the
            steps of trajectory ``g`` (each row non-empty). None: one trajectory of all steps.

    Returns:
        TrajectoryStatistics: ``(mu, ratio, area)``, float64 on the CPU, each
        ``(num_samples,)``, or ``(num_samples, num_groups)`` with ``groups``.

    The matrix is small (samples × steps) and this runs at every recorded training iteration
    of :class:`~mmstiff.engine.hooks.StiffnessHook`: it is computed in NumPy, whose small-array
    operations cost less than tensor ops.
    """
    zeta = _check_trajectories(zeta).detach().cpu().numpy()
    if groups is None:
        peak, mean = zeta.max(axis=1), zeta.mean(axis=1)
    else:
        well_formed = (
            torch.is_tensor(groups) and groups.dtype == torch.bool and groups.dim() == 2
            and groups.shape[1] == zeta.shape[1])
        inside = groups.detach().cpu().numpy() if well_formed else None  # (G, T)
        sizes = None if inside is None else inside.sum(axis=1)
        if sizes is None or not sizes.all():
            raise ValueError(f'groups={groups!r} is not supported; expected a bool tensor '
                             f'(num_groups, {zeta.shape[1]}) with at least one step per row')
        steps = zeta[:, None, :]  # broadcast against the (G, T) membership
        mean = np.where(inside, steps, 0.0).sum(axis=2) / sizes
        peak = np.where(inside, steps, -np.inf).max(axis=2)
    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
        # μ = 0 (no block moves): ratio 1 by convention; a NaN μ stays NaN
        ratio = np.where(mean == 0, 1.0, peak / np.maximum(mean, np.finfo(mean.dtype).tiny))
        ratio = np.where(np.isnan(mean), mean, ratio)
        area = (ratio - 1.0) * peak
    return TrajectoryStatistics(*(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))
                                  for a in (mean, ratio, area)))


def stiffness_ratio(zeta: torch.Tensor) -> torch.Tensor:
    """The max/mean stiffness ratio ζ*/μ of each trajectory, ``(num_samples,)``.

    1 for a trajectory whose blocks are all equally stiff; large when one block dominates.
    A trajectory with μ = 0 has ratio 1 by convention (no block is stiffer than another).
    """
    return trajectory_statistics(zeta).ratio


def stiffness_event(zeta: torch.Tensor, m1: float, m2: float) -> torch.Tensor:
    """Whether each trajectory has a stiffness event at thresholds ``M = (m1, m2)``.

    ``∃t: ζ_NSI(x_t) >= max(μ (1 + m1), m2)`` (Appendix B, Lemma 1), ``(num_samples,)`` bool.
    """
    if m1 < 0 or m2 < 0:
        raise ValueError(f'thresholds (m1, m2)=({m1}, {m2}) are not supported; expected both '
                         '>= 0 (TNS integrates over the positive quadrant)')
    zeta = _check_trajectories(zeta)
    threshold = torch.clamp(zeta.mean(dim=1) * (1.0 + m1), min=m2)
    return (zeta >= threshold[:, None]).any(dim=1)


def stiffness_event_probability(zeta: torch.Tensor, m1: float, m2: float) -> float:
    """δ(M): the fraction of trajectories with a stiffness event at ``M = (m1, m2)``."""
    return float(stiffness_event(zeta, m1, m2).double().mean())


def tns_per_trajectory(zeta: torch.Tensor) -> torch.Tensor:
    """Area of the threshold set with a stiffness event, ``(ζ*/μ - 1) · ζ*`` per trajectory.

    Its mean over the data is TNS (docs/methods.md §5, closed form). A trajectory with ζ* = 0 has
    area 0.
    """
    return trajectory_statistics(zeta).area


def total_neural_stiffness(zeta: torch.Tensor) -> float:
    """TNS = ∬ δ(M) dM = E_x[(ζ*/μ - 1) · ζ*] (Appendix B, Theorem 1; docs/methods.md §5).

    Args:
        zeta (Tensor): ``(num_samples, num_steps)`` NSI of every block of the trajectory (a
            stage or the whole network) for every sample.

    Returns:
        float: the total neural stiffness of the trajectory over these samples.
    """
    return float(tns_per_trajectory(zeta).mean())


def pearson_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two 1-D samples; ``nan`` when either has zero variance.

    Args:
        a, b (Tensor): ``(n,)`` tensors with ``n >= 2``.
    """
    _check_tensor('a', a)
    _check_tensor('b', b)
    if a.dim() != 1 or a.shape != b.shape:
        raise ValueError(f'a and b have shapes {tuple(a.shape)} and {tuple(b.shape)}; expected '
                         'two 1-D tensors of the same length')
    return float(columnwise_pearson_correlation(a[:, None], b[:, None])[0])


def columnwise_pearson_correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of each column of ``a`` with the same column of ``b``.

    Args:
        a, b (Tensor): ``(n, k)`` tensors: ``k`` pairs of samples of ``n`` values each.

    Returns:
        Tensor: ``(k,)`` float64 correlations (the value of :func:`pearson_correlation` for
        each column pair); ``nan`` where a column has zero variance or ``n < 2``.
    """
    _check_tensor('a', a, min_dim=2)
    _check_tensor('b', b, min_dim=2)
    if a.dim() != 2 or a.shape != b.shape:
        raise ValueError(f'a and b have shapes {tuple(a.shape)} and {tuple(b.shape)}; expected '
                         'two (n, k) tensors of the same shape')
    if a.shape[0] < 2:
        return torch.full((a.shape[1], ), math.nan, dtype=torch.float64)
    a = a.double() - a.double().mean(dim=0)
    b = b.double() - b.double().mean(dim=0)
    den = torch.sqrt((a * a).sum(dim=0) * (b * b).sum(dim=0))
    corr = ((a * b).sum(dim=0) / den).clamp(-1.0, 1.0)
    return torch.where(den > 0, corr, torch.full_like(corr, math.nan))


def nsi_step_correlation(nsi: torch.Tensor, step_mean: torch.Tensor) -> float:
    """Pearson correlation between ζ_NSI(x_t) and mean(Δ_t) across samples (Appendix D).

    The paper reports it negative: a block facing a stiff slope takes smaller steps.

    Args:
        nsi (Tensor): ``(B,)`` per-sample NSI of one block.
        step_mean (Tensor): ``(B,)`` per-sample mean step size of that block
            (see :func:`mean_step_size`).

    Returns:
        float: the correlation, ``nan`` when undefined (fewer than two samples, or a constant
        NSI or step size, e.g. Δ ≡ const).
    """
    return pearson_correlation(nsi, step_mean)
