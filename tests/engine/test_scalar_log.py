"""add_scalar_rows: the lines MMEngine's visualizer writes row by row, in one append per file."""
import itertools

import numpy as np
import pytest
from mmengine.visualization import BaseVisBackend, LocalVisBackend, Visualizer

from mmstiff.engine.hooks import scalar_log
from mmstiff.engine.hooks.scalar_log import LogRow, add_scalar_rows, row_line

_names = itertools.count()

ROWS = [
    LogRow({
        'stiffness/nsi/layer1.0': 0.125,
        'iter': 1,
        'epoch': 1
    }, 1, 'run_stiffness.json'),
    # numpy scalars (mmengine's JSON default turns them into numbers), a row with a 'step' of
    # its own (kept), a float that needs all its digits, an infinity
    LogRow({
        'a': np.float32(0.1),
        'b': np.int64(3),
        'step': 7
    }, 2, 'run_stiffness.json'),
    LogRow({
        'c': 1.0 / 3.0,
        'd': float('inf')
    }, 3, 'run_other.json'),
    LogRow({'e': -2.5}, 4, None),
]


def visualizer(save_dir, backends=None, cls=Visualizer):
    return cls(name=f'scalar_log_{next(_names)}', save_dir=str(save_dir), vis_backends=backends
               or [dict(type='LocalVisBackend')])


def files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob('*.json')}


def test_the_files_hold_the_bytes_the_visualizer_writes_row_by_row(tmp_path):
    by_rows, batched = tmp_path / 'rows', tmp_path / 'batched'
    reference = visualizer(by_rows)
    for row in ROWS:
        reference.add_scalars(row.scalars, step=row.step, file_path=row.file_path)
    add_scalar_rows(visualizer(batched), ROWS)
    expected = files(by_rows)
    assert set(expected) == {
        'vis_data/scalars.json', 'vis_data/run_stiffness.json', 'vis_data/run_other.json'
    }
    assert files(batched) == expected
    # and row_line is each of those lines
    assert expected['vis_data/scalars.json'].decode() == ''.join(map(row_line, ROWS))


def test_rows_are_appended_after_what_the_files_hold(tmp_path):
    vis = visualizer(tmp_path)
    add_scalar_rows(vis, ROWS[:1])
    vis.add_scalars({'x': 1.0}, step=5)  # the visualizer's own write, between two batches
    add_scalar_rows(vis, ROWS[3:])
    lines = (tmp_path / 'vis_data' / 'scalars.json').read_text().splitlines()
    assert lines == [row_line(ROWS[0]).strip(), '{"x": 1.0, "step": 5}', row_line(ROWS[3]).strip()]


class RecordingBackend(BaseVisBackend):
    """A backend of another kind (TensorBoard, W&B): it must get each row as add_scalars."""

    def __init__(self, save_dir=None):
        super().__init__(save_dir)
        self.calls = []

    @property
    def experiment(self):
        return self

    def _init_env(self):
        pass

    def add_scalars(self, scalar_dict, step=0, file_path=None, **kwargs):
        self.calls.append((scalar_dict, step, file_path))


class RenamingLocalBackend(LocalVisBackend):
    """A LocalVisBackend subclass that adds scalars its own way."""

    def add_scalars(self, scalar_dict, step=0, file_path=None, **kwargs):
        super().add_scalars({f'renamed/{k}': v for k, v in scalar_dict.items()}, step, file_path)


def test_other_backends_get_each_row_from_their_own_add_scalars(tmp_path):
    vis = visualizer(tmp_path, [dict(type='LocalVisBackend')])
    other, renaming = RecordingBackend(), RenamingLocalBackend(str(tmp_path / 'renaming'))
    vis._vis_backends.update(other=other, renaming=renaming)
    add_scalar_rows(vis, ROWS)
    assert other.calls == [(row.scalars, row.step, row.file_path) for row in ROWS]
    first = (tmp_path / 'renaming' / 'scalars.json').read_text().splitlines()[0]
    assert first.startswith('{"renamed/stiffness/nsi/layer1.0": 0.125')
    # the plain local backend beside them still got the batched lines
    assert (tmp_path / 'vis_data' / 'scalars.json').read_text() == ''.join(map(row_line, ROWS))


class CountingVisualizer(Visualizer):
    """A visualizer that overrides add_scalars: it must see every row."""

    def add_scalars(self, scalar_dict, step=0, file_path=None, **kwargs):
        self.seen = getattr(self, 'seen', []) + [step]
        super().add_scalars(scalar_dict, step, file_path, **kwargs)


def test_a_visualizer_that_adds_scalars_its_own_way_gets_every_row(tmp_path):
    vis = visualizer(tmp_path, cls=CountingVisualizer)
    add_scalar_rows(vis, ROWS)
    assert vis.seen == [row.step for row in ROWS]


def test_only_the_main_process_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(scalar_log, 'is_main_process', lambda: False)
    vis = visualizer(tmp_path)
    add_scalar_rows(vis, ROWS)
    assert files(tmp_path) == {}


@pytest.mark.parametrize('file_path', ['run.txt', 'scalars.json'])
def test_a_file_path_the_backend_cannot_take_is_refused_by_name(tmp_path, file_path):
    vis = visualizer(tmp_path)
    with pytest.raises(ValueError, match=f"file_path='{file_path}'"):
        add_scalar_rows(vis, [LogRow({'a': 1.0}, 1, file_path)])
    assert files(tmp_path) == {}  # nothing half-written
