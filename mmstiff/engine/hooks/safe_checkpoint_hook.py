"""MMEngine's ``CheckpointHook`` with checkpoints that survive a crash at any moment.

MMEngine's hook writes ``iter_N.pth`` and ``last_checkpoint`` in place and, with
``max_keep_ckpts``, removes the oldest checkpoint *before* writing the new one. A process
killed in the middle of a save (preemption, out-of-memory killer, Ctrl-C of a launcher) then
leaves a truncated checkpoint, an empty ``last_checkpoint``, and with ``max_keep_ckpts=1`` no
loadable checkpoint at all. This hook changes only the order and the way of writing:

1. the checkpoint is written to a hidden partial file beside it, flushed to disk and renamed
   into place (:class:`~mmstiff.engine.atomic_files.AtomicLocalBackend`, for checkpoints on
   the local disk; other storage backends are used as configured);
2. then ``last_checkpoint`` is replaced the same way;
3. only then are the checkpoints beyond ``max_keep_ckpts`` (and a previous best checkpoint)
   removed.

So at every moment ``last_checkpoint`` names a complete checkpoint. Partial files left by a
killed run are removed when the next run starts. Each checkpoint's meta also records the number
of processes and the batch size, so that a run resumed on another number of processes skips
the samples already seen, not a number of batches (:mod:`mmstiff.engine.world_size`). Every
argument is MMEngine's; ``tools/train.py`` puts this hook in place of
``default_hooks.checkpoint`` of type ``CheckpointHook``.
"""
import os.path as osp
from collections import deque
from contextlib import contextmanager
from typing import TYPE_CHECKING

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, get_file_backend
from mmengine.hooks import CheckpointHook

from mmstiff.engine.atomic_files import ATOMIC_BACKEND, remove_partial_files, write_atomic
from mmstiff.engine.world_size import layout_change, run_layout
from mmstiff.registry import HOOKS

if TYPE_CHECKING:
    from mmengine.runner import Runner

LAST_CHECKPOINT = 'last_checkpoint'


class _DeferredRemoval:
    """A file backend whose ``remove`` / ``rmtree`` wait until :meth:`flush`."""

    def __init__(self, backend):
        self._backend = backend
        self.pending = []

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def remove(self, path):
        self.pending.append(path)

    def rmtree(self, path):
        self.pending.append(path)

    def flush(self):
        for path in self.pending:
            if self._backend.isfile(path):
                self._backend.remove(path)
            elif self._backend.isdir(path):  # checkpoints saved by DeepSpeed are folders
                self._backend.rmtree(path)
        self.pending = []


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` that writes atomically and removes old checkpoints last.

    Args:
        Those of :class:`mmengine.hooks.CheckpointHook`, unchanged.
    """

    def before_train(self, runner: 'Runner') -> None:
        out_dir = self.out_dir if self.out_dir is not None else runner.work_dir
        if self.file_client_args is None and type(
                get_file_backend(out_dir, backend_args=self.backend_args)) is LocalBackend:
            self.backend_args = dict(backend=ATOMIC_BACKEND)
        super().before_train(runner)
        if is_main_process():
            for folder in sorted({runner.work_dir, self.out_dir}):  # local folders only
                for path in remove_partial_files(folder):
                    runner.logger.warning(f'Removed {path}, a partial file of a write that '
                                          'did not finish.')
        self._skip_by_samples(runner)

    def before_save_checkpoint(self, runner: 'Runner', checkpoint: dict) -> None:
        checkpoint.setdefault('meta', {}).update(run_layout(runner))

    def after_load_checkpoint(self, runner: 'Runner', checkpoint: dict) -> None:
        self._loaded_meta = dict(checkpoint.get('meta') or {})

    def _skip_by_samples(self, runner):
        """On resuming an iteration-based run with another layout, advance the dataloader by
        the batches MMEngine's own skipping (one per iteration done) misses, and say so."""
        change = layout_change(runner.iter, getattr(self, '_loaded_meta', {}), run_layout(runner))
        iterator = getattr(runner.train_loop, 'dataloader_iterator', None)
        if change is None or iterator is None:
            return
        extra, message = change
        runner.logger.warning(message + '.')
        for _ in range(extra):
            next(iterator)

    @contextmanager
    def _removals_deferred(self):
        """Removals through ``self.file_backend`` in the block happen after it, if it succeeds."""
        backend = self.file_backend
        deferred = self.file_backend = _DeferredRemoval(backend)
        try:
            yield
        finally:
            self.file_backend = backend
        if is_main_process():
            deferred.flush()

    def _kept_after(self, runner, step):
        """Record ``step`` among the kept checkpoints; return the steps it pushes out.

        Until they are removed, the pushed-out steps stay listed in the MessageHub, and so in
        the checkpoint being written: a run resumed from it after a crash before the removal
        removes them (``CheckpointHook.before_train`` trims the list to ``max_keep_ckpts``).
        """
        if self.max_keep_ckpts <= 0 or (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            return []
        steps = list(self.keep_ckpt_ids) + [step]
        self.keep_ckpt_ids = deque(steps[-self.max_keep_ckpts:], self.max_keep_ckpts)
        runner.message_hub.update_info('keep_ckpt_ids', steps)
        return steps[:-self.max_keep_ckpts]

    def _save_checkpoint_with_step(self, runner, step, meta):
        dropped = self._kept_after(runner, step)
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        with self._removals_deferred():
            runner.save_checkpoint(self.out_dir, filename, self.file_client_args,
                                   save_optimizer=self.save_optimizer,
                                   save_param_scheduler=self.save_param_scheduler, meta=meta,
                                   by_epoch=self.by_epoch, backend_args=self.backend_args,
                                   **self.args)
            if is_main_process():
                write_atomic(osp.join(runner.work_dir, LAST_CHECKPOINT), self.last_ckpt)
                for old in dropped:
                    self.file_backend.remove(
                        self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old)))
        if dropped:
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))

    def _save_best_checkpoint(self, runner, metrics):
        with self._removals_deferred():
            super()._save_best_checkpoint(runner, metrics)
