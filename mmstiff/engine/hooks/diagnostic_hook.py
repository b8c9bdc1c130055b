"""The base of the trajectory diagnostics hooks: when to record, on which blocks, how to log.

A hook records the training forward pass of every ``interval``-th iteration with a
:class:`~mmstiff.analysis.TrajectoryRecorder`, averages its scalars over the ranks and writes
them in batches to the visualizer and the MessageHub (docs/diagnostics.md, "How they run").
The batching and the means over ranks: :mod:`~mmstiff.engine.hooks.scalar_rows`.
"""
import logging
import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import torch
from mmengine.dist import get_world_size, is_main_process
from mmengine.hooks import Hook, LoggerHook
from mmengine.logging import HistoryBuffer, MessageHub, print_log
from mmengine.model import is_model_wrapper

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.analysis.blocks import block_types_of
from mmstiff.analysis.quantities import declaration_of
from mmstiff.analysis.trajectory import LEVELS, RecorderBase, StepRecord
from mmstiff.utils.checks import check_patterns, check_positive_int
from .backend_layout import group_per_step_keys
from .dashboard_hook import DashboardHook, checkpoint_flushes, write_run_dashboard
from .eager_recording import EAGER_WHILE_RECORDING, watch_hooks_when_compiled
from .scalar_log import LogRow, add_scalar_rows
from .scalar_rows import RecordedIteration, ScalarRow, reduce_rows_across_ranks

if TYPE_CHECKING:
    from mmengine.runner import Runner

#: values of each scalar kept in the MessageHub (and so in checkpoints): the latest ones, for
#: other hooks to read; the whole series is in the JSON log.
HISTORY_LENGTH = 1000
#: role of the recorder every diagnostic hook has: the trajectory of the residual steps.
TRAJECTORY = 'trajectory'


