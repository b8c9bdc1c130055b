"""Log the neural stiffness of the training trajectory, and its adjoint.

docs/methods.md §5; StepNet paper, Appendices B (NSI, TNS) and D (NSI against step size). The
adjoint ``a_t = ∂L/∂x_t`` at every step's two ends comes from the training backward pass, through
gradient hooks on the recorded states (docs/methods.md §16).
"""
import functools
from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Union

import torch

from mmstiff.analysis import (PendingNorms, ScratchBuffer, columnwise_pearson_correlation,
                              kernel_step_sums, mean_step_size, norms_of_pending,
                              nsi_step_correlation, pending_norms, stage_of, stiffness_norms,
                              trajectory_statistics)
from mmstiff.analysis.trajectory import AdjointEnds, StepRecord
from mmstiff.registry import HOOKS
from mmstiff.utils.checks import check_positive_int
from .diagnostic_hook import TRAJECTORY, TrajectoryDiagnosticHook

if TYPE_CHECKING:
    from mmengine.runner import Runner

#: name of the whole-network trajectory among the per-stage ones.
NETWORK = 'network'


class AdjointPair(NamedTuple):
    """The adjoint norms of one recorded step once the backward pass ran: ``(B,)``
    ``‖∂L/∂x_t‖`` (``start``) and ``‖∂L/∂x_{t+1}‖`` (``end``) per sample, divided by the AMP
    loss scale; None where that state had no gradient."""
    start: Optional[torch.Tensor]
    end: Optional[torch.Tensor]


class StepStiffness(NamedTuple):
    """What :class:`StiffnessHook` keeps of one recorded step (one call of a block).

    Attributes:
        slope (Tensor): ``(B,)`` ``||(x_{t+1} - x_t) / Δ_t||`` per sample, the NSI's numerator.
        state (Tensor): ``(B,)`` ``||x_t||`` per sample, its denominator.
        step_size (Tensor | None): ``(B,)`` mean step size Δ_t per sample; None for a step
            without an adaptor (Δ_t = 1).
        step_varies (bool): whether Δ_t is a tensor (it may vary over the samples, so its
            correlation with the NSI is defined).
        adjoint (AdjointEnds | AdjointPair | None): the step's adjoints: the gradient hooks'
            :class:`~mmstiff.analysis.trajectory.AdjointEnds` until
            :meth:`StiffnessHook.compact` reads them after the backward pass, an
            :class:`AdjointPair` of norms from then on; None with ``adjoint=False``.
    """
    slope: torch.Tensor
    state: torch.Tensor
    step_size: Optional[torch.Tensor]
    step_varies: bool
    adjoint: Optional[Union[AdjointEnds, AdjointPair]] = None


class PendingStep(NamedTuple):
    """A recorded step whose NSI norms wait for :meth:`StiffnessHook.compact`: its sums of
    squares and Δ_t (:class:`~mmstiff.analysis.PendingNorms`), and what
    :class:`StepStiffness` keeps besides the norms: ``step_size`` is None for a tensor Δ_t,
    whose per-sample mean :meth:`StiffnessHook.compact` takes with the norms."""
    norms: PendingNorms
    step_size: Optional[torch.Tensor]
    step_varies: bool
    adjoint: Optional[AdjointEnds] = None


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


