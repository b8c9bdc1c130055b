"""Log the neural stiffness of the training trajectory (METHODS.md §5; stepnet-appendix B, D)."""
import functools
from collections import OrderedDict

import torch

from mmstiff.analysis import (columnwise_pearson_correlation, mean_step_size,
                              nsi_step_correlation, stage_of, stiffness_norms,
                              trajectory_statistics)
from mmstiff.registry import HOOKS
from .diagnostic_hook import TrajectoryDiagnosticHook, _check_positive_int

#: name of the whole-network trajectory among the per-stage ones.
NETWORK = 'network'


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
      (``layer1``, ...) and of the whole network (``network``).

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

    Example:
        >>> custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=50)]
    """

    optional_metrics = ('nsi_step_corr', )

    def __init__(self, interval=50, blocks=None, module='backbone', level='branch',
                 log_blocks=False, num_samples=None):
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='stiffness')
        self.log_blocks = bool(log_blocks)
        self.num_samples = None if num_samples is None else _check_positive_int(
            'num_samples', num_samples)

    def reduce_step(self, record):
        # the recorder already kept only the first num_samples samples; the NSI's two norms,
        # divided for all steps at once in summarise
        slope, state = stiffness_norms(record.x_t, record.x_next, record.step)
        if record.step is None:
            return slope, state, None, False
        return slope, state, mean_step_size(record.step, slope.shape[0]), torch.is_tensor(
            record.step)

    def summarise(self, outputs):
        return self.summarise_rows([outputs])[0]

    def summarise_rows(self, rows):
        """The scalars of several recorded iterations, computed together when they share one
        trajectory (the same steps, each seen for the same number of samples): one stack of
        the NSI norms and one call of the stage statistics for all of them."""
        iterations = [outputs[0] for outputs in rows]
        lengths = [_trajectory_length(it) for it in iterations]
        names = list(iterations[0]) if iterations else []
        if all(lengths) and len(set(lengths)) == 1 and all(list(it) == names
                                                            for it in iterations):
            return self._summarise_trajectories(iterations, names)
        return [self._summarise_trajectories([it], list(it))[0] if length else
                self._summarise_steps(it) for it, length in zip(iterations, lengths)]

    def _summarise_trajectories(self, iterations, names):
        """Iterations with the same steps, each seen for the same number of samples."""
        k, t = len(iterations), len(names)
        columns = [_concat([c[i] for c in it[n]]) for i in (0, 1) for it in iterations
                   for n in names]  # the slopes of every iteration and step, then the states
        # (2 * iterations * steps, samples) -> NSI (iterations, samples, steps)
        both = torch.stack(columns).double().view(2, k, t, -1)
        zeta = (both[0] / both[1]).transpose(1, 2)
        stages, groups = _stage_groups(tuple(names))
        # a non-finite NSI in a stage makes that stage's μ, ratio and TNS non-finite (inf / inf
        # or NaN propagate), and write() leaves them out
        stats = trajectory_statistics(zeta.reshape(-1, t), groups.to(zeta.device))
        stats = torch.stack(stats).view(3, k, zeta.shape[1], -1).mean(dim=2)  # (3, k, stages)
        summaries = []
        for it, z, means, (mus, ratios, tnss) in zip(iterations, zeta, zeta.mean(dim=1).tolist(),
                                                     stats.transpose(0, 1).tolist()):
            scalars = self._block_scalars(it, names, means, z)
            for stage, mu, ratio, tns in zip(stages, mus, ratios, tnss):
                scalars[f'mu/{stage}'] = mu
                scalars[f'ratio/{stage}'] = ratio
                scalars[f'tns/{stage}'] = tns
            summaries.append(scalars)
        return summaries

    def _summarise_steps(self, outputs):
        """An iteration whose steps were seen for different numbers of samples (a block
        called more often than others): per-step scalars only, no common trajectory."""
        names = list(outputs)
        columns = [_concat([c[0] for c in outputs[n]]).double() /
                   _concat([c[1] for c in outputs[n]]).double() for n in names]
        return self._block_scalars(outputs, names, [float(c.mean()) for c in columns], columns)

    def _block_scalars(self, outputs, names, means, columns):
        """Per-step scalars of one iteration; ``columns``: the NSI of each step, a list or the
        columns of a (samples, steps) tensor."""
        scalars = OrderedDict((f'nsi/{name}', mean) for name, mean in zip(names, means))
        if any(c[2] is not None for calls in outputs.values() for c in calls):
            if torch.is_tensor(columns):
                columns = columns.unbind(dim=1)
            for name, step, corr in self._step_scalars(outputs, names, columns):
                scalars[f'step/{name}'] = step
                if corr is not None:
                    scalars[f'nsi_step_corr/{name}'] = corr
        return scalars

    @staticmethod
    def _step_scalars(outputs, names, columns):
        """``(name, mean step size, NSI-step correlation or None)`` of the steps with an
        adaptor; the correlations of all of them in one vectorised call."""
        found = []
        for name, column in zip(names, columns):
            calls = outputs[name]
            steps = [c[2] for c in calls if c[2] is not None]
            if steps:
                step = _concat(steps)
                varies = any(c[3] for c in calls) and step.numel() == column.numel()
                found.append((name, column, step, varies))
        if not found:
            return []
        means = torch.stack([step.double().mean() for _, _, step, _ in found]).tolist()
        pairs = [(column, step) for _, column, step, varies in found if varies]
        corrs = []
        if pairs and len({c.numel() for c, _ in pairs}) == 1:
            corrs = columnwise_pearson_correlation(torch.stack([c for c, _ in pairs], dim=1),
                                                   torch.stack([s for _, s in pairs],
                                                               dim=1)).tolist()
        elif pairs:
            corrs = [nsi_step_correlation(c, s) for c, s in pairs]
        corrs = iter(corrs)
        return [(name, mean, next(corrs) if varies else None)
                for (name, _, _, varies), mean in zip(found, means)]

    def format_summary(self, scalars):
        items = []
        for key, value in scalars.items():
            metric = key.split('/')[1]
            if metric in ('mu', 'ratio', 'tns') or (self.log_blocks and metric == 'nsi'):
                items.append(f'{key}: {value:.4g}')
        return '  '.join(items)


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
    lengths = {sum(c[0].numel() for c in calls) for calls in outputs.values()}
    return lengths.pop() if len(lengths) == 1 else 0


def _concat(tensors):
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)

