"""The runner's JSON files (``state.json``, ``runs.json``) read with errors that name the file.

A file that cannot be read, is empty, is cut off (the JSON ends before the last byte) or is
not valid JSON, or that does not hold the structure the runner writes, raises
:class:`UnreadableFile` naming the file and what is wrong; :func:`keep_copy` moves such a file
aside (``<file>.corrupt-<UTC time>``) before anything replaces it (docs/reliability.md).
"""
import json
import os
import os.path as osp
import time
from typing import Any, Dict

from .errors import StudyError
from .spec import repo_relative


class UnreadableFile(StudyError):
    """A runner file that cannot be used: ``path`` and ``problem`` (e.g. ``is truncated: ...``)."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f'{repo_relative(path)} {problem}')


def _parse(path):
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as err:
        raise UnreadableFile(path, f'cannot be read: {err.strerror}') from None
    if not raw.strip():
        raise UnreadableFile(path, f'is empty ({len(raw)} bytes)')
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as err:
        raise UnreadableFile(path, f'is not UTF-8 text (byte {err.start})') from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = (f'line {err.lineno}, column {err.colno}, byte '
                 f'{len(text[:err.pos].encode())}')
        if err.pos >= len(text.rstrip()) or not text.rstrip().endswith(('}', ']')):
            problem = (f'is truncated: it ends at byte {len(raw)} inside the JSON ({err.msg}: '
                       f'{where})')
        else:
            problem = f'is not valid JSON ({err.msg}: {where})'
        raise UnreadableFile(path, problem) from None


def _expect(value, kind, where):
    if not isinstance(value, kind):
        raise ValueError(f'{where} is a {type(value).__name__}, expected a {kind.__name__}')
    return value


def _field(mapping, key, kind, where):
    if key not in mapping:
        raise ValueError(f'{where} has no {key!r}')
    return _expect(mapping[key], kind, f'{where}[{key!r}]')


def _state_structure(data):
    _expect(data, dict, 'the file')
    _field(data, 'study', str, 'the file')
    for key, entry in _field(data, 'runs', dict, 'the file').items():
        _expect(entry, dict, f'runs[{key!r}]')
        for i, stage in enumerate(entry.get('stages') or []):
            _field(
                _expect(stage, dict, f'runs[{key!r}].stages[{i}]'), 'name', str,
                f'runs[{key!r}].stages[{i}]')


def _runs_structure(data):
    _expect(data, dict, 'the file')
    study = _field(data, 'study', dict, 'the file')
    for key in ('name', 'file'):
        _field(study, key, str, 'study')
    _field(study, 'claim', dict, 'study')
    _field(study, 'cfg_options', list, 'study')
    for i, variant in enumerate(_field(study, 'variants', list, 'study')):
        _field(_expect(variant, dict, f'study.variants[{i}]'), 'label', str, f'study.variants[{i}]')
    for i, run in enumerate(_field(data, 'runs', list, 'the file')):
        where = f'runs[{i}]'
        _expect(run, dict, where)
        for key, kind in (('key', str), ('variant', str), ('seed', int), ('status', str), ('stages',
                                                                                           list)):
            _field(run, key, kind, where)
        _field(_field(run, 'record', dict, where), 'metrics', dict, f'{where}.record')


def _read(path, structure):
    data = _parse(path)
    try:
        structure(data)
    except ValueError as err:
        raise UnreadableFile(path, f'is not the structure the runner writes: {err}') from None
    return data


def read_state_file(path: str) -> Dict[str, Any]:
    """The data of a ``state.json``, checked (:class:`UnreadableFile` names what is wrong)."""
    return _read(path, _state_structure)


def read_runs_file(path: str) -> Dict[str, Any]:
    """The data of a ``runs.json``, checked (:class:`UnreadableFile` names what is wrong)."""
    return _read(path, _runs_structure)


def keep_copy(path: str) -> str:
    """Move ``path`` to ``<path>.corrupt-<UTC time>`` (never over another file); return it."""
    stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
    target, n = f'{path}.corrupt-{stamp}', 1
    while osp.exists(target):
        n += 1
        target = f'{path}.corrupt-{stamp}-{n}'
    os.replace(path, target)
    return target
