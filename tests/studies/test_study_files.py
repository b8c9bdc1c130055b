"""The runner's files when they are broken: a truncated, invalid or foreign ``state.json`` /
``runs.json`` named with what is wrong, a corrupt runs.json kept before it is replaced, another
study's broken files skipped in the index and in ``reuse``, and a run's entry rebuilt from its
run folder (``--rebuild``)."""
import json
import os
import os.path as osp
import shlex

import pytest

from mmstiff.studies import load_study, plan_runs, runs_json, write_index, write_runs
from mmstiff.studies.errors import StudyWarning
from mmstiff.studies.files import UnreadableFile, read_runs_file, read_state_file
from mmstiff.studies.plan import adopt_reused_runs
from mmstiff.studies.rebuild import entry_from_folder, read_attempts
from mmstiff.studies.state import StudyState

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'


def tiny_study(tmp_path, name='tiny', extra=''):
    path = tmp_path / f'{name}.py'
    path.write_text(f"name = {name!r}\nclaim = dict(quote='q', source='s')\nseeds = [0, 1]\n"
                    f"runs = [dict(label='plain', config={DEMO!r}, "
                    f"cfg_options=['model.backbone.adaptor=None'], baseline=True)]\n{extra}")
    return load_study(str(path))


def good_runs(tmp_path, name='tiny'):
    """A runs.json as the runner writes it (every run pending)."""
    study = tiny_study(tmp_path, name)
    plans = plan_runs(study, str(tmp_path / 'work'))
    return runs_json(study, plans, StudyState(str(tmp_path / f'{name}-state.json'), name))


