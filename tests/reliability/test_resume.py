"""--resume picks the newest complete checkpoint, or stops when there is nothing to resume."""
import os

import pytest
import torch
from reliability_runs import copy_run, load

from mmstiff.engine import checkpoint_problem, find_resume_checkpoint
from mmstiff.utils.checkpoint import load_checkpoint_file


def save(path, step):
    torch.save(dict(meta=dict(iter=step), state_dict=dict(w=torch.full((64, ), float(step)))), path)
    return str(path)


def truncate(path, keep=0.5):
    data = open(path, 'rb').read()
    with open(path, 'wb') as f:
        f.write(data[:int(len(data) * keep)])


def flip_a_byte(path):
    """Damage a tensor's bytes in the middle of the archive (the pickle still loads)."""
    data = bytearray(open(path, 'rb').read())
    start = data.index(b'data/0') + 200  # inside the first tensor record's data
    data[start] ^= 0xFF
    with open(path, 'wb') as f:
        f.write(bytes(data))


@pytest.fixture
def work(tmp_path):
    """A work dir with iter_2.pth, iter_4.pth, iter_6.pth and last_checkpoint -> iter_6."""
    for step in (2, 4, 6):
        save(tmp_path / f'iter_{step}.pth', step)
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_6.pth'))
    return tmp_path


def test_last_checkpoint_wins_when_complete(work):
    search = find_resume_checkpoint(str(work))
    assert search.path == str(work / 'iter_6.pth')
    assert search.why() == 'last_checkpoint names it'


@pytest.mark.parametrize('marker', ['', '\n', None], ids=['empty', 'blank', 'missing'])
def test_no_usable_last_checkpoint_falls_back_to_the_newest(work, marker):
    if marker is None:
        os.remove(work / 'last_checkpoint')
    else:
        (work / 'last_checkpoint').write_text(marker)
    search = find_resume_checkpoint(str(work))
    assert search.path == str(work / 'iter_6.pth')
    said = 'there is no last_checkpoint file' if marker is None else 'last_checkpoint is empty'
    assert search.why() == f'it is the newest complete checkpoint ({said})'


@pytest.mark.parametrize('damage', ['truncate', 'empty', 'flip', 'delete'])
def test_damaged_named_checkpoint_falls_back(work, damage):
    target = work / 'iter_6.pth'
    if damage == 'truncate':
        truncate(target)
    elif damage == 'empty':
        truncate(target, 0)
    elif damage == 'flip':
        flip_a_byte(target)
        load_checkpoint_file(str(target))  # loading alone does not notice
    else:
        os.remove(target)
    search = find_resume_checkpoint(str(work))
    assert search.path == str(work / 'iter_4.pth')
    problem = {
        'truncate': 'is truncated',
        'empty': 'is empty (0 bytes)',
        'flip': "fails the CRC-32 check",
        'delete': 'does not exist'
    }[damage]
    assert problem in search.passed_over[0][1]
    assert search.why().startswith(f'it is the newest complete checkpoint (last_checkpoint '
                                   f'names {target}, which')


def test_every_damaged_checkpoint_is_passed_over(work):
    truncate(work / 'iter_6.pth')
    truncate(work / 'iter_4.pth', 0.9)
    save(work / 'iter_10.pth', 10)
    truncate(work / 'iter_10.pth', 0.1)
    (work / 'last_checkpoint').write_text('')
    search = find_resume_checkpoint(str(work))
    assert search.path == str(work / 'iter_2.pth')
    assert [os.path.basename(p)
            for p, _ in search.passed_over] == ['iter_10.pth', 'iter_6.pth',
                                                'iter_4.pth']  # newest (largest step) first


def test_nothing_to_resume(tmp_path):
    search = find_resume_checkpoint(str(tmp_path))
    assert search.path is None
    assert search.why() == ('there is no last_checkpoint file; no iter_*.pth or epoch_*.pth '
                            'checkpoint is there')
    save(tmp_path / 'epoch_3.pth', 3)
    truncate(tmp_path / 'epoch_3.pth')
    search = find_resume_checkpoint(str(tmp_path))
    assert search.path is None and 'no complete checkpoint is left' in search.why()
    search = find_resume_checkpoint(str(tmp_path / 'typo'))
    assert search.path is None and not search.work_dir_exists
    assert search.why() == f"the work dir {str(tmp_path / 'typo')!r} does not exist"


