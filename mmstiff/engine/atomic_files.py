"""Files that are either complete or absent: written aside, flushed to disk, renamed into place.

A process killed while writing a file with ``open(path, 'wb')`` leaves a truncated file under
the final name. :func:`write_atomic` writes to a hidden partial file in the same folder
(``.NAME.PID.part``), flushes it to disk (``fsync``), renames it over ``path``
(``os.replace``, atomic on POSIX and Windows within one file system) and flushes the folder
entry, so that at any moment ``path`` holds either its previous content or the new one.

:class:`AtomicLocalBackend` is MMEngine's ``LocalBackend`` with ``put`` and ``put_text``
written this way. It is registered as the file backend ``'mmstiff_atomic_local'``, so any
MMEngine code that takes ``backend_args`` (``Runner.save_checkpoint``, ``CheckpointHook``)
writes atomically with ``backend_args=dict(backend='mmstiff_atomic_local')``.
"""
import os
import os.path as osp
import re
from pathlib import Path
from typing import List, Union

from mmengine.fileio import LocalBackend, register_backend

#: the name of :class:`AtomicLocalBackend` in MMEngine's file-backend registry.
ATOMIC_BACKEND = 'mmstiff_atomic_local'
#: a partial file of :func:`write_atomic`: ``.NAME.PID.part``.
PARTIAL_FILE = re.compile(r'^\.(?P<name>.+)\.(?P<pid>\d+)\.part$')


def partial_path(path: str) -> str:
    """The hidden file :func:`write_atomic` writes before renaming it to ``path``."""
    folder, name = osp.split(osp.abspath(path))
    return osp.join(folder, f'.{name}.{os.getpid()}.part')


def _fsync_folder(folder):
    if not hasattr(os, 'O_DIRECTORY'):  # Windows: folders cannot be opened
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: Union[bytes, bytearray, memoryview, str],
                 encoding: str = 'utf-8') -> None:
    """Write ``data`` (bytes or str) to ``path`` so that ``path`` is never seen half-written.

    The folder is created if needed. On any error the partial file is removed and ``path``
    keeps its previous content.
    """
    path = osp.abspath(path)
    folder = osp.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = partial_path(path)
    mode, kwargs = ('wb',
                    {}) if isinstance(data,
                                      (bytes, bytearray, memoryview)) else ('w',
                                                                            dict(encoding=encoding))
    try:
        with open(tmp, mode, **kwargs) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if osp.lexists(tmp):
            os.remove(tmp)
        raise
    _fsync_folder(folder)


def _process_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_partial_files(folder: str) -> List[str]:
    """Remove the partial files that killed writers left in ``folder``; return their paths.

    A partial file whose writer (the PID in its name) is still running is kept.
    """
    if not osp.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        match = PARTIAL_FILE.match(name)
        path = osp.join(folder, name)
        if match and osp.isfile(path) and not _process_alive(int(match['pid'])):
            os.remove(path)
            removed.append(path)
    return removed


@register_backend(ATOMIC_BACKEND, force=True)
class AtomicLocalBackend(LocalBackend):
    """MMEngine's local-disk backend whose writes are atomic (see :func:`write_atomic`)."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        write_atomic(str(filepath), obj)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        write_atomic(str(filepath), obj, encoding=encoding)