@pytest.mark.parametrize('cut, expected', [
    (lambda text: text[:len(text) // 2], 'is truncated: it ends at byte {n} inside the JSON'),
    (lambda text: text[:-3], 'is truncated: it ends at byte {n} inside the JSON'),
    (lambda text: '', 'is empty (0 bytes)'),
    (lambda text: text.replace('"format"', '"format" 1', 1), 'is not valid JSON (Expecting'),
    (lambda text: '[]', 'is not the structure the runner writes: the file is a list, expected '
     'a dict'),
    (lambda text: text.replace('"runs":', '"rns":', 1),
     "is not the structure the runner writes: the file has no 'runs'"),
])
def test_broken_runs_json_is_named_with_what_is_wrong(tmp_path, cut, expected):
    path = tmp_path / 'runs.json'
    broken = cut(json.dumps(good_runs(tmp_path), indent=2, sort_keys=True) + '\n')
    path.write_text(broken)
    with pytest.raises(UnreadableFile) as info:
        read_runs_file(str(path))
    assert str(info.value).startswith(f'{path} ')
    assert expected.format(n=len(broken.encode())) in str(info.value)


def test_truncated_state_json_is_named_not_a_decode_traceback(tmp_path):
    path = tmp_path / 'state.json'
    state = StudyState(str(path), 'tiny')
    state.update('plain/seed0', status='done')
    text = path.read_text()
    path.write_text(text[:40])
    with pytest.raises(UnreadableFile, match=r'state\.json is truncated: it ends at byte 40'):
        StudyState(str(path), 'tiny')
    path.write_text('{"study": "tiny", "runs": {"plain/seed0": 3}}')
    with pytest.raises(UnreadableFile, match=r"runs\['plain/seed0'\] is a int, expected a dict"):
        read_state_file(str(path))


def test_a_corrupt_runs_json_is_kept_before_it_is_replaced(tmp_path):
    data = good_runs(tmp_path)
    target = tmp_path / 'results' / 'tiny' / 'runs.json'
    target.parent.mkdir(parents=True)
    target.write_text('{"format": 1, "study": {"na')
    with pytest.warns(StudyWarning, match='is truncated.*kept it as .*runs.json.corrupt-'):
        write_runs(str(tmp_path / 'results'), data)
    kept = list(target.parent.glob('runs.json.corrupt-*'))
    assert len(kept) == 1 and kept[0].read_text() == '{"format": 1, "study": {"na'
    assert read_runs_file(str(target)) == data
    # a readable file is replaced without a copy
    write_runs(str(tmp_path / 'results'), data)
    assert len(list(target.parent.glob('runs.json.corrupt-*'))) == 1


def test_index_lists_another_studys_broken_runs_json_as_unreadable(tmp_path):
    results = tmp_path / 'results'
    good = good_runs(tmp_path, 'good')
    write_runs(str(results), good)
    (results / 'broken').mkdir()
    (results / 'broken' / 'runs.json').write_text('{"format": 1, "runs": [')
    with pytest.warns(
            StudyWarning, match=r'broken/runs\.json is truncated.*lists study '
            "'broken' as unreadable"):
        write_index(str(results))
    lines = (results / 'README.md').read_text().splitlines()
    rows = [line for line in lines if line.startswith('| ')][1:]  # after the header
    assert rows[0].startswith('| broken | – | (unreadable: broken/runs.json is truncated: it '
                              'ends at byte 23 inside the JSON')
    assert rows[1].startswith('| [good](good/README.md) | s | no declared outcome |')
    assert rows[1].endswith('| 0/2 |') and len(rows) == 2


def test_reuse_skips_another_studys_truncated_state(tmp_path):
    work_root = tmp_path / 'work'
    (work_root / 'first').mkdir(parents=True)
    (work_root / 'first' / 'state.json').write_text('{"study": "first", "runs": {"plain/se')
    second = tiny_study(tmp_path, 'second', "reuse = ['first']")
    plans = plan_runs(second, str(work_root))
    mine = StudyState(str(work_root / 'second' / 'state.json'), 'second')
    with pytest.warns(StudyWarning, match=r"first/state\.json is truncated.*no run of study "
                      "'first' is reused"):
        assert adopt_reused_runs(plans, mine, str(work_root), second.reuse) == []
    assert mine.runs() == {}


def finished_folder(plan, accuracy, test_code=0, options=None):
    """A run folder as the runner leaves it: reproduce.log with the stages' commands and
    exits, a checkpoint named by last_checkpoint, metrics.json."""
    work_dir = plan.path(plan.work_dir)
    os.makedirs(work_dir)
    checkpoint = osp.join(work_dir, 'epoch_1.pth')
    open(checkpoint, 'wb').close()
    with open(osp.join(work_dir, 'last_checkpoint'), 'w') as f:
        f.write(checkpoint)
    with open(osp.join(work_dir, 'metrics.json'), 'w') as f:
        json.dump({'accuracy/top1': accuracy}, f)
    train = plan.train_command()
    if options is not None:
        train = train[:train.index('--cfg-options') + 1] + options
    with open(osp.join(work_dir, 'reproduce.log'), 'w') as f:
        f.write(f'\n[2026-01-01T10:00:00+00:00] $ {shlex.join(train)}\nlog of the run\n'
                '[2026-01-01T10:00:20+00:00] exit -15 after 20.0 s\n'
                f'\n[2026-01-01T10:01:00+00:00] $ {shlex.join(plan.train_command(True))}\n'
                '[2026-01-01T10:01:30+00:00] exit 0 after 30.5 s\n'
                f'\n[2026-01-01T10:02:00+00:00] $ {shlex.join(plan.test_command(checkpoint))}\n'
                f'[2026-01-01T10:02:04+00:00] exit {test_code} after 4.25 s\n')
    return work_dir


def test_entry_rebuilt_from_a_run_folder(tmp_path):
    study = tiny_study(tmp_path)
    plans = plan_runs(study, str(tmp_path / 'work'))
    finished_folder(plans[0], 81.5)
    entry, why = entry_from_folder(plans[0])
    assert why is None and entry['status'] == 'done'
    assert entry['record']['metrics'] == {'test/accuracy/top1': 81.5}
    assert entry['spec'] == plans[0].spec() and entry['started'] == '2026-01-01T10:00:00+00:00'
    train, test = entry['stages']
    assert [a['returncode'] for a in train['attempts']] == [-15, 0]
    assert '--resume' in train['attempts'][1]['command']
    assert test['attempts'][0]['wall_time_s'] == 4.25
    assert entry['wall_time_s'] == 20.0 + 30.5 + 4.25
    # a failed test stage: failed, pointing at the log; another seed's options: not taken
    finished_folder(plans[1], 70.0, test_code=1)
    entry, _ = entry_from_folder(plans[1])
    assert entry['status'] == 'failed' and 'the test stage failed' in entry['error']
    (tmp_path / 'other').mkdir()
    other = plan_runs(tiny_study(tmp_path / 'other'), str(tmp_path / 'work2'))[0]
    finished_folder(other, 1.0, options=['model.backbone.adaptor=None', 'randomness.seed=7'])
    entry, why = entry_from_folder(other)
    assert entry is None and "randomness.seed=7'], the study file gives" in why


def test_attempt_without_exit_line_is_interrupted():
    attempts = read_attempts('[t0] $ python tools/train.py c.py --cfg-options a=1\npartial\n')
    assert attempts == {
        'train': [
            dict(command='python tools/train.py c.py --cfg-options a=1', started='t0',
                 returncode=None, wall_time_s=None)
        ]
    }