@HOOKS.register_module()
class StiffnessHook(TrajectoryDiagnosticHook):
    """Per-block NSI and per-trajectory stiffness statistics of the training batch.

    Every ``interval`` iterations, on that iteration's training batch, the hook computes per
    residual step ``t`` and sample the NSI ``ζ_t = ||(x_{t+1} - x_t)/Δ_t|| / ||x_t||`` (Δ_t from
    the block's step-size adaptor, 1 without one) and logs, averaged over the batch and the
    ranks:

    * ``stiffness/nsi/<block>``: mean NSI of each step (transformer layers: ``<layer>.msa`` and
      ``<layer>.mlp``);
    * ``stiffness/step/<block>``: mean step size Δ_t, for steps with an adaptor;
    * ``stiffness/nsi_step_corr/<block>``: Pearson correlation over the batch between NSI and
      mean(Δ_t) (Appendix D), for steps with an adaptor whose Δ varies over the batch;
    * ``stiffness/mu/<stage>``, ``stiffness/ratio/<stage>``, ``stiffness/tns/<stage>``: the
      trajectory mean μ, the max/mean ratio ζ*/μ and the TNS (closed form) of each stage
      (``layer1``, ...) and of the whole network (``network``);
    * with ``adjoint=True`` (the default), from the same iteration's backward pass:
      ``stiffness/adjoint/<block>`` and ``stiffness/adjoint_end/<block>``, the mean over the
      batch of the per-sample ``‖∂L/∂x_t‖`` and ``‖∂L/∂x_{t+1}‖`` (divided by the AMP loss
      scale), and ``stiffness/adjoint_gain/<block>``, the mean of ``‖a_t‖ / ‖a_{t+1}‖``: how
      much the step amplifies (> 1) or damps (< 1) the gradient on its way back.

    Args:
        interval (int): record every ``interval`` training iterations. Default 50.
        blocks (list[str], optional): fnmatch patterns of the blocks to record (default: all).
        module (str, optional): submodule of the model to record. Default ``'backbone'``.
        level (str): ``'branch'`` (default: a transformer layer is two steps), ``'block'`` or
            ``'both'``.
        log_blocks (bool): also print the per-block NSI on the console (the JSON log and the
            visualizer backends always get them). Default False.
        num_samples (int, optional): compute on the first ``num_samples`` samples of the batch
            only; the cost of a recorded iteration shrinks in proportion, the statistics over
            the batch (TNS, the NSI-Δ correlation) get noisier. None (default): the whole
            batch.
        block_types (dict, optional): block classes the built-in tables do not know
            (``dict(MyBlock='conv')``; docs/diagnostics.md, "Which modules are steps").
        adjoint (bool): also log the adjoint norms and gains from the recorded iteration's own
            backward pass (one gradient hook per recorded state; no extra pass). Default True.
        dashboard (bool): draw the run's dashboard at checkpoints and at the end of training,
            where no other diagnostics hook before it or ``DashboardHook`` does. Default True.

    Example:
        >>> custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=50)]
    """

    # a gain is 0 / 0 where no gradient reaches a sample; a norm is inf where AMP's scaled
    # backward overflowed (that iteration's step is skipped): undefined, not warned about
    optional_metrics = ('nsi_step_corr', 'adjoint', 'adjoint_end', 'adjoint_gain')
    # a fused step's own pass gives the NSI's sums of squares (docs/methods.md §0)
    step_sums = True

    def __init__(self, interval: int = 50, blocks: Optional[Union[str, Sequence[str]]] = None,
                 module: Optional[str] = 'backbone', level: str = 'branch',
                 log_blocks: bool = False, num_samples: Optional[int] = None,
                 block_types: Optional[Union[dict, Sequence[str]]] = None, adjoint: bool = True,
                 dashboard: bool = True):
        if not isinstance(adjoint, bool):
            raise ValueError(f'adjoint={adjoint!r} is not supported; expected True or False')
        self.adjoint = adjoint
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='stiffness', block_types=block_types, dashboard=dashboard)
        self._loss_scale = None  # the AMP loss scale of the recorded iteration's backward
        self.log_blocks = bool(log_blocks)
        self.num_samples = check_positive_int('num_samples', num_samples, optional=True)
        # the difference x_{t+1} - x_t of every step of a recorded pass is written here
        self._scratch = ScratchBuffer()

    def reduce_step(self, record: StepRecord) -> Union[PendingStep, StepStiffness]:
        # the recorder already kept only the first num_samples samples. Where the step's sums
        # of squares are there (a fused step's own pass, or the NSI kernel over the states on
        # the GPU), the norms wait for compact(), which takes those of every step of the
        # iteration at once; else the norms from the states, with PyTorch's operators. The
        # norms are divided for all steps at once in summarise_rows. A tensor Δ_t's
        # per-sample mean waits for compact() too, taken from the stacked Δ the norms divide by.
        step = record.step
        varies = torch.is_tensor(step)
        sums = record.sums
        if sums is None:
            sums = kernel_step_sums(record.x_t, record.x_next, step)
        pending = None if sums is None else pending_norms(sums, step)
        step_size = None
        if step is not None and not (pending is not None and varies):
            step_size = mean_step_size(step, record.x_t.shape[0], record.x_t.device)
        if pending is not None:
            return PendingStep(pending, step_size, varies, record.adjoint)
        norms = stiffness_norms(record.x_t, record.x_next, step, scratch=self._scratch)
        return StepStiffness(norms.slope, norms.state, step_size, varies, record.adjoint)

    def before_train_iter(self, runner: 'Runner', batch_idx: int,
                          data_batch: Optional[Union[dict, tuple, list]] = None) -> None:
        super().before_train_iter(runner, batch_idx, data_batch)
        if self.adjoint and self.recorders and self.recorders[TRAJECTORY].active:
            # the scale this iteration's backward runs with: the scaler changes it only in the
            # optimizer step, after the backward pass
            self._loss_scale = loss_scale_of(runner)

    def compact(self, outputs: Dict[str, dict]) -> Dict[str, dict]:
        """``outputs`` with the norms of every :class:`PendingStep` taken: one stacked
        computation per group of steps of equal shapes (:func:`~mmstiff.analysis.
        norms_of_pending`), on the device, where each step took four to six small kernels."""
        steps = outputs.get(TRAJECTORY)
        pending = [] if not steps else [
            c.norms for calls in steps.values() for c in calls if isinstance(c, PendingStep)
        ]
        if pending:
            results = iter(norms_of_pending(pending, step_means=True))
            resolved = OrderedDict()
            for name, calls in steps.items():
                resolved[name] = [
                    _resolve(c, *next(results)) if isinstance(c, PendingStep) else c for c in calls
                ]
            steps = resolved
        if steps and self.adjoint:
            steps = _read_adjoints(steps, self._loss_scale)
        if steps is outputs.get(TRAJECTORY):
            return outputs
        return dict(outputs, **{TRAJECTORY: steps})

    def end_pass(self) -> None:
        # the difference buffer is not held through the backward pass
        self._scratch.release()

    def summarise_rows(self, rows: Sequence[Dict[str, dict]]) -> List[Dict[str, float]]:
        """The scalars of several recorded iterations. Every step's norms come to the host in
        one transfer; the iterations that share one trajectory (the same steps, each seen for
        the same number of samples) are then summarised together: one stack of the NSI norms
        and one call of the stage statistics for all of them."""
        # rows from the hook's own recorded iterations are compacted already; others (a
        # recorder's outputs summarised directly) are here
        iterations = _to_host([self.compact(outputs)[TRAJECTORY] for outputs in rows])
        summaries = [None] * len(iterations)
        trajectories = OrderedDict()  # (step names, samples per step) -> iteration indices
        for i, it in enumerate(iterations):
            length = _trajectory_length(it)
            if length:
                trajectories.setdefault((tuple(it), length), []).append(i)
            else:
                summaries[i] = self._summarise_steps(it)
        for (names, _), indices in trajectories.items():
            together = self._summarise_trajectories([iterations[i] for i in indices], list(names))
            for i, scalars in zip(indices, together):
                summaries[i] = scalars
        return summaries

    def _summarise_trajectories(self, iterations, names):
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
        # or NaN propagate), and write() leaves them out
        stats = trajectory_statistics(zeta.reshape(-1, t), groups.to(zeta.device))
        # (k, stages) means over the samples of each statistic
        mus, ratios, tnss = (
            s.view(k, zeta.shape[1], -1).mean(dim=1).tolist()
            for s in (stats.mu, stats.ratio, stats.area))
        summaries = []
        for i, (it, z, means) in enumerate(zip(iterations, zeta, zeta.mean(dim=1).tolist())):
            scalars = self._block_scalars(it, names, means, z)
            for stage, mu, ratio, tns in zip(stages, mus[i], ratios[i], tnss[i]):
                scalars[f'mu/{stage}'] = mu
                scalars[f'ratio/{stage}'] = ratio
                scalars[f'tns/{stage}'] = tns
            summaries.append(scalars)
        return summaries

    def _summarise_steps(self, outputs):
        """An iteration whose steps were seen for different numbers of samples (a block
        called more often than others): per-step scalars only, no common trajectory."""
        names = list(outputs)
        columns = [
            _concat([c.slope
                     for c in outputs[n]]).double() / _concat([c.state
                                                               for c in outputs[n]]).double()
            for n in names
        ]
        return self._block_scalars(outputs, names, [float(c.mean()) for c in columns], columns)

    def _block_scalars(self, outputs, names, means, columns):
        """Per-step scalars of one iteration; ``columns``: the NSI of each step, a list or the
        columns of a (samples, steps) tensor."""
        scalars = OrderedDict((f'nsi/{name}', mean) for name, mean in zip(names, means))
        if self.adjoint:
            scalars.update(_adjoint_scalars(outputs, names))
        if any(c.step_size is not None for calls in outputs.values() for c in calls):
            if torch.is_tensor(columns):
                columns = columns.unbind(dim=1)
            for summary in self._step_scalars(outputs, names, columns):
                scalars[f'step/{summary.name}'] = summary.mean
                if summary.nsi_correlation is not None:
                    scalars[f'nsi_step_corr/{summary.name}'] = summary.nsi_correlation
        return scalars

    @staticmethod
    def _step_scalars(outputs, names, columns):
        """A :class:`StepSizeSummary` of each step with an adaptor; the correlations of all
        of them in one vectorised call."""
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

    def format_summary(self, scalars: Dict[str, float]) -> str:
        items = []
        for key, value in scalars.items():
            metric = key.split('/')[1]
            if metric in ('mu', 'ratio', 'tns') or (self.log_blocks and metric == 'nsi'):
                items.append(f'{key}: {value:.4g}')
        return '  '.join(items)


