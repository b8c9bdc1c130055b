"""The wiring every trajectory diagnostic shares: when to record, on which blocks, how to log.

A diagnostic hook rides on the training forward pass of the iterations at its interval: it
registers the forward hooks of a :class:`~mmstiff.analysis.TrajectoryRecorder` in
``before_train_iter`` and removes them in ``after_train_iter``, so the other iterations run
with no hook at all and no extra forward pass is ever made. The recorder reduces each block's
states on the fly (a few numbers per sample), under ``torch.no_grad()`` on detached tensors.

Logging. The scalars are averaged over ranks (``mmengine.dist.all_reduce``; a value that is not
finite on some rank is left out of the mean, and a value not finite on every rank is not
written), then

* written once, by rank 0, through ``runner.visualizer.add_scalars`` at ``step = iter + 1``:
  into ``vis_data/scalars.json`` and the run's ``vis_data/<timestamp>.json`` (the JSON log),
  and into every other configured backend (TensorBoard, ...);
* stored in the MessageHub (``runner.message_hub.update_scalar``) under the same names, with
  the last :data:`HISTORY_LENGTH` values kept (a hook at interval 1 would otherwise grow the
  MessageHub, and every checkpoint, by one value per name and iteration for the whole run);
* summarised on the console in one line, at the recorded iterations that are also logging
  iterations of the run's ``LoggerHook`` (every ``lcm(interval, logger interval)``
  iterations), so that a hook at interval 1 does not print a line per iteration; every
  recorded iteration when the run has no ``LoggerHook``.

The names have no ``train/`` prefix on purpose: the LogProcessor smooths every ``train/``
scalar over its ``window_size`` of *updates*, which for a scalar measured every ``interval``
iterations would average the last ``window_size`` measurements and repeat them at every log
step. Written directly, each value appears exactly once, at the iteration it was measured.
"""
import logging
import math
from collections import OrderedDict

import torch
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import Hook, LoggerHook
from mmengine.logging import HistoryBuffer, print_log
from mmengine.model import is_model_wrapper

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.analysis.trajectory import LEVELS

#: values of each scalar kept in the MessageHub (and so in checkpoints): the latest ones, for
#: other hooks to read; the whole series is in the JSON log.
HISTORY_LENGTH = 1000


def reduce_scalars_across_ranks(scalars):
    """Mean of each scalar over the ranks that have a finite value.

    Args:
        scalars (dict[str, float]): this rank's values; every rank must pass the same names
            (they come from the model's structure, so they do).

    Returns:
        tuple[OrderedDict[str, float], dict[str, int]]: the means of the names with at least
        one finite value, and for every name the number of ranks whose value was finite.
    """
    names = sorted(scalars)
    if get_world_size() == 1:
        values = [float(scalars[name]) for name in names]
        counts = {name: int(math.isfinite(v)) for name, v in zip(names, values)}
        return OrderedDict((n, v) for n, v in zip(names, values) if counts[n]), counts
    values = torch.tensor([float(scalars[name]) for name in names], dtype=torch.float64)
    finite = torch.isfinite(values)
    packed = torch.stack([torch.where(finite, values, torch.zeros_like(values)),
                          finite.double()])
    if get_world_size() > 1:
        all_reduce(packed, op='sum')
    means = OrderedDict()
    counts = {}
    for i, name in enumerate(names):
        count = int(round(float(packed[1, i])))
        counts[name] = count
        if count > 0:
            means[name] = float(packed[0, i]) / count
    return means, counts


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name}={value!r} is not supported; expected a positive int')
    return value


def _check_blocks(blocks):
    if blocks is None:
        return None
    if isinstance(blocks, str):
        blocks = [blocks]
    if not isinstance(blocks, (list, tuple)) or not all(isinstance(b, str) for b in blocks):
        raise ValueError(f'blocks={blocks!r} is not supported; expected None (every residual '
                         "block) or a list of fnmatch patterns of block names, e.g. "
                         "['layer1.*', 'layer3.0']")
    return list(blocks)


