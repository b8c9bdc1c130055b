"""One training run per work dir: a second one stops naming the first, a dead one blocks nothing.

Before: two trainings started on the same ``--work-dir`` both exited 0, the second overwriting
the first one's checkpoints and ``last_checkpoint``.
"""
import os
import subprocess
import sys

import pytest
from reliability_runs import write_config

from mmstiff.engine.work_dir_lock import (LOCK_NAME, WorkDirLockedError, lock_work_dir,
                                          unlock_work_dir)

HOLDER = ('import sys, time\n'
          'from mmstiff.engine.work_dir_lock import lock_work_dir\n'
          'lock_work_dir(sys.argv[1])\n'
          "print('locked', flush=True)\n"
          'time.sleep(600)\n')


@pytest.fixture
def holder(repo_root):
    """``holder(work_dir)``: a process that holds the lock of ``work_dir`` until killed."""
    procs = []

    def start(work_dir):
        env = dict(os.environ, PYTHONPATH=repo_root)
        proc = subprocess.Popen(
            [sys.executable, '-c', HOLDER, str(work_dir)], env=env, stdout=subprocess.PIPE,
            text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == 'locked'
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_second_lock_names_the_holder_and_a_killed_holder_frees_it(tmp_path, holder, monkeypatch):
    monkeypatch.delenv('RANK', raising=False)
    work = tmp_path / 'work'
    proc = holder(work)
    with pytest.raises(
            WorkDirLockedError,
            match=rf"work dir '{work}' is in use by another training run \(process "
            rf'{proc.pid} on .*; lock file {work}/{LOCK_NAME}\)'):
        lock_work_dir(work)
    proc.kill()  # however the holder ends, the kernel drops its lock
    proc.wait()
    try:
        assert lock_work_dir(work) == str(work / LOCK_NAME)
        assert (work / LOCK_NAME).read_text().startswith(f'process {os.getpid()} on ')
        assert lock_work_dir(work) == str(work / LOCK_NAME)  # held already: no error
    finally:
        unlock_work_dir(work)


def test_a_stale_lock_file_blocks_nothing_and_other_ranks_take_none(tmp_path, monkeypatch):
    work = tmp_path / 'work'
    work.mkdir()
    (work / LOCK_NAME).write_text('process 999999 on gone\n')
    monkeypatch.delenv('RANK', raising=False)
    try:
        assert lock_work_dir(work) == str(work / LOCK_NAME)
    finally:
        unlock_work_dir(work)
    monkeypatch.setenv('RANK', '1')
    assert lock_work_dir(tmp_path / 'other') is None


@pytest.mark.slow
def test_train_on_a_work_dir_in_use_stops_before_writing(tiny_data, train, tmp_path, holder):
    config = write_config(tmp_path / 'config.py', tiny_data('cifar10'), train_cfg=dict(max_iters=2))
    work = tmp_path / 'work'
    proc = holder(work)
    run = train(config, work, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert (f"error: work dir '{work}' is in use by another training run (process {proc.pid}"
            in run.stderr)
    assert 'Traceback' not in run.stderr
    assert sorted(p.name for p in work.iterdir()) == [LOCK_NAME]
