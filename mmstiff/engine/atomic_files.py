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
import errno
import os
import os.path as osp
import re
from pathlib import Path
from typing import List, Optional, Union

from mmengine.fileio import LocalBackend, register_backend

from mmstiff.errors import MmstiffError

#: the name of :class:`AtomicLocalBackend` in MMEngine's file-backend registry.
ATOMIC_BACKEND = 'mmstiff_atomic_local'
#: a partial file of :func:`write_atomic`: ``.NAME.PID.part``.
PARTIAL_FILE = re.compile(r'^\.(?P<name>.+)\.(?P<pid>\d+)\.part$')


class WriteFailedError(MmstiffError, OSError):
    """:func:`write_atomic` could not write a file (a full disk, a quota, a read-only folder, no
    permission): the message names the file, the size it needed, the space left and the cause;
    the file keeps its previous content and no partial file is left.

    Attributes:
        path (str): the file that was being written.
        size (int | None): the bytes it needed.
        cause (OSError): the error of the write.
    """

    def __init__(self, path: str, size: Optional[int] = None,
                 cause: Optional[OSError] = None) -> None:
        if cause is None:  # a message alone (as MMEngine rebuilds an exception)
            super().__init__(path)
            self.path, self.size, self.cause, self.message = None, size, None, str(path)
            return
        super().__init__(cause.errno, cause.strerror or str(cause), path)
        self.path, self.size, self.cause = path, size, cause
        self.message = describe_write_failure(path, size, cause)

    def __str__(self) -> str:
        return getattr(self, 'message', None) or (str(self.args[0]) if self.args else '')


def mebibytes(size: int) -> str:
    """``size`` (bytes) for a message: ``'1.5 MiB'`` from 64 KiB on, else ``'123 bytes'``."""
    return f'{size / 2**20:.1f} MiB' if size >= 2**16 else f'{size} bytes'


def free_space(path: str) -> Optional[int]:
    """The bytes a non-root user may still write on the file system of ``path`` (its nearest
    existing folder), or None where that cannot be told."""
    folder = osp.abspath(path)
    while folder and not osp.isdir(folder):
        parent = osp.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    try:
        stat = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return stat.f_bavail * stat.f_frsize


def describe_write_failure(path: str, size: Optional[int], cause: BaseException) -> str:
    """``could not write PATH: No space left on device (ENOSPC; it needs 1.2 MiB, 0.3 MiB
    free on that file system)``: what failed, in one phrase."""
    code = getattr(cause, 'errno', None)
    reason = getattr(cause, 'strerror', None) or str(cause) or type(cause).__name__
    notes = [errno.errorcode[code]] if code in errno.errorcode else []
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or size is not None:
        free = free_space(path)
        if size is not None:
            notes.append(f'it needs {mebibytes(size)}')
        if free is not None:
            notes.append(f'{mebibytes(free)} free on that file system')
    return f'could not write {path}: {reason}' + (f' ({"; ".join(notes)})' if notes else '')


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
    keeps its previous content; a failed write (a full disk, no permission) raises
    :class:`WriteFailedError` naming the file and the size it needed.
    """
    path = osp.abspath(path)
    folder = osp.dirname(path)
    binary = isinstance(data, (bytes, bytearray, memoryview))
    size = memoryview(data).nbytes if binary else len(data.encode(encoding))
    tmp = partial_path(path)
    mode, kwargs = ('wb', {}) if binary else ('w', dict(encoding=encoding))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(tmp, mode, **kwargs) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            if osp.lexists(tmp):
                os.remove(tmp)
        except OSError:  # the removal failing too must not hide why the write failed
            pass
        if isinstance(exc, OSError) and not isinstance(exc, WriteFailedError):
            raise WriteFailedError(path, size, exc) from exc
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
        """Write the bytes ``obj`` to ``filepath`` with :func:`write_atomic`: the file holds its
        previous content or ``obj``, never a part of it."""
        write_atomic(str(filepath), obj)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        """Write the text ``obj`` to ``filepath`` in ``encoding`` with :func:`write_atomic`."""
        write_atomic(str(filepath), obj, encoding=encoding)