def _resolve(pending, norms, step_mean):
    """The :class:`StepStiffness` of a :class:`PendingStep` given its norms and, for a tensor
    Δ_t, its per-sample mean from :func:`~mmstiff.analysis.norms_of_pending`."""
    step_size = pending.step_size if pending.step_size is not None else step_mean
    return StepStiffness(norms.slope, norms.state, step_size, pending.step_varies, pending.adjoint)


def loss_scale_of(runner: 'Runner') -> Optional[Union[torch.Tensor, float]]:
    """The loss scale the runner's next backward pass runs with: that of an enabled AMP
    ``GradScaler`` of its optimizer wrapper (a copy of the scaler's own tensor, read without a
    synchronisation), or None (no AMP, or AMP without loss scaling)."""
    wrappers = getattr(runner, 'optim_wrapper', None)
    if hasattr(wrappers, 'values') and not hasattr(wrappers, 'loss_scaler'):
        wrappers = list(wrappers.values())  # an OptimWrapperDict
    for wrapper in wrappers if isinstance(wrappers, list) else [wrappers]:
        scaler = getattr(wrapper, 'loss_scaler', None)
        enabled = getattr(scaler, 'is_enabled', None)
        if scaler is None or not callable(enabled) or not enabled():
            continue
        scale = getattr(scaler, '_scale', None)
        if torch.is_tensor(scale):
            return scale.detach().clone()
        # the scaler makes its scale at its first use, from its initial value
        return float(getattr(scaler, '_init_scale', 1.0))
    return None


