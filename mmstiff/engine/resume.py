"""Which checkpoint a training run resumes from, checked before it is used.

:func:`find_resume_checkpoint` takes the one ``last_checkpoint`` names, else the newest
complete ``iter_N.pth`` / ``epoch_N.pth``, and says why (docs/reliability.md, "Resuming").
"""
import os
import os.path as osp
import re
import zipfile
from typing import List, NamedTuple, Optional, Tuple

from mmstiff.utils.checkpoint import UntrustedCheckpointError, load_checkpoint_file

LAST_CHECKPOINT = 'last_checkpoint'
#: the checkpoints MMEngine's CheckpointHook writes by default.
CHECKPOINT_FILE = re.compile(r'^(?:iter|epoch)_(?P<step>\d+)\.pth$')


class ResumeSearch(NamedTuple):
    """What :func:`find_resume_checkpoint` found in a work dir.

    Attributes:
        work_dir (str): the folder searched.
        path (str | None): the checkpoint to resume from; None when there is none.
        named (str | None): the path ``last_checkpoint`` names, as written (None when the file
            is missing or empty).
        marker (str): the state of ``last_checkpoint``: ``'ok'``, ``'missing'``, ``'empty'`` or
            ``'damaged'`` (it names a checkpoint that is missing or damaged).
        passed_over (tuple): ``(path, problem)`` of every checkpoint rejected, in the order
            they were tried.
    """
    work_dir: str
    path: Optional[str]
    named: Optional[str]
    marker: str
    passed_over: Tuple[Tuple[str, str], ...]

    @property
    def work_dir_exists(self) -> bool:
        """Whether :attr:`work_dir` is an existing folder."""
        return osp.isdir(self.work_dir)

    def why(self) -> str:
        """One sentence on how :attr:`path` was chosen, or on why there is none."""
        if not self.work_dir_exists:
            return f'the work dir {self.work_dir!r} does not exist'
        if self.marker == 'ok':
            return f'{LAST_CHECKPOINT} names it'
        rejected = list(self.passed_over)
        if self.marker == 'damaged':
            path, problem = rejected.pop(0)
            said = f'{LAST_CHECKPOINT} names {path}, which {problem}'
        else:
            said = {
                'missing': f'there is no {LAST_CHECKPOINT} file',
                'empty': f'{LAST_CHECKPOINT} is empty'
            }[self.marker]
        reasons = '; '.join([said] + [f'{osp.basename(p)} {problem}' for p, problem in rejected])
        if self.path is None:
            found = ('no iter_*.pth or epoch_*.pth checkpoint is there'
                     if not rejected else 'no complete checkpoint is left')
            return f'{reasons}; {found}'
        return f'it is the newest complete checkpoint ({reasons})'


def checkpoint_problem(path: str) -> Optional[str]:
    """What keeps the file at ``path`` from being resumed from, or None when it is complete.

    Returns a phrase such as ``'is empty (0 bytes)'`` or ``'is truncated (...)'``. The file is
    loaded weights-only (:func:`mmstiff.utils.checkpoint.load_checkpoint_file`); one that
    refers to objects outside the allow-list counts as complete here: the run refuses it by
    name when it loads it (or loads it with ``--trust-checkpoint``).
    """
    if not osp.exists(path):
        return 'does not exist'
    if not osp.isfile(path):
        return 'is not a file'
    size = osp.getsize(path)
    if size == 0:
        return 'is empty (0 bytes)'
    zipped = zipfile.is_zipfile(path)
    if zipped:
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            return f'is damaged ({err})'
        if bad is not None:
            return f'is damaged (its record {bad!r} fails the CRC-32 check)'
    else:
        with open(path, 'rb') as f:
            if f.read(4) == b'PK\x03\x04':
                return (f'is truncated ({size} bytes, and the zip archive has no central '
                        'directory: its write did not finish)')
    try:
        checkpoint = load_checkpoint_file(path, 'cpu', mmap=zipped)
    except UntrustedCheckpointError:
        return None
    except Exception as err:  # any reading error: the file cannot be resumed from
        return f'cannot be loaded ({type(err).__name__}: {err})'
    if not isinstance(checkpoint, dict) or 'state_dict' not in checkpoint:
        return 'is not a training checkpoint (no state_dict)'
    return None


def _step(name):
    match = CHECKPOINT_FILE.match(name)
    return int(match['step']) if match else None


def checkpoint_files(work_dir: str) -> List[str]:
    """The ``iter_N.pth`` / ``epoch_N.pth`` files of ``work_dir``, newest (largest N) first."""
    if not osp.isdir(work_dir):
        return []
    found = []
    for name in os.listdir(work_dir):
        path = osp.join(work_dir, name)
        if _step(name) is not None and osp.isfile(path):
            found.append((_step(name), osp.getmtime(path), path))
    return [path for _, _, path in sorted(found, reverse=True)]


def _locate(named, work_dir):
    """The file a ``last_checkpoint`` entry means: as written (relative to the current folder,
    as MMEngine reads it), else the file of that name in ``work_dir`` (a moved work dir)."""
    if osp.isfile(named):
        return named
    moved = osp.join(work_dir, osp.basename(named))
    return moved if osp.isfile(moved) else named


def find_resume_checkpoint(work_dir: str) -> ResumeSearch:
    """Find the checkpoint to resume a training run in ``work_dir`` from; see the module doc.

    Returns:
        ResumeSearch: ``path`` is None when nothing in ``work_dir`` can be resumed from.
    """
    passed_over = []
    named, marker = None, 'missing'
    marker_file = osp.join(work_dir, LAST_CHECKPOINT)
    if osp.isfile(marker_file):
        with open(marker_file) as f:
            named = f.read().strip() or None
        marker = 'empty' if named is None else 'damaged'
    if named is not None:
        path = _locate(named, work_dir)
        problem = checkpoint_problem(path)
        if problem is None:
            return ResumeSearch(work_dir, path, named, 'ok', ())
        passed_over.append((path, problem))
    tried = {osp.abspath(p) for p, _ in passed_over}
    for path in checkpoint_files(work_dir):
        if osp.abspath(path) in tried:
            continue
        problem = checkpoint_problem(path)
        if problem is None:
            return ResumeSearch(work_dir, path, named, marker, tuple(passed_over))
        passed_over.append((path, problem))
    return ResumeSearch(work_dir, None, named, marker, tuple(passed_over))
