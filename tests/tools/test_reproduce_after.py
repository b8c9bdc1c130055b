"""A variant that starts from another variant's run of the same seed: ``{seed}`` in its options
and ``after=[...]`` in the study file.

The stages are the fake tools of ``test_reproduce_faults`` (no training); the tool runs with
``--jobs 2``, so without ``after`` a fine-tuning run would start beside the run whose checkpoint
it reads.
"""
import json
import os.path as osp
import re
import threading
import time
import warnings

import pytest
from test_reproduce_faults import fake_call, load_tool
from tiny_study import DEMO

from mmstiff.studies import StudyError, load_study, plan_runs

STUDY = f'''
name = 'graft_tiny'
claim = dict(quote='q', source='s')
seeds = [0, 1]
_ckpt = 'model.init_cfg.checkpoint=WORK/graft_tiny/base/seed{{seed}}/epoch_1.pth'
runs = [dict(label='base', config={DEMO!r}, cfg_options=['model.backbone.adaptor=None'],
             baseline=True),
        dict(label='ft', config={DEMO!r}, cfg_options=[_ckpt], after='base')]
'''


def write_study(tmp_path, text=STUDY):
    study = tmp_path / 'graft_tiny.py'
    study.write_text(text.replace('WORK', str(tmp_path / 'work')))
    return study


def test_seed_placeholder_in_every_command(tmp_path):
    study = load_study(str(write_study(tmp_path)))
    plans = {p.key: p for p in plan_runs(study, str(tmp_path / 'work'))}
    ckpt = str(tmp_path / 'work' / 'graft_tiny' / 'base' / 'seed1' / 'epoch_1.pth')
    ft = plans['ft/seed1']
    assert ft.cfg_options == [f'model.init_cfg.checkpoint={ckpt}', 'randomness.seed=1']
    assert ft.train_command()[-2:] == ft.cfg_options
    assert ft.test_command('c.pth')[-2:] == ft.cfg_options
    assert ft.spec()['cfg_options'][0].endswith('/base/seed1/epoch_1.pth')
    assert study.variants[1].after == ('base', )
    assert plans['base/seed0'].cfg_options == ['model.backbone.adaptor=None', 'randomness.seed=0']


@pytest.mark.parametrize('change, expected', [
    ("after='base'", "runs[1].after='based' names 'based', which is not a variant listed before "
     "'ft'; expected one of ['base']"),
    ("after=['ft']", "runs[1].after=['ft'] names 'ft', which is not a variant listed before 'ft'"),
    ("after=3", 'runs[1].after=3; expected a label or a list of labels'),
    ("seeds=[0, 1, 2]", "runs[1] ('ft') comes after 'base', which does not train the seed(s) [2]"),
])
def test_bad_after_fails_before_any_work(tmp_path, change, expected):
    text = {
        "after='base'": STUDY.replace("after='base'", "after='based'"),
        "after=['ft']": STUDY.replace("after='base'", "after=['ft']"),
        'after=3': STUDY.replace("after='base'", 'after=3'),
        'seeds=[0, 1, 2]': STUDY.replace("after='base'", "after='base', seeds=[0, 1, 2]"),
    }[change]
    with pytest.raises(StudyError) as info:
        load_study(str(write_study(tmp_path, text)))
    assert expected in str(info.value)


def recording_call(events, fail=()):
    """fake_call that takes 0.3 s per train stage, records (key, 'start'|'end', checkpoint
    option found on disk or None) and fails the train stage of the run dirs in ``fail``."""
    lock = threading.Lock()

    def call(command, log_path):
        run = osp.relpath(osp.dirname(log_path), osp.dirname(osp.dirname(osp.dirname(log_path))))
        train = 'tools/train.py' in command
        ckpt = next((c.split('=', 1)[1] for c in command if c.startswith('model.init_cfg.')), None)
        with lock:
            events.append((run, 'start', train, None if ckpt is None else osp.isfile(ckpt)))
        if train:
            time.sleep(0.3)
            if run in fail:
                with lock:
                    events.append((run, 'end', train, 'failed'))
                return 1, 0.3
        result = fake_call(command, log_path)
        with lock:
            events.append((run, 'end', train, None))
        return result

    return call


def run_tool(tmp_path, monkeypatch, call):
    tool = load_tool()
    monkeypatch.setattr(warnings, 'showwarning', warnings.showwarning)  # main() replaces it
    monkeypatch.setattr(tool, 'call', call)
    monkeypatch.setattr(tool, 'check_config', lambda path, options: None)
    return tool.main([
        str(write_study(tmp_path)), '--jobs', '2', '--work-dir',
        str(tmp_path / 'work'), '--results-dir',
        str(tmp_path / 'results')
    ])


def test_a_run_waits_for_the_run_it_comes_after(tmp_path, monkeypatch, capsys):
    events = []
    code = run_tool(tmp_path, monkeypatch, recording_call(events))
    assert code == 0, capsys.readouterr().out
    for seed in (0, 1):
        base_done = events.index((f'base/seed{seed}', 'end', False, None))  # its test stage
        ft_start = events.index((f'ft/seed{seed}', 'start', True, True))  # checkpoint on disk
        assert base_done < ft_start
    data = json.loads((tmp_path / 'results' / 'graft_tiny' / 'runs.json').read_text())
    assert [(r['key'], r['status']) for r in data['runs']] == [('base/seed0', 'done'),
                                                               ('base/seed1', 'done'),
                                                               ('ft/seed0', 'done'),
                                                               ('ft/seed1', 'done')]


def test_a_failed_run_leaves_the_runs_after_it_unstarted(tmp_path, monkeypatch, capsys):
    events = []
    code = run_tool(tmp_path, monkeypatch, recording_call(events, fail={'base/seed1'}))
    out = capsys.readouterr().out
    assert code == 1, out
    assert 'ft/seed1 not started: it comes after base/seed1, which did not finish' in out
    assert re.search(
        r'\[\d/4\] ft/seed1: FAILED \(not started: it comes after base/seed1, '
        r'which did not finish\)', out), out
    assert '2 run(s) failed: base/seed1, ft/seed1' in out
    assert not any(e[0] == 'ft/seed1' for e in events)
    assert ('ft/seed0', 'start', True, True) in events
    data = json.loads((tmp_path / 'results' / 'graft_tiny' / 'runs.json').read_text())
    assert {r['key']: r['status'] for r in data['runs']}['ft/seed0'] == 'done'
    assert {r['key']: r['status'] for r in data['runs']}['ft/seed1'] != 'done'
