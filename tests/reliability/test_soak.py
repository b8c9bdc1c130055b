"""A 2-process DDP training killed and resumed three times ends with the weights of an
uninterrupted run of the same length.

Each run is ``tools/dist_train.sh CONFIG 2 --resume-or-start`` (gloo on the CPU), the command a
job script reruns after a preemption; each kill is SIGKILL to every process of the run at
once (the launcher and both workers, which torchrun starts in sessions of their own), as a
cluster's preemption does:

1. while rank 0 is halfway through writing ``iter_4.pth``;
2. as soon as ``last_checkpoint`` names ``iter_6.pth`` (wherever the run then is);
3. while rank 0 is writing ``last_checkpoint`` for the first time in that run.

With ``max_keep_ckpts=1``, after each kill a complete checkpoint must be left to resume from.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from reliability_runs import FAULT_ENV, FAULTS, REPO, assert_same_weights, load, write_config

from mmstiff.engine import checkpoint_problem, find_resume_checkpoint

MAX_ITERS = 12
CHECKPOINT = dict(interval=2, max_keep_ckpts=1)
pytestmark = pytest.mark.skipif(not os.path.isdir('/proc'), reason='reads /proc')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch(config, work, log):
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS='1', PORT=str(free_port()),
               **FAULT_ENV)
    return subprocess.Popen([
        os.path.join(REPO, 'tools', 'dist_train.sh'),
        str(config), '2', '--work-dir',
        str(work), '--resume-or-start'
    ], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def descendants(pid):
    children = {}
    for entry in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{entry}/stat') as f:
                ppid = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def kill_run(proc):
    """SIGKILL the launcher and every process under it, at once."""
    victims = [proc.pid] + descendants(proc.pid)
    for pid in victims:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=60)
    deadline = time.time() + 60
    while any(alive(pid) for pid in victims):
        assert time.time() < deadline, 'processes of the killed run are still alive'
        time.sleep(0.2)


def wait_for(condition, proc, log, timeout=600):
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            log.flush()
            pytest.fail(f'the run ended (exit {proc.returncode}) before it could be killed:\n' +
                        open(log.name).read()[-4000:])
        assert time.time() < deadline, 'timed out waiting for the moment to kill'
        time.sleep(0.05)


def names(work, target):
    marker = work / 'last_checkpoint'
    return marker.is_file() and marker.read_text().strip() == str(work / target)


@pytest.mark.slow
def test_killed_three_times_ends_like_an_uninterrupted_run(tiny_data, run_tool, tmp_path):
    root = tiny_data('cifar10')
    common = dict(train_cfg=dict(max_iters=MAX_ITERS), default_hooks=dict(checkpoint=CHECKPOINT))
    clean = write_config(tmp_path / 'clean.py', root, **common)
    straight = tmp_path / 'straight'
    run_tool('tools/dist_train.sh', clean, '2', '--work-dir', str(straight),
             env=dict(FAULT_ENV, PORT=str(free_port())))

    def paused_at(pattern, fraction, marker):
        return write_config(
            tmp_path / f'{marker.stem}.py', root, **common, custom_imports=FAULTS, custom_hooks=[
                dict(type='KillDuringWrite', pattern=pattern, fraction=fraction, marker=str(marker))
            ])

    work = tmp_path / 'work'
    mid_checkpoint, mid_marker = tmp_path / 'mid_checkpoint', tmp_path / 'mid_marker'
    runs = [  # (config, when to kill)
        (paused_at('*iter_4.pth*', 0.5, mid_checkpoint), mid_checkpoint.exists),
        (clean, lambda: names(work, 'iter_6.pth')),
        (paused_at('*last_checkpoint*', 0.0, mid_marker), mid_marker.exists),
    ]
    resumed_from = []
    with open(tmp_path / 'runs.log', 'w') as log:
        for config, moment in runs:
            proc = launch(config, work, log)
            try:
                wait_for(moment, proc, log)
            finally:
                kill_run(proc)
            search = find_resume_checkpoint(str(work))
            assert search.path is not None, search.why()
            assert checkpoint_problem(search.path) is None
            resumed_from.append(load(search.path)['meta']['iter'])
        proc = launch(clean, work, log)
        assert proc.wait(timeout=900) == 0, open(log.name).read()[-4000:]
    text = open(tmp_path / 'runs.log').read()
    assert text.count('Starting a new run.') == 1
    # each resume (logged by rank 0) started from the checkpoint the kill had left
    assert text.count('Resuming from ') == 3
    assert [int(n) for n in re.findall(r'resumed epoch: \d+, iter: (\d+)', text)] == resumed_from
    assert resumed_from[0] == 2 and resumed_from[1] >= 6
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_12.pth']
    assert load(work / 'iter_12.pth')['meta']['iter'] == MAX_ITERS
    assert_same_weights(straight / 'iter_12.pth', work / 'iter_12.pth')
