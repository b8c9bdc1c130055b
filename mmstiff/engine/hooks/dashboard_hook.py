"""The dashboard of a run, drawn into its work dir while it trains.

At every checkpoint and at the end of training the diagnostics hooks' pending rows are written,
and one figure of the run (:mod:`mmstiff.visualization.dashboard`: the loss and learning rate,
the validation metrics, the Hessian's top eigenvalue, heat strips of the per-step diagnostics) is
drawn from its JSON log into ``<work_dir>/dashboard.png`` and sent, as an image, to the
visualizer's other backends (TensorBoard, W&B, MLflow). The first diagnostics hook of a config
does this itself (``dashboard=True``, its default); :class:`DashboardHook` does it in a config
without one, or with other formats. matplotlib and the figure module load at the first drawing,
never at import (docs/diagnostics.md, "The dashboard").
"""
import logging
import os.path as osp
from typing import TYPE_CHECKING, List, Optional, Sequence

from mmengine.dist import get_world_size, is_main_process
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.visualization import LocalVisBackend

from mmstiff.registry import HOOKS

if TYPE_CHECKING:
    from mmengine.runner import Runner

FORMATS = ('png', 'svg', 'pdf')
#: the dashboard's file name in the work dir, without its extension
DASHBOARD_NAME = 'dashboard'


def check_formats(formats: Sequence[str]) -> tuple:
    """``formats`` as a tuple of :data:`FORMATS`; ``ValueError`` naming a bad one."""
    if isinstance(formats, str):
        formats = (formats, )
    formats = tuple(formats)
    if not formats or any(f not in FORMATS for f in formats):
        raise ValueError(f'dashboard formats={list(formats)!r} is not supported; expected a '
                         f'non-empty list of {FORMATS}')
    return formats


def flush_diagnostics(runner: 'Runner') -> None:
    """Write the rows every diagnostics hook of ``runner`` still holds (all ranks: the rows are
    averaged over them)."""
    for hook in getattr(runner, 'hooks', []):
        if getattr(hook, 'writes_diagnostic_rows', False):
            hook.flush(runner)


def write_run_dashboard(runner: 'Runner', formats: Sequence[str] = ('png', ),
                        to_backends: bool = True, flush: bool = True) -> Optional[List[str]]:
    """Flush the diagnostics hooks (with ``flush``: every rank must call this then), then (main
    process) draw the dashboard of the run's ``vis_data/scalars.json`` into
    ``<work_dir>/dashboard.<format>`` and send the PNG to the visualizer's backends other than
    its local one. Returns the paths written, or None (another rank, no JSON log, or a figure
    that failed: the run goes on, with a warning)."""
    if flush:
        flush_diagnostics(runner)
    log_dir, work_dir = getattr(runner, 'log_dir', None), getattr(runner, 'work_dir', None)
    if not is_main_process() or not isinstance(log_dir, str) or not isinstance(work_dir, str):
        return None
    log = osp.join(log_dir, 'vis_data', 'scalars.json')
    if not osp.isfile(log):
        return None
    try:
        from mmstiff.visualization.dashboard import dashboard_from_log, dashboard_image
        paths = dashboard_from_log(log, osp.join(work_dir, DASHBOARD_NAME), formats)
        if to_backends and 'png' in formats:
            _to_backends(runner, dashboard_image(paths[formats.index('png')]))
    except Exception as error:  # a figure never stops a training run
        print_log(f'the dashboard was not drawn: {type(error).__name__}: {error}', logger='current',
                  level=logging.WARNING)
        return None
    print_log(f'dashboard of the run: {paths[0]}', logger='current', level=logging.INFO)
    return paths


def _to_backends(runner, image):
    visualizer = getattr(runner, 'visualizer', None)
    backends = getattr(visualizer, '_vis_backends', None)
    if not isinstance(backends, dict):
        return
    step = int(getattr(runner, 'iter', 0))
    for backend in backends.values():
        if isinstance(backend, LocalVisBackend):
            continue  # the work dir has it; no copy per checkpoint under vis_data
        backend.add_image(DASHBOARD_NAME, image, step=step)


def checkpoint_flushes() -> bool:
    """Whether the dashboard of a checkpoint may flush the diagnostics hooks: MMEngine saves a
    checkpoint on the main process alone (``Runner.save_checkpoint`` is ``master_only``), where
    the rows' ``all_reduce`` would wait for the other ranks forever; under DDP the checkpoint's
    dashboard shows the rows written so far (an epoch's are, at its end, before its checkpoint)."""
    return get_world_size() == 1


@HOOKS.register_module()
class DashboardHook(Hook):
    """Draw the run's dashboard at every checkpoint and at the end of training.

    A diagnostics hook (``StiffnessHook``, ``FrequencyHook``) already does this by default;
    this hook is for a config with ``HessianHook`` alone or none, for other formats, or to keep
    the figure out of the backends. With it in a config, the diagnostics hooks leave the
    dashboard to it.

    Args:
        formats (list[str]): any of ``'png'``, ``'svg'``, ``'pdf'``. Default ``('png', )``.
        to_backends (bool): also send the PNG to the visualizer's backends other than its local
            one (TensorBoard, W&B, MLflow), at the current iteration. Default True.
    """

    priority = 'VERY_LOW'

    def __init__(self, formats: Sequence[str] = ('png', ), to_backends: bool = True):
        self.formats = check_formats(formats)
        self.to_backends = bool(to_backends)

    def before_save_checkpoint(self, runner: 'Runner', checkpoint: dict) -> None:
        write_run_dashboard(runner, self.formats, self.to_backends, flush=checkpoint_flushes())

    def after_train(self, runner: 'Runner') -> None:
        write_run_dashboard(runner, self.formats, self.to_backends)


__all__ = [
    'DashboardHook', 'write_run_dashboard', 'flush_diagnostics', 'check_formats',
    'checkpoint_flushes'
]
