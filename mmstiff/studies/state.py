"""The state of a study on disk: ``<work root>/<study>/state.json``, and one runner at a time.

``state.json`` maps each run (``<variant>/seed<S>``) to its status, its stages (train, test,
each analysis tool) with every attempt's command, return code and wall time, and, once
finished, the numbers collected from its work dir. It is rewritten atomically (a temporary
file, then ``os.replace``) after every change, so a runner killed at any moment leaves the last
consistent state; a run found ``running`` by the next invocation was interrupted and resumes.

``runner.lock`` holds the process id of the runner working on the study; a second runner on the
same study stops before any work while that process is alive. A lock left by a killed runner is
taken over.
"""
import copy
import json
import os
import os.path as osp
import threading
from typing import Any, Dict

from .files import read_state_file

PENDING, RUNNING, DONE, FAILED = 'pending', 'running', 'done', 'failed'
STATE_FILE = 'state.json'
LOCK_FILE = 'runner.lock'


def dump_json(obj: Any, path: str) -> str:
    """Write ``obj`` as sorted, indented JSON (same object, same bytes), atomically."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w') as f:
        json.dump(obj, f, indent=2, sort_keys=True, allow_nan=False)
        f.write('\n')
    os.replace(tmp, path)
    return path


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunnerLock:
    """Context manager holding ``<study dir>/runner.lock`` for this process."""

    def __init__(self, study_dir: str):
        self.path = osp.join(study_dir, LOCK_FILE)

    def __enter__(self):
        os.makedirs(osp.dirname(self.path), exist_ok=True)
        if osp.exists(self.path):
            try:
                with open(self.path) as f:
                    pid = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise RuntimeError(f'another runner (process {pid}) is working on this study '
                                   f'({self.path}); wait for it or stop it first')
        with open(self.path, 'w') as f:
            f.write(f'{os.getpid()}\n')
        return self

    def __exit__(self, *exc):
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        return False


class StudyState:
    """``state.json`` of one study, shared by the runner's worker threads.

    Args:
        path (str): the state file.
        study (str): the study name (a state file of another study is refused).

    Raises:
        UnreadableFile: ``path`` exists but is truncated, not JSON or not a state file.
    """

    def __init__(self, path: str, study: str):
        self.path = path
        self._lock = threading.Lock()
        if osp.isfile(path):
            self.data = read_state_file(path)
            if self.data.get('study') != study:
                raise RuntimeError(f'{path} belongs to study {self.data.get("study")!r}, not '
                                   f'{study!r}')
        else:
            self.data = dict(study=study, runs={})

    def run(self, key: str) -> Dict[str, Any]:
        """A copy of run ``key``'s entry (an empty dict when it has none yet)."""
        with self._lock:
            return copy.deepcopy(self.data['runs'].get(key, {}))

    def runs(self) -> Dict[str, Dict[str, Any]]:
        """A copy of every run's entry, ``{key: entry}``."""
        with self._lock:
            return copy.deepcopy(self.data['runs'])

    def update(self, key: str, **fields: Any) -> None:
        """Set fields of run ``key`` and save the state."""
        with self._lock:
            self.data['runs'].setdefault(key, {}).update(copy.deepcopy(fields))
            dump_json(self.data, self.path)

    def update_stage(self, key: str, stage: str, **fields: Any) -> None:
        """Set fields of one stage of run ``key`` (stages keep their order) and save."""
        with self._lock:
            entry = self.data['runs'].setdefault(key, {})
            stages = entry.setdefault('stages', [])
            for item in stages:
                if item['name'] == stage:
                    item.update(copy.deepcopy(fields))
                    break
            else:
                stages.append(dict(name=stage, **copy.deepcopy(fields)))
            dump_json(self.data, self.path)

    def save(self) -> None:
        """Write the state to its file (atomically)."""
        with self._lock:
            dump_json(self.data, self.path)
