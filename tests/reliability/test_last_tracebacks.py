"""Beyond the one line of each case (``test_error_lines.py``, ``last_cases.py``;
docs/reliability.md): the newest complete checkpoint a full disk left resumes, with the disk
filled for real where a tmpfs can be mounted; the lists MMEngine accepts pass the Runner-list
check; with several processes started by hand (no torchrun), the one failing rank prints the line
once and its peers no traceback; the pieces (the atomic write, the training's ending on a failed
write) in-process.
"""
import errno
import fcntl
import os
import os.path as osp
import subprocess
import sys

import pytest
from reliability_runs import FAULTS, REPO, load, write_config

from mmstiff.engine import checkpoint_problem


def last_line(proc):
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ''


def assert_one_line(proc, *needles):
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    line = last_line(proc)
    assert line.startswith('error: '), proc.stderr[-3000:]
    for needle in needles:
        assert needle in line, (needle, line)
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith('error: ')] == [line]
    return line


def lock_is_free(work):
    with open(work / '.lock', 'a') as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError when held


# ------------------------------------------------------------------ the lists the Runner builds
def test_well_formed_runner_lists_pass(tiny_data):
    """The lists of the repository's own configs, as MMEngine accepts them, pass."""
    from mmengine.config import Config

    from mmstiff.apis.config_checks import check_runner_lists
    for path in ('configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py',
                 'tests/data/configs/cifar10_resnet18_tiny_diagnostics.py'):
        cfg = Config.fromfile(osp.join(REPO, path))
        check_runner_lists(cfg)
    cfg = Config(
        dict(default_scope='mmpretrain', param_scheduler=dict(main=[dict(type='ConstantLR')],
                                                              aux=dict(type='LinearLR')),
             custom_hooks=None))
    check_runner_lists(cfg)  # schedulers of several optimizers, by optimizer name


# ------------------------------------------------------------------ a full disk
def _disk_full_config(tmp_path, root):
    return write_config(tmp_path / 'full.py', root, train_cfg=dict(max_iters=4),
                        custom_imports=FAULTS,
                        custom_hooks=[dict(type='DiskFullDuringWrite', pattern='*iter_4.pth*')])


@pytest.mark.slow
def test_a_full_disk_while_a_checkpoint_is_written_is_one_line_and_the_run_resumes(
        tiny_data, train, tmp_path):
    """ENOSPC halfway through iter_4.pth: one line naming the file, its size, the newest
    complete checkpoint (iter_2.pth) and the command that resumes; the lock is free, no
    partial file is left, and --resume continues from iter_2.pth to a complete iter_4.pth."""
    root = tiny_data('cifar10')
    config = _disk_full_config(tmp_path, root)
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    line = assert_one_line(
        proc, f'Training stopped: could not write {work / "iter_4.pth"}: No space left on device '
        '(ENOSPC; it needs ', f'the newest complete checkpoint is {work / "iter_2.pth"}',
        f'python tools/train.py {config} --work-dir {work} --resume')
    size = osp.getsize(work / 'iter_2.pth')  # iter_4.pth holds the same tensors
    assert f'it needs {size / 2**20:.1f} MiB' in line or f'it needs {size} bytes' in line \
        or abs(int(line.split('it needs ')[1].split(' bytes')[0]) - size) < 64
    lock_is_free(work)
    assert not (work / 'iter_4.pth').exists()
    assert not [p.name for p in work.iterdir() if p.name.endswith('.part')]
    assert checkpoint_problem(str(work / 'iter_2.pth')) is None
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_2.pth')
    logs = list(work.glob('*/*.log'))
    assert logs and 'No space left on device' in logs[0].read_text()

    clean = write_config(tmp_path / 'clean.py', root, train_cfg=dict(max_iters=4))
    proc = train(clean, work, '--resume')
    log = proc.stdout + proc.stderr
    assert f'Resuming from {work / "iter_2.pth"}: last_checkpoint names it' in log
    assert 'resumed epoch: 0, iter: 2' in log
    assert checkpoint_problem(str(work / 'iter_4.pth')) is None
    assert load(work / 'iter_4.pth')['meta']['iter'] == 4


def _mount_tmpfs(folder, size_kib):
    folder.mkdir()
    try:
        subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size_kib}k', 'tmpfs',
                        str(folder)], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip('mounting a tmpfs needs root here; the injected ENOSPC test covers this')


@pytest.mark.slow
def test_a_real_full_file_system(trained_run, train, tmp_path):
    """A tmpfs with room for iter_2.pth and the logs but not for iter_4.pth as well: the same
    one line as the injected ENOSPC, from the kernel's own error."""
    config, done = trained_run
    size = osp.getsize(done / 'iter_2.pth')
    work = tmp_path / 'small'
    _mount_tmpfs(work, (size + size // 2) // 1024 + 256)
    try:
        proc = train(config, work, check=False)
        assert_one_line(proc, f'could not write {work / "iter_4.pth"}: No space left on device',
                        f'the newest complete checkpoint is {work / "iter_2.pth"}', '--resume')
        lock_is_free(work)
        assert checkpoint_problem(str(work / 'iter_2.pth')) is None
        assert not [p.name for p in work.iterdir() if p.name.endswith('.part')]
    finally:
        subprocess.run(['umount', '-l', str(work)], capture_output=True, timeout=30)


# ------------------------------------------------------------------ several processes by hand
WORKER = r'''
import os, sys, time
import torch.distributed as dist
from mmstiff.tool_main import run_tool
from mmstiff.datasets.preflight import DataCheckError
rank, world, port, failing = map(int, sys.argv[1:5])
os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR='127.0.0.1',
                  MASTER_PORT=str(port))
dist.init_process_group('gloo')

def main():
    if rank == failing:
        raise DataCheckError(f'shard {rank}: a planted data error')
    dist.barrier()  # the others wait for the failing rank, which never comes

run_tool(main)
'''


@pytest.mark.slow
@pytest.mark.parametrize('failing', [0, 1])
def test_one_failing_rank_prints_one_line_and_the_others_no_traceback(tmp_path, failing):
    from distributed_launch import free_port  # tests/
    script = tmp_path / 'worker.py'
    script.write_text(WORKER)
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=REPO)
    env.pop('MMSTIFF_DEBUG', None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script),
             str(rank), '2', str(port),
             str(failing)], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    stderr = ''.join(err for _, err in outs)
    assert [p.returncode for p in procs] == [1, 1], stderr[-3000:]
    assert 'Traceback' not in stderr, stderr[-3000:]
    errors = [ln for ln in stderr.splitlines() if ln.startswith('error: ')]
    named = '' if failing == 0 else 'on rank 1 (of 2): '
    assert errors == [f'error: {named}shard {failing}: a planted data error']
    assert outs[failing][1].strip().splitlines()[-1] == errors[0]


