"""Log the neural stiffness of the training trajectory (METHODS.md §5; stepnet-appendix B, D)."""
import math
from collections import OrderedDict

import torch

from mmstiff.analysis import (mean_step_size, neural_stiffness_index, nsi_step_correlation,
                              stage_of, stiffness_ratio, total_neural_stiffness, trajectory_mean)
from mmstiff.registry import HOOKS
from .diagnostic_hook import TrajectoryDiagnosticHook

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

    Example:
        >>> custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=50)]
    """

    optional_metrics = ('nsi_step_corr', )

    def __init__(self, interval=50, blocks=None, module='backbone', level='branch',
                 log_blocks=False):
        super().__init__(interval=interval, blocks=blocks, module=module, level=level,
                         prefix='stiffness')
        self.log_blocks = bool(log_blocks)

    def reduce_step(self, record):
        nsi = neural_stiffness_index(record.x_t, record.x_next, record.step)
        step = None
        if record.step is not None:
            step = mean_step_size(record.step, nsi.shape[0])
        return nsi, step, torch.is_tensor(record.step)

    def summarise(self, recorders):
        outputs = recorders[0].outputs
        names = list(outputs)
        # a block called several times in one iteration: every call is a sample
        columns = [torch.cat([c[0] for c in outputs[n]]) for n in names]
        scalars = OrderedDict()
        same_length = len({c.numel() for c in columns}) == 1
        if same_length:
            zeta = torch.stack(columns, dim=1).double()  # (samples, steps)
            means = zeta.mean(dim=0).tolist()
        else:
            means = [float(c.double().mean()) for c in columns]
        for j, name in enumerate(names):
            scalars[f'nsi/{name}'] = means[j]
            calls = outputs[name]
            steps = [c[1] for c in calls if c[1] is not None]
            if steps:
                step = torch.cat(steps)
                scalars[f'step/{name}'] = float(step.double().mean())
                if any(c[2] for c in calls) and step.numel() == columns[j].numel():
                    scalars[f'nsi_step_corr/{name}'] = nsi_step_correlation(columns[j], step)
        if not same_length:
            return scalars  # blocks seen a different number of times: no common trajectory
        trajectories = OrderedDict()
        for j, name in enumerate(names):
            trajectories.setdefault(stage_of(name) or NETWORK, []).append(j)
        trajectories[NETWORK] = list(range(len(names)))
        for stage, cols in trajectories.items():
            sub = zeta[:, cols]
            scalars[f'mu/{stage}'] = float(trajectory_mean(sub).mean())
            scalars[f'ratio/{stage}'] = float(stiffness_ratio(sub).mean())
            scalars[f'tns/{stage}'] = _finite_or_nan(total_neural_stiffness, sub)
        return scalars

    def format_summary(self, scalars):
        items = []
        for key, value in scalars.items():
            metric = key.split('/')[1]
            if metric in ('mu', 'ratio', 'tns') or (self.log_blocks and metric == 'nsi'):
                items.append(f'{key}: {value:.4g}')
        return '  '.join(items)


def _finite_or_nan(fn, zeta):
    if not torch.isfinite(zeta).all():
        return math.nan
    return fn(zeta)