class TrajectoryDiagnosticHook(Hook):
    """Base class: record the trajectory every ``interval`` training iterations and log scalars.

    Subclasses implement :meth:`reduce_step` (per recorded step, during the forward pass) and
    :meth:`summarise` (after the iteration, per rank, ``{name: float}``).

    Args:
        interval (int): record on the training batch of every ``interval``-th iteration.
        blocks (list[str], optional): fnmatch patterns of block names to record (names relative
            to ``module``, e.g. ``'layer1.*'``); None records every residual block.
        module (str, optional): attribute path of the submodule to record in the (unwrapped)
            model; ``'backbone'`` by default, None for the whole model. A model without that
            attribute is recorded whole.
        level (str): ``'block'``, ``'branch'`` (the MSA and MLP steps of transformer layers
            separately) or ``'both'``.
        prefix (str): first component of the logged names.
    """

    priority = 'NORMAL'
    #: samples of the batch the recorder keeps (None: all); set by subclasses.
    num_samples = None
    #: scalar-name components whose non-finite values are expected (undefined) and not warned.
    optional_metrics = ()

    def __init__(self, interval, blocks=None, module='backbone', level='branch', prefix=''):
        self.interval = _check_positive_int('interval', interval)
        self.blocks = _check_blocks(blocks)
        if module is not None and not isinstance(module, str):
            raise ValueError(f'module={module!r} is not supported; expected None or an '
                             "attribute path such as 'backbone'")
        self.module = module
        if level not in LEVELS:
            raise ValueError(f'level={level!r} is not supported; expected one of {LEVELS}')
        self.level = level
        self.prefix = prefix
        self.recorders = []  # built in before_train
        # iterations between console summaries; lcm with the LoggerHook's in before_train
        self.console_interval = self.interval
        self._warned = False

    # ------------------------------------------------------------------ model access
    def target_module(self, runner):
        """The module the recorder hooks: ``module`` of the unwrapped model, or the model."""
        model = runner.model
        if is_model_wrapper(model):
            model = model.module
        if self.module:
            sub = model
            for attr in self.module.split('.'):
                sub = getattr(sub, attr, None)
                if sub is None:
                    return model
            return sub
        return model

    def build_recorders(self, target):
        """The recorders to start on a recorded iteration (a list)."""
        return [TrajectoryRecorder(target, reduce=self.reduce_step, level=self.level,
                                   select=self.blocks, num_samples=self.num_samples)]

    # ------------------------------------------------------------------ subclass API
    def reduce_step(self, record):  # pragma: no cover - abstract
        raise NotImplementedError

    def summarise(self, recorders):  # pragma: no cover - abstract
        raise NotImplementedError

    def format_summary(self, scalars):
        """One console line; by default the scalars not per block."""
        return '  '.join(f'{k}: {v:.4g}' for k, v in scalars.items())

    # ------------------------------------------------------------------ hook points
    def before_train(self, runner):
        max_iters = getattr(runner, 'max_iters', None)
        if isinstance(max_iters, int) and self.interval > max_iters:
            print_log(f'{type(self).__name__}: interval={self.interval} is larger than the '
                      f'{max_iters} training iterations; nothing will be recorded',
                      logger='current', level=logging.WARNING)
        target = self.target_module(runner)
        self.recorders = self.build_recorders(target)
        log_intervals = [hook.interval for hook in getattr(runner, 'hooks', [])
                         if isinstance(hook, LoggerHook) and isinstance(hook.interval, int)
                         and hook.interval > 0]
        self.console_interval = (math.lcm(self.interval, log_intervals[0])
                                 if log_intervals else self.interval)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if self.recorders and self.every_n_train_iters(runner, self.interval):
            for recorder in self.recorders:
                recorder.clear()
                recorder.start()

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if not self.recorders or not self.recorders[0].active:
            return
        for recorder in self.recorders:
            recorder.stop()
        scalars = self.summarise(self.recorders)
        for recorder in self.recorders:
            recorder.clear()
        if scalars:
            self.write(runner, scalars)

    def after_train(self, runner):
        for recorder in self.recorders:
            recorder.stop()
            recorder.clear()

    # ------------------------------------------------------------------ logging
    def _is_optional(self, name):
        parts = name.split('/')
        return len(parts) > 1 and parts[1] in self.optional_metrics

    def write(self, runner, scalars):
        scalars = OrderedDict((f'{self.prefix}/{k}' if self.prefix else k, v)
                              for k, v in scalars.items())
        means, counts = reduce_scalars_across_ranks(scalars)
        world = get_world_size()
        bad = [k for k, c in counts.items() if c < world and not self._is_optional(k)]
        if bad and not self._warned:
            self._warned = True
            print_log(
                f'{type(self).__name__}: non-finite values at iteration {runner.iter + 1} for '
                f'{bad[:8]}{" ..." if len(bad) > 8 else ""}; they are left out of the log '
                '(this warning is shown once)', logger='current', level=logging.WARNING)
        if not means:
            return
        hub = runner.message_hub
        for name, value in means.items():
            if name not in hub.log_scalars:
                hub.log_scalars[name] = HistoryBuffer(max_length=HISTORY_LENGTH)
            hub.update_scalar(name, value)
        runner.visualizer.add_scalars(dict(means), step=runner.iter + 1,
                                      file_path=f'{runner.timestamp}.json')
        if (runner.iter + 1) % self.console_interval == 0:
            runner.logger.info(f'Iter(train) [{runner.iter + 1}] ' + self.format_summary(means))


def mean_or_nan(values):
    """Mean of a list of floats, ``nan`` for an empty list."""
    return sum(values) / len(values) if values else math.nan