# ------------------------------------------------------------------ the pieces, in-process
def test_a_failed_atomic_write_names_the_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    from mmstiff.engine.atomic_files import WriteFailedError, write_atomic
    path = tmp_path / 'last_checkpoint'
    write_atomic(str(path), 'iter_2.pth')
    data = b'x' * 300_000

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, 'fsync', no_space)
    with pytest.raises(WriteFailedError) as err:
        write_atomic(str(tmp_path / 'iter_4.pth'), data)
    assert isinstance(err.value, OSError) and err.value.errno == errno.ENOSPC
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert str(err.value) == (f'could not write {tmp_path / "iter_4.pth"}: No space left on '
                              f'device (ENOSPC; it needs 0.3 MiB; {free / 2**20:.1f} MiB free on '
                              'that file system)')
    with pytest.raises(WriteFailedError, match='last_checkpoint: No space left on device'):
        write_atomic(str(path), 'iter_4.pth')
    assert path.read_text() == 'iter_2.pth'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['last_checkpoint']  # no partial file


class _Runner:

    def __init__(self, work_dir, error):
        self.work_dir, self.error = str(work_dir), error

    def train(self):
        raise self.error


def test_a_failed_write_in_training_says_what_is_intact_and_how_to_resume(tmp_path):
    import argparse

    import torch

    from mmstiff.apis.runtime import RunWriteError, run
    from mmstiff.engine.atomic_files import WriteFailedError
    work = tmp_path / 'work'
    work.mkdir()
    for step in (2, 4):
        torch.save(
            dict(state_dict=dict(w=torch.zeros(2)), meta=dict(iter=step)),
            work / f'iter_{step}.pth')
    (work / 'iter_4.pth').write_bytes((work / 'iter_4.pth').read_bytes()[:100])  # truncated
    cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    args = argparse.Namespace(config='c.py')
    with pytest.raises(RunWriteError) as err:
        run(_Runner(work, WriteFailedError(str(work / 'iter_6.pth'), 1000, cause)), args, 'train')
    text = str(err.value)
    assert text.startswith(f'Training stopped: could not write {work / "iter_6.pth"}: No space '
                           'left on device (ENOSPC; it needs 1000 bytes; ')
    assert text.endswith(f'Nothing written before is lost: the newest complete checkpoint is '
                         f'{work / "iter_2.pth"}; free some space and '
                         f'resume from it with: python tools/train.py c.py --work-dir {work} '
                         '--resume')
    # a write that is not atomic (MMEngine's JSON log of scalars): the kernel's error
    log_error = PermissionError(errno.EACCES, 'Permission denied', str(work / 'scalars.json'))
    with pytest.raises(
            RunWriteError, match=r'could not write .*scalars.json: Permission denied '
            r'\(EACCES\)\. Nothing written before is lost: .*; make the folder writable and '
            r'resume from it'):
        run(_Runner(work, log_error), args, 'train')
    with pytest.raises(KeyError):  # anything else passes through
        run(_Runner(work, KeyError('x')), args, 'train')


def test_a_log_file_the_disk_refuses_stops_the_run_and_other_log_errors_do_not(tmp_path, capsys):
    import argparse
    import logging

    from mmstiff.apis.runtime import RunWriteError, run

    class FullStream:

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            pass

    class LoggingRunner(_Runner):

        def __init__(self, work_dir, message, *args):
            super().__init__(work_dir, None)
            self.logger = logging.getLogger(f'test-log-{id(self)}')
            self.handler = logging.FileHandler(str(tmp_path / 'run.log'), delay=True)
            self.logger.addHandler(self.handler)
            self.logger.propagate = False  # pytest's own handler fails on any logging error
            self.message, self.args = message, args

        def train(self):
            self.logger.warning(self.message, *self.args)
            return 'trained'

    args = argparse.Namespace(config='c.py')
    bad_format = LoggingRunner(tmp_path, 'iteration %d', 'not a number')
    assert run(bad_format, args, 'train') == 'trained'  # reported by logging, the run goes on
    assert '--- Logging error ---' in capsys.readouterr().err
    full = LoggingRunner(tmp_path, 'iteration %d', 3)
    full.handler.stream = FullStream()
    with pytest.raises(
            RunWriteError, match=r'could not write .*/run.log: No space left on '
            r'device \(ENOSPC; .* free on that file system\)\. No complete checkpoint '
            'is in .* yet; free some space and train again'):
        run(full, args, 'train')