class TrajectoryDiagnosticHook(Hook):
    """Base class: record the trajectory every ``interval`` training iterations and log scalars.

    The base class drives: it starts and stops the recorders, keeps the recorded iterations
    and writes their rows. Subclasses implement its narrow hooks:

    * :meth:`reduce_step` (required): what to keep of each recorded step, during the forward
      pass;
    * :meth:`summarise_rows` (required): the ``{name: float}`` scalars of several recorded
      iterations (per rank), from the recorders' outputs;
    * :meth:`extra_recorders`: recorders besides the trajectory's, by role (none by default);
    * :attr:`end_pass`: at the end of each recorded forward pass (none by default);
    * :meth:`format_summary`: the console line (by default every scalar).

    Args:
        interval (int): record on the training batch of every ``interval``-th iteration.
        blocks (list[str], optional): fnmatch patterns of block names to record (names relative
            to ``module``, e.g. ``'layer1.*'``); None records every residual block.
        module (str, optional): attribute path of the submodule to record in the (unwrapped)
            model; ``'backbone'`` by default, None for the whole model. A model without a
            backbone is recorded whole; any other missing path is an error.
        level (str): ``'block'``, ``'branch'`` (the MSA and MLP steps of transformer layers
            separately) or ``'both'``.
        prefix (str): first component of the logged names.
        block_types (dict | list, optional): block classes of a model the built-in tables do
            not know, ``{class name: 'conv' | 'preact' | 'transformer' | dict(steps=[...])}``
            (docs/diagnostics.md, "Which modules are steps"); checked when the hook is built.
        dashboard (bool): where this is the first diagnostics hook of the run with
            ``dashboard=True`` and the config has no ``DashboardHook``, draw the run's
            dashboard into the work dir at every checkpoint and at the end of training
            (:mod:`~mmstiff.engine.hooks.dashboard_hook`). Default True.
    """

    priority = 'NORMAL'
    #: samples of the batch the recorder keeps (None: all); set by subclasses.
    num_samples = None
    #: a subclass's method run when a recorded forward pass of the recorded module ends, before
    #: the backward pass (to free what :meth:`reduce_step` held for the pass); None: nothing, and
    #: no module hook for it
    end_pass = None
    #: whether :meth:`reduce_step` reads the fused steps' sums of squares
    #: (:attr:`~mmstiff.analysis.StepRecord.sums`), asked of the steps by the recorder
    step_sums = False
    #: whether the recorder hooks the live states with gradient hooks, so that the training
    #: backward pass leaves the adjoint norms (:attr:`~mmstiff.analysis.StepRecord.adjoint`)
    adjoint = False
    #: the dashboard hook flushes every hook that says so before it reads the log
    writes_diagnostic_rows = True

    def __init__(self, interval: int, blocks: Optional[Union[str, Sequence[str]]] = None,
                 module: Optional[str] = 'backbone', level: str = 'branch', prefix: str = '',
                 block_types: Optional[Union[dict, Sequence[str]]] = None, dashboard: bool = True):
        self.interval = check_positive_int('interval', interval)
        if not isinstance(dashboard, bool):
            raise ValueError(f'dashboard={dashboard!r} is not supported; expected True or False')
        self.dashboard = dashboard
        self._draws_dashboard = False  # decided in before_train: one hook of a run draws it
        block_types_of(block_types)  # a bad entry stops the config build, naming it
        self.block_types = block_types
        self.blocks = check_patterns('blocks', blocks)
        if module is not None and not isinstance(module, str):
            raise ValueError(f'module={module!r} is not supported; expected None or an '
                             "attribute path such as 'backbone'")
        self.module = module
        if level not in LEVELS:
            raise ValueError(f'level={level!r} is not supported; expected one of {LEVELS}')
        self.level = level
        self.prefix = prefix
        self.recorders = {}  # role -> recorder, built in before_train
        self._pending = []  # RecordedIteration of the iterations not yet written
        # iterations between console summaries; lcm with the LoggerHook's in before_train
        self.console_interval = self.interval
        self._warned = False
        self._holding_eager = False  # whether this hook holds the compiler's eager stance

    # ------------------------------------------------------------------ model access
    def target_module(self, runner: 'Runner') -> torch.nn.Module:
        """The module the recorder hooks: ``module`` of the unwrapped model, or the model.

        A ``module`` path that does not exist raises ``ValueError`` naming the part that is
        missing and the submodules there; only the default ``'backbone'`` on a model without
        one records the whole model, saying so in the log.
        """
        model = runner.model
        if is_model_wrapper(model):
            model = model.module
        if not self.module:
            return model
        parts = self.module.split('.')
        sub = model
        for depth, attr in enumerate(parts):
            child = getattr(sub, attr, None)
            if isinstance(child, torch.nn.Module):
                sub = child
                continue
            if parts == ['backbone']:
                print_log(
                    f'{type(self).__name__}: {type(model).__name__} has no backbone; '
                    'recording the whole model', logger='current', level=logging.INFO)
                return model
            where = '.'.join(parts[:depth]) or 'the model'
            names = [name for name, _ in sub.named_children()]
            raise ValueError(f'module={self.module!r} is not a submodule: {where} '
                             f'({type(sub).__name__}) has no submodule {attr!r}; expected one '
                             f'of {names}, or module=None for the whole model')
        return sub

    def build_recorders(self, target: torch.nn.Module) -> Dict[str, RecorderBase]:
        """The recorders to start on a recorded iteration, by role: the trajectory's
        (:data:`TRAJECTORY`, reducing each step with :meth:`reduce_step`), then those of
        :meth:`extra_recorders`."""
        trajectory = TrajectoryRecorder(target, reduce=self.reduce_step, level=self.level,
                                        select=self.blocks, num_samples=self.num_samples,
                                        on_pass_end=self.end_pass, step_sums=self.step_sums,
                                        block_types=self.block_types, adjoint=self.adjoint)
        recorders = OrderedDict([(TRAJECTORY, trajectory)])
        recorders.update(self.extra_recorders(target, trajectory))
        return recorders

    def summarise(self, outputs: Dict[str, dict]) -> Dict[str, float]:
        """``{name: float}`` of one recorded iteration from its recorders' ``outputs``
        (``{role: recorder outputs}``)."""
        return self.summarise_rows([outputs])[0]

    # ------------------------------------------------------------------ subclass hooks
    def reduce_step(self, record: StepRecord) -> Any:  # pragma: no cover - abstract
        """What to keep of one recorded step (a :class:`~mmstiff.analysis.StepRecord`)."""
        raise NotImplementedError

    def summarise_rows(  # pragma: no cover - abstract
            self, rows: Sequence[Dict[str, dict]]) -> List[Dict[str, float]]:
        """The ``{name: float}`` scalars of several recorded iterations, one dict per row;
        ``rows``: each iteration's ``{role: recorder outputs}``."""
        raise NotImplementedError

    def extra_recorders(self, target: torch.nn.Module,
                        trajectory: TrajectoryRecorder) -> Dict[str, RecorderBase]:
        """Recorders besides the trajectory's, ``{role: recorder}``, on the module ``target``;
        ``trajectory`` is the trajectory recorder already built. None by default."""
        return {}

    def compact(self, outputs: Dict[str, dict]) -> Dict[str, dict]:
        """What a recorded iteration keeps until its row is written, from its recorders'
        ``outputs`` (``{role: recorder outputs}``): by default all of it. A subclass whose
        per-step values are large reduces them here, on the device, so that the iterations
        waiting for the next write hold little memory."""
        return outputs

    def format_summary(self, scalars: Dict[str, float]) -> str:
        """One console line; by default the scalars not per block."""
        return '  '.join(f'{k}: {v:.4g}' for k, v in scalars.items())

    # ------------------------------------------------------------------ hook points
    def before_train(self, runner: 'Runner') -> None:
        max_iters = getattr(runner, 'max_iters', None)
        if isinstance(max_iters, int) and self.interval > max_iters:
            print_log(
                f'{type(self).__name__}: interval={self.interval} is larger than the '
                f'{max_iters} training iterations; nothing will be recorded', logger='current',
                level=logging.WARNING)
        target = self.target_module(runner)
        self.recorders = self.build_recorders(target)
        watch_hooks_when_compiled(runner)
        log_intervals = [
            hook.interval for hook in getattr(runner, 'hooks', [])
            if isinstance(hook, LoggerHook) and isinstance(hook.interval, int) and hook.interval > 0
        ]
        self.console_interval = (
            math.lcm(self.interval, log_intervals[0]) if log_intervals else self.interval)
        hooks = list(getattr(runner, 'hooks', []))
        first = next((h for h in hooks if isinstance(h, TrajectoryDiagnosticHook) and h.dashboard),
                     None)
        self._draws_dashboard = first is self and not any(
            isinstance(h, DashboardHook) for h in hooks)

    def before_train_iter(self, runner: 'Runner', batch_idx: int,
                          data_batch: Optional[Union[dict, tuple, list]] = None) -> None:
        if self.recorders and self.every_n_train_iters(runner, self.interval):
            self._hold_eager()  # a compiled model runs this iteration eagerly, hooks and all
            for recorder in self.recorders.values():
                recorder.clear()
                recorder.start()

    def after_train_iter(self, runner: 'Runner', batch_idx: int,
                         data_batch: Optional[Union[dict, tuple, list]] = None,
                         outputs: Optional[dict] = None) -> None:
        if not self.recorders or not self.recorders[TRAJECTORY].active:
            return
        for recorder in self.recorders.values():
            recorder.stop()
        self._release_eager()
        self._pending.append(
            RecordedIteration(
                runner.iter + 1, runner.epoch + 1,
                self.compact({
                    role: recorder.outputs
                    for role, recorder in self.recorders.items()
                })))
        for recorder in self.recorders.values():
            recorder.clear()
        if (runner.iter + 1) % self.console_interval == 0:
            self.flush(runner)

    def after_train_epoch(self, runner: 'Runner') -> None:
        self.flush(runner)

    def after_train(self, runner: 'Runner') -> None:
        for recorder in self.recorders.values():
            recorder.stop()
            recorder.clear()
        self._release_eager()
        self.flush(runner)
        if self._draws_dashboard:
            write_run_dashboard(runner)

    def before_save_checkpoint(self, runner: 'Runner', checkpoint: dict) -> None:
        # MMEngine calls this on the main process alone
        if self._draws_dashboard:
            write_run_dashboard(runner, flush=checkpoint_flushes())

    def _hold_eager(self):
        if not self._holding_eager:
            EAGER_WHILE_RECORDING.hold()
            self._holding_eager = True

    def _release_eager(self):
        if self._holding_eager:
            self._holding_eager = False
            EAGER_WHILE_RECORDING.release()

    def flush(self, runner: 'Runner') -> None:
        """Summarise the recorded iterations not yet written and write them, one row each."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        summaries = self.summarise_rows([iteration.outputs for iteration in pending])
        rows = [
            ScalarRow(iteration.step, iteration.epoch, scalars)
            for iteration, scalars in zip(pending, summaries) if scalars
        ]
        if rows:
            self.write(runner, rows)

    # ------------------------------------------------------------------ logging
    @staticmethod
    def _is_optional(name):
        # a value that may be undefined (docs/diagnostics.md, "Logged quantities")
        declared = declaration_of(name)
        return declared is not None and declared.optional

    def write(self, runner: 'Runner', rows: Sequence[ScalarRow]) -> None:
        """Average ``rows`` (:class:`ScalarRow`, this rank's values) over the ranks and write
        each row at its step: MessageHub, visualizer backends, and a console line for a row at
        a console iteration."""
        named = [
            OrderedDict((f'{self.prefix}/{k}' if self.prefix else k, v)
                        for k, v in row.scalars.items()) for row in rows
        ]
        world = get_world_size()
        history = OrderedDict()  # name -> the values of the rows, in order
        log_rows = []
        for row, reduced in zip(rows, reduce_rows_across_ranks(named)):
            step, means = row.step, reduced.means
            bad = [k for k, c in reduced.counts.items() if c < world and not self._is_optional(k)]
            if bad and not self._warned:
                self._warned = True
                print_log(
                    f'{type(self).__name__}: non-finite values at iteration {step} for '
                    f'{bad[:8]}{" ..." if len(bad) > 8 else ""}; they are left out of the log '
                    '(this warning is shown once)', logger='current', level=logging.WARNING)
            if not means:
                continue
            for name, value in means.items():
                history.setdefault(name, []).append(value)
            log_rows.append(
                LogRow(
                    dict(means, iter=step, epoch=row.epoch), step,
                    diagnostics_log_name(runner.timestamp, means)))
            if step % self.console_interval == 0:
                runner.logger.info(f'Iter(train) [{step}] ' + self.format_summary(means))
        add_scalar_rows(runner.visualizer, log_rows)  # one append per JSON file
        if log_rows and is_main_process():
            group_per_step_keys(runner.visualizer, log_rows[0].scalars)
        for name, values in history.items():
            extend_history(runner.message_hub, name, values)


def diagnostics_log_name(timestamp: str, names: Iterable[str]) -> str:
    """The JSON log of a hook's rows in ``vis_data/``: ``<timestamp>_<namespace>.json``, with
    the namespace the first component of the first of ``names`` (``'stiffness'`` for
    ``stiffness/nsi/layer1.0``). Such a file holds one hook's rows, with the same names from
    row to row (but for a value not finite on any rank, which is left out), as mmpretrain's
    ``analyze_logs.py plot_curve`` needs to plot one of them."""
    namespace = next(iter(names)).split('/')[0]
    return f'{timestamp}_{namespace}.json'


def extend_history(hub: MessageHub, name: str, values: Sequence[float]) -> None:
    """Append ``values`` to the MessageHub's history of scalar ``name``, keeping the last
    :data:`HISTORY_LENGTH`; the same history as ``hub.update_scalar(name, v)`` for each ``v``
    would leave with that bound, in one array append instead of one per value."""
    buffers = hub.log_scalars
    if name not in buffers:
        buffers[name] = HistoryBuffer(max_length=HISTORY_LENGTH)
        hub.update_scalar(name, values[0])  # also marks it as resumed with checkpoints
        values = values[1:]
    if values:
        logs, counts = buffers[name].data
        buffers[name] = HistoryBuffer(
            np.append(logs, values)[-HISTORY_LENGTH:],
            np.append(counts, np.ones(len(values), dtype=counts.dtype))[-HISTORY_LENGTH:],
            max_length=HISTORY_LENGTH)