def _read_adjoints(steps, scale):
    """``steps`` with each call's :class:`~mmstiff.analysis.trajectory.AdjointEnds` read into an
    :class:`AdjointPair` of norms, divided by the loss ``scale`` (None: 1) in one stacked
    operation per shape for all of them."""
    slots = OrderedDict()  # id -> AdjointNorm with a norm, each once
    for calls in steps.values():
        for c in calls:
            if isinstance(c.adjoint, AdjointEnds):
                for slot in c.adjoint:
                    if slot is not None and slot.norm is not None:
                        slots.setdefault(id(slot), slot)
    if not any(isinstance(c.adjoint, AdjointEnds) for calls in steps.values() for c in calls):
        return steps
    norms = {}
    if slots:
        by_shape = OrderedDict()
        for key, slot in slots.items():
            by_shape.setdefault((slot.norm.shape, slot.norm.device), []).append(key)
        for keys in by_shape.values():
            stacked = torch.stack([slots[k].norm for k in keys])
            if scale is not None:
                stacked = stacked / (scale.to(stacked.device) if torch.is_tensor(scale) else scale)
            norms.update(zip(keys, stacked.unbind()))

    def pair(ends):
        if not isinstance(ends, AdjointEnds):
            return ends
        return AdjointPair(*(None if s is None else norms.get(id(s)) for s in ends))

    return OrderedDict((name, [c._replace(adjoint=pair(c.adjoint)) for c in calls])
                       for name, calls in steps.items())


def _adjoint_scalars(outputs, names):
    """``adjoint/<step>``, ``adjoint_end/<step>`` and ``adjoint_gain/<step>`` of one iteration
    (host tensors): the batch means of ``‖a_t‖``, ``‖a_{t+1}‖`` and ``‖a_t‖ / ‖a_{t+1}‖``, for the
    steps whose calls all had the adjoint at that end; one stacked computation per number of
    samples, whatever the number of steps."""
    starts, ends = OrderedDict(), OrderedDict()
    for name in names:
        pairs = [c.adjoint for c in outputs[name]]
        if not pairs or not all(isinstance(p, AdjointPair) for p in pairs):
            continue
        if all(p.start is not None for p in pairs):
            starts[name] = _concat([p.start for p in pairs])
        if all(p.end is not None for p in pairs):
            ends[name] = _concat([p.end for p in pairs])
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


def _host_tensors(c):
    """The tensors of one :class:`StepStiffness` that go to the host, in order."""
    adjoint = c.adjoint if isinstance(c.adjoint, AdjointPair) else (None, None)
    return (c.slope, c.state, c.step_size) + tuple(adjoint)


def _to_host(iterations):
    """The recorded iterations' :class:`StepStiffness` with float64 CPU tensors, every norm,
    step size and adjoint norm of every step brought to the host in one transfer."""
    tensors = [
        t for it in iterations for calls in it.values() for c in calls for t in _host_tensors(c)
        if t is not None
    ]
    if not tensors:
        return iterations
    flat = torch.cat([t if t.dim() == 1 else t.reshape(-1) for t in tensors])
    parts = iter(flat.double().cpu().split([t.numel() for t in tensors]))

    def host(c):
        values = [None if t is None else next(parts) for t in _host_tensors(c)]
        adjoint = AdjointPair(*values[3:]) if isinstance(c.adjoint, AdjointPair) else None
        return StepStiffness(values[0], values[1], values[2], c.step_varies, adjoint)

    return [
        OrderedDict((name, [host(c) for c in calls]) for name, calls in it.items())
        for it in iterations
    ]


def _concat(tensors):
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)
