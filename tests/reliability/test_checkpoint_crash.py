"""A training process killed with SIGKILL in the middle of a checkpoint write can be resumed.

The kill is real: the process writes part of the file, flushes it to disk and sends itself
SIGKILL (``faults.KillDuringWrite``), then ``tools/train.py --resume`` runs on what is left.
"""
import signal

import pytest
from reliability_runs import FAULTS, assert_same_weights, load, write_config

from mmstiff.engine import checkpoint_problem


def killed(proc):
    return proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_kill_mid_checkpoint_keeps_the_previous_one(tiny_data, train, tmp_path):
    """max_keep_ckpts=1, killed halfway through writing iter_4.pth: iter_2.pth survives whole,
    last_checkpoint still names it, and --resume continues from it to the same weights as an
    uninterrupted run."""
    root = tiny_data('cifar10')
    checkpoint = dict(interval=2, max_keep_ckpts=1)
    config = write_config(tmp_path / 'crash.py', root, train_cfg=dict(max_iters=4),
                          default_hooks=dict(checkpoint=checkpoint), custom_imports=FAULTS,
                          custom_hooks=[dict(type='KillDuringWrite', pattern='*iter_4.pth*')])
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    assert killed(proc), proc.stderr[-3000:]

    # iter_4.pth never appears under its own name; iter_2.pth is complete and named
    assert not (work / 'iter_4.pth').exists()
    assert checkpoint_problem(str(work / 'iter_2.pth')) is None
    assert load(work / 'iter_2.pth')['meta']['iter'] == 2
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_2.pth')

    clean = write_config(tmp_path / 'clean.py', root, train_cfg=dict(max_iters=4),
                         default_hooks=dict(checkpoint=checkpoint))
    proc = train(clean, work, '--resume')
    log = proc.stdout + proc.stderr
    assert f'Resuming from {work / "iter_2.pth"}: last_checkpoint names it' in log
    assert 'resumed epoch: 0, iter: 2' in log
    assert load(work / 'iter_4.pth')['meta']['iter'] == 4
    assert not (work / 'iter_2.pth').exists()  # removed once iter_4.pth was complete
    # partial file of the killed write: removed by the next run
    assert not [p.name for p in work.iterdir() if p.name.endswith('.part')]

    straight = tmp_path / 'straight'
    train(clean, straight)
    assert_same_weights(straight / 'iter_4.pth', work / 'iter_4.pth')


@pytest.mark.slow
def test_kill_while_writing_last_checkpoint(tiny_data, train, tmp_path):
    """Killed after truncating nothing yet of the second last_checkpoint write (after
    iter_4.pth): last_checkpoint is not left empty, and --resume works."""
    root = tiny_data('cifar10')
    config = write_config(
        tmp_path / 'crash.py', root, train_cfg=dict(max_iters=4), custom_imports=FAULTS,
        custom_hooks=[
            dict(type='KillDuringWrite', pattern='*last_checkpoint*', fraction=0.0, occurrence=2)
        ])
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    assert killed(proc), proc.stderr[-3000:]
    named = (work / 'last_checkpoint').read_text().strip()
    assert named == str(work / 'iter_2.pth')  # the previous content, never an empty file
    assert checkpoint_problem(str(work / 'iter_4.pth')) is None  # written before the marker

    clean = write_config(tmp_path / 'clean.py', root, train_cfg=dict(max_iters=6))
    proc = train(clean, work, '--resume')
    assert 'resumed epoch: 0, iter: 2' in proc.stdout + proc.stderr
    assert load(work / 'iter_6.pth')['meta']['iter'] == 6
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_6.pth')


@pytest.mark.slow
def test_kill_before_removing_the_old_checkpoint(tiny_data, train, tmp_path):
    """max_keep_ckpts=1, killed as iter_2.pth is about to be removed: iter_4.pth is already
    complete and named; the resumed run removes the left-over iter_2.pth."""
    root = tiny_data('cifar10')
    checkpoint = dict(interval=2, max_keep_ckpts=1)
    config = write_config(tmp_path / 'crash.py', root, train_cfg=dict(max_iters=4),
                          default_hooks=dict(checkpoint=checkpoint), custom_imports=FAULTS,
                          custom_hooks=[dict(type='KillBeforeRemove', pattern='iter_2.pth')])
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    assert killed(proc), proc.stderr[-3000:]
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_4.pth')
    assert checkpoint_problem(str(work / 'iter_4.pth')) is None
    assert (work / 'iter_2.pth').exists()

    clean = write_config(tmp_path / 'clean.py', root, train_cfg=dict(max_iters=6),
                         default_hooks=dict(checkpoint=checkpoint))
    proc = train(clean, work, '--resume')
    assert 'resumed epoch: 0, iter: 4' in proc.stdout + proc.stderr
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_6.pth']
