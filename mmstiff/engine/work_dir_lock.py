"""One training run per work dir: an exclusive lock held for the life of the process.

Two runs writing to one work dir overwrite each other's checkpoints and ``last_checkpoint``.
:func:`lock_work_dir` takes an exclusive ``flock`` on ``WORK_DIR/.lock`` and writes the
holder's process id and host into it. The kernel releases the lock when the process ends, however
it ends, so a file left by a killed run is no obstacle (stale-safe); a second run on the same
work dir fails at once naming the holder. In a distributed run only global rank 0 takes it (the
ranks of one run share the work dir). Where ``fcntl`` is missing (Windows) nothing is locked.
"""
import os
import os.path as osp
import socket
from typing import Optional

from mmstiff.errors import MmstiffError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

#: the lock file inside the work dir
LOCK_NAME = '.lock'
#: the open lock files of this process, by work dir (closing one releases its lock)
_HELD = {}


class WorkDirLockedError(RuntimeError, MmstiffError):
    """The work dir is held by another training run."""


def _holder(path):
    try:
        with open(path) as f:
            return f.read().strip() or 'an unknown process'
    except OSError:
        return 'an unknown process'


def lock_work_dir(work_dir: str) -> Optional[str]:
    """Hold the lock of ``work_dir`` until this process ends (or :func:`unlock_work_dir`).

    Returns:
        str | None: the lock file's path (None where nothing is locked: not rank 0, no fcntl).

    Raises:
        WorkDirLockedError: another process holds it; the message names its id and host.
    """
    if fcntl is None or int(os.environ.get('RANK', '0')) != 0:
        return None
    work_dir = osp.abspath(work_dir)
    if work_dir in _HELD:
        return _HELD[work_dir].name
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, LOCK_NAME)
    handle = open(path, 'a+')
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise WorkDirLockedError(
            f'work dir {work_dir!r} is in use by another training run ({_holder(path)}; lock '
            f'file {path}): a second run there would overwrite its checkpoints. Wait for it to '
            'end, or pick another --work-dir') from None
    handle.seek(0)
    handle.truncate()
    handle.write(f'process {os.getpid()} on {socket.gethostname()}\n')
    handle.flush()
    _HELD[work_dir] = handle
    return path


def unlock_work_dir(work_dir: str) -> None:
    """Release the lock :func:`lock_work_dir` took on ``work_dir`` (a no-op when not held)."""
    handle = _HELD.pop(osp.abspath(work_dir), None)
    if handle is not None:
        handle.close()
