"""Faults injected into a real training process, for the reliability tests.

A test config imports this module (``custom_imports=dict(imports=['faults'])``, with this
folder on ``PYTHONPATH``) and adds the hooks to ``custom_hooks``:

* :class:`KillDuringWrite` makes the process write part of a file, flush it to disk, and then
  kill itself with SIGKILL (or stop and wait to be killed from outside), as a preemption or the
  out-of-memory killer would in the middle of a checkpoint save; :class:`KillBeforeRemove`
  kills it as it is about to remove an old checkpoint;
* :class:`PoisonIteration` makes the loss of chosen iterations NaN, as a bad batch would;
* :class:`DiskFullDuringWrite` makes a write fail with ``ENOSPC`` halfway, as a full disk does;
* the dataset :class:`FailingItems` raises a data error for chosen items (on one rank), as a
  damaged file of a shard would.

Both act on the real code paths: ``KillDuringWrite`` wraps ``builtins.open``, through which
MMEngine's ``LocalBackend`` and ``CheckpointHook`` write their files (and so does every atomic
writer of mmstiff), and fires on the n-th file opened for writing whose name matches.
"""
import builtins
import errno
import fnmatch
import os
import os.path as osp
import signal
import time

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import DATASETS, HOOKS


class _FaultyFile:
    """A writable file whose first ``write`` stops after ``fraction`` of its data."""

    def __init__(self, file, fraction, marker):
        self._file, self._fraction, self._marker = file, fraction, marker

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def write(self, data):
        self._file.write(data[:int(len(data) * self._fraction)])
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._marker is None:
            os.kill(os.getpid(), signal.SIGKILL)
        with open(self._marker, 'w') as f:  # tell the test, then wait to be killed
            f.write(self._file.name)
        while True:
            time.sleep(1)


@HOOKS.register_module()
class KillDuringWrite(Hook):
    """Die in the middle of writing a file whose name matches ``pattern``.

    Args:
        pattern (str): fnmatch pattern of the file name (``'*iter_4.pth*'`` also matches a
            partial file such as ``.iter_4.pth.123.part``).
        fraction (float): the part of the data written before dying (0: none).
        occurrence (int): fire on this matching write (1: the first).
        marker (str, optional): instead of SIGKILL, write this file and sleep until killed.
    """
    priority = 'VERY_HIGH'

    def __init__(self, pattern, fraction=0.5, occurrence=1, marker=None):
        self.pattern, self.fraction = pattern, fraction
        self.occurrence, self.marker = occurrence, marker

    def before_run(self, runner):
        real_open, seen = builtins.open, []

        def faulty_open(file, mode='r', *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            name = osp.basename(str(file))
            if ('w' in mode or 'x' in mode) and fnmatch.fnmatch(name, self.pattern):
                seen.append(name)
                if len(seen) == self.occurrence:
                    return _FaultyFile(f, self.fraction, self.marker)
            return f

        builtins.open = faulty_open


@HOOKS.register_module()
class KillBeforeRemove(Hook):
    """Die with SIGKILL when about to remove a file whose name matches ``pattern``
    (``os.remove``, through which MMEngine's ``LocalBackend`` removes old checkpoints)."""
    priority = 'VERY_HIGH'

    def __init__(self, pattern):
        self.pattern = pattern

    def before_run(self, runner):
        real_remove = os.remove

        def faulty_remove(path, *args, **kwargs):
            if fnmatch.fnmatch(osp.basename(str(path)), self.pattern):
                os.kill(os.getpid(), signal.SIGKILL)
            return real_remove(path, *args, **kwargs)

        os.remove = faulty_remove


@HOOKS.register_module()
class PoisonIteration(Hook):
    """Multiply the output of ``module`` by NaN in the given (1-based) iterations.

    The neck (after every BatchNorm of the backbone) by default, so that only the loss and the
    gradients are poisoned, not the running statistics.
    """

    def __init__(self, iterations, module='neck'):
        self.iterations, self.module = set(iterations), module
        self._handle = None

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 in self.iterations:
            model = runner.model.module if is_model_wrapper(runner.model) else runner.model
            self._handle = getattr(
                model, self.module).register_forward_hook(lambda module, args, out: tuple(o * float(
                    'nan') for o in out) if isinstance(out, tuple) else out * float('nan'))

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class _FullDiskFile(_FaultyFile):
    """A writable file whose first ``write`` stops after ``fraction`` of its data with
    ``OSError(ENOSPC)``, as a full disk ends it."""

    def write(self, data):
        self._file.write(data[:int(len(data) * self._fraction)])
        self._file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@HOOKS.register_module()
class DiskFullDuringWrite(Hook):
    """The disk is full when a file whose name matches ``pattern`` is written (the
    ``occurrence``-th such write): its ``write`` fails with ``ENOSPC`` after ``fraction`` of
    the data, as on a file system that has no space left."""
    priority = 'VERY_HIGH'

    def __init__(self, pattern, fraction=0.5, occurrence=1):
        self.pattern, self.fraction, self.occurrence = pattern, fraction, occurrence

    def before_run(self, runner):
        real_open, seen = builtins.open, []

        def full_open(file, mode='r', *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            name = osp.basename(str(file))
            if ('w' in mode or 'x' in mode) and fnmatch.fnmatch(name, self.pattern):
                seen.append(name)
                if len(seen) == self.occurrence:
                    return _FullDiskFile(f, self.fraction, None)
            return f

        builtins.open = full_open


class FailingItems:
    """A dataset wrapper whose ``__getitem__`` raises a data error for the items ``bad`` (on
    the process of global rank ``rank`` only, when given), as a damaged file of one shard would."""

    def __init__(self, dataset, bad=(0, ), rank=None):
        from mmengine.registry import DATASETS
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.metainfo = getattr(self.dataset, 'metainfo', {})
        self.bad, self.rank = set(bad), rank

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        from mmstiff.datasets.preflight import DataCheckError
        if index in self.bad and (self.rank is None or self.rank == int(os.environ.get('RANK', 0))):
            raise DataCheckError(f'item {index} of the dataset is damaged (planted by the test)')
        return self.dataset[index]


DATASETS.register_module(module=FailingItems)