def test_moved_work_dir_is_found_by_name(work, tmp_path_factory):
    moved = tmp_path_factory.mktemp('moved') / 'work'
    os.rename(work, moved)  # last_checkpoint still names the old place
    assert find_resume_checkpoint(str(moved)).path == str(moved / 'iter_6.pth')


def test_checkpoint_problem_names_what_is_wrong(tmp_path):
    assert checkpoint_problem(save(tmp_path / 'ok.pth', 1)) is None
    torch.save([1, 2], tmp_path / 'list.pth')
    assert checkpoint_problem(str(tmp_path /
                                  'list.pth')) == ('is not a training checkpoint (no state_dict)')
    (tmp_path / 'text.pth').write_text('not a checkpoint')
    assert checkpoint_problem(str(tmp_path / 'text.pth')).startswith('cannot be loaded')
    assert checkpoint_problem(str(tmp_path)) == 'is not a file'


# -- through tools/train.py ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize('where', ['empty', 'typo'])
def test_resume_with_nothing_to_resume_stops_and_writes_nothing(trained_run, train, tmp_path,
                                                                where):
    config, _ = trained_run
    work = tmp_path / 'work'
    if where == 'empty':
        work.mkdir()
    proc = train(config, work, '--resume', check=False)
    assert proc.returncode == 1
    why = ('there is no last_checkpoint file; no iter_*.pth or epoch_*.pth checkpoint is there'
           if where == 'empty' else f'the work dir {str(work)!r} does not exist')
    assert (f"error: --resume: nothing to resume in the work dir {str(work)!r}: {why}."
            in proc.stderr), proc.stderr[-2000:]
    assert 'Traceback' not in proc.stderr
    assert (list(work.iterdir()) == []) if where == 'empty' else not work.exists()


@pytest.mark.slow
def test_resume_or_start_starts_a_new_run(trained_run, train, tmp_path):
    config, _ = trained_run
    work = tmp_path / 'work'
    proc = train(config, work, '--resume-or-start', '--cfg-options', 'train_cfg.max_iters=2')
    assert (f'Nothing to resume in {work}: the work dir {str(work)!r} does not exist. '
            'Starting a new run.') in proc.stdout + proc.stderr
    assert load(work / 'iter_2.pth')['meta']['iter'] == 2
    proc = train(config, work, '--resume', '--resume-or-start', check=False)
    assert proc.returncode == 2 and 'not allowed with argument' in proc.stderr


@pytest.mark.slow
def test_truncated_newest_checkpoint_resumes_from_the_one_before(trained_run, train, tmp_path):
    config, trained = trained_run
    work = copy_run(trained, tmp_path / 'work')
    truncate(work / 'iter_4.pth')
    before = (work / 'iter_2.pth').read_bytes()
    proc = train(config, work, '--resume')
    log = proc.stdout + proc.stderr
    assert (f'Resuming from {work / "iter_2.pth"}: it is the newest complete checkpoint '
            f'(last_checkpoint names {work / "iter_4.pth"}, which is truncated') in log
    assert 'resumed epoch: 0, iter: 2' in log
    assert load(work / 'iter_4.pth')['meta']['iter'] == 4  # written again, whole
    assert checkpoint_problem(str(work / 'iter_4.pth')) is None
    assert (work / 'iter_2.pth').read_bytes() == before


@pytest.mark.slow
def test_damaged_explicit_checkpoint_is_an_error(trained_run, train, tmp_path):
    config, trained = trained_run
    work = copy_run(trained, tmp_path / 'work')
    truncate(work / 'iter_4.pth', 0)
    proc = train(config, work, '--resume', str(work / 'iter_4.pth'), check=False)
    assert proc.returncode == 1
    assert (f"error: --resume checkpoint {str(work / 'iter_4.pth')!r} is empty (0 bytes); it "
            f"cannot be resumed from; the newest complete checkpoint beside it is "
            f"{work / 'iter_2.pth'}") in proc.stderr, proc.stderr[-2000:]
