"""Several rows of scalars to a visualizer's backends in one call.

MMEngine's ``Visualizer.add_scalars`` takes one row. Its ``LocalVisBackend`` then deep-copies
the row, opens each of its JSON files (the run's ``scalars.json`` and the row's ``file_path``)
and streams the row into it with ``json.dump``, over a hundred small writes for a diagnostics
row of a few dozen scalars. A hook recording every iteration writes one row per iteration:
on a ResNet-50 whose iteration is host time, two to three points of the hooks' cost at
interval 1 (docs/benchmarks.md, "Diagnostics hooks on a GPU").

:func:`add_scalar_rows` writes all the rows of a flush to a plain ``LocalVisBackend`` with one
open and one write per file: the same lines, byte for byte. Every other backend (TensorBoard,
W&B, a subclass that changes how scalars are added) gets its ``add_scalars`` per row, as from
the visualizer; a visualizer that overrides ``add_scalars`` gets every row itself. Only the
main process writes, as ``Visualizer.add_scalars`` (``master_only``) does.
"""
import json
import os.path as osp
from typing import Dict, NamedTuple, Optional, Sequence

from mmengine.dist import is_main_process
from mmengine.fileio.handlers.json_handler import set_default
from mmengine.visualization import LocalVisBackend, Visualizer


class LogRow(NamedTuple):
    """One row for the visualizer: its scalars, its step and the JSON file it also goes to
    (relative to the backends' save directory; None: only the backends' own files)."""
    scalars: Dict[str, float]
    step: int
    file_path: Optional[str] = None


def add_scalar_rows(visualizer: Visualizer, rows: Sequence[LogRow]) -> None:
    """Write ``rows`` (:class:`LogRow`, in order) to ``visualizer``'s backends, what a
    ``visualizer.add_scalars(row.scalars, row.step, row.file_path)`` per row writes."""
    if not rows or not is_main_process():
        return
    backends = getattr(visualizer, '_vis_backends', None)
    if type(visualizer).add_scalars is not Visualizer.add_scalars or not isinstance(backends, dict):
        for row in rows:
            visualizer.add_scalars(row.scalars, step=row.step, file_path=row.file_path)
        return
    for backend in backends.values():
        if _plain_local(backend):
            _append_rows(backend, rows)
        else:
            for row in rows:
                backend.add_scalars(row.scalars, row.step, row.file_path)


def _plain_local(backend):
    """Whether ``backend`` writes scalars as mmengine's ``LocalVisBackend`` does, in the files
    it names as that class does."""
    kind = type(backend)
    return (isinstance(backend, LocalVisBackend) and kind.add_scalars is LocalVisBackend.add_scalars
            and kind._dump is LocalVisBackend._dump and kind._init_env is LocalVisBackend._init_env
            and isinstance(getattr(backend, '_save_dir', None), str)
            and isinstance(getattr(backend, '_scalar_save_file', None), str))


def row_line(row: LogRow) -> str:
    """The line ``LocalVisBackend.add_scalars`` appends for ``row``: its scalars and, unless
    they hold one, its ``step``, in mmengine's JSON encoding."""
    scalars = dict(row.scalars)
    scalars.setdefault('step', row.step)
    return json.dumps(scalars, default=set_default) + '\n'


def _append_rows(backend, rows):
    backend.experiment  # sets the backend up as its add_scalars would (its save directory)
    lines = {}  # path -> lines, in the order LocalVisBackend opens them
    for row in rows:
        line = row_line(row)
        if row.file_path is not None:
            lines.setdefault(_row_file(backend, row.file_path), []).append(line)
        lines.setdefault(backend._scalar_save_file, []).append(line)
    for path, texts in lines.items():
        with open(path, 'a+') as f:
            f.write(''.join(texts))


def _row_file(backend, file_path):
    if not isinstance(file_path, str) or file_path.split('.')[-1] != 'json':
        raise ValueError(f'file_path={file_path!r} is not supported; expected the name of a '
                         '.json file')
    path = osp.join(backend._save_dir, file_path)
    if path == backend._scalar_save_file:
        raise ValueError(f'file_path={file_path!r} is the backend\'s own scalar file; expected '
                         'another name')
    return path
