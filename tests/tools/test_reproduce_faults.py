"""tools/reproduce.py on broken input: a truncated runs.json or state.json of the study (an error
naming the file and ``--rebuild``, which rebuilds both from the run folders), another study's
broken files (skipped with a warning while this study's runs go on), and a study option that
names no field of its config (refused before any run, also with ``--dry-run``)."""
import glob
import json
import os
import os.path as osp
import shlex
import subprocess
import sys
import warnings

import pytest
from script_modules import load_script  # tests/
from tiny_study import DEMO, TINY_STUDY  # tests/

from mmstiff.studies import StudyError, load_study
from mmstiff.studies.plan import check_run_configs
from mmstiff.studies.spec import read_study_fields

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STUDY = TINY_STUDY


def reproduce(*args, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    env['PYTHONPATH'] = os.pathsep.join(
        [REPO] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
    return subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'reproduce.py'), *args], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=timeout)


def load_tool():
    return load_script('tools/reproduce.py', 'reproduce_tool')


def fake_call(command, log_path):
    """The stages as the real tools leave a run: a checkpoint named by last_checkpoint (train),
    metrics.json with accuracy 50 + seed (test); the runner's log lines around each."""
    work_dir = osp.dirname(log_path)
    with open(log_path, 'a') as log:
        log.write(f'\n[t] $ {shlex.join(command)}\n')
        if 'tools/train.py' in command:
            checkpoint = osp.join(work_dir, 'epoch_1.pth')
            open(checkpoint, 'wb').close()
            with open(osp.join(work_dir, 'last_checkpoint'), 'w') as f:
                f.write(checkpoint)
        else:
            seed = int(command[-1].split('=')[1])
            with open(command[command.index('--out') + 1], 'w') as f:
                json.dump({'accuracy/top1': 50.0 + seed}, f)
        log.write('[t] exit 0 after 0.5 s\n')
    return 0, 0.5


def test_truncated_runs_json_report_only_names_the_file_and_rebuild(tmp_path):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY)
    results = tmp_path / 'results'
    (results / 'tiny').mkdir(parents=True)
    truncated = '{"format": 1, "runs": [{"key": "plain/se'
    (results / 'tiny' / 'runs.json').write_text(truncated)
    with pytest.raises(SystemExit) as info:
        load_tool().main([str(study), '--report-only', '--results-dir', str(results)])
    message = str(info.value)
    assert message.startswith(f'error: {results}/tiny/runs.json is truncated: it ends at byte '
                              f'{len(truncated)} inside the JSON (Unterminated string'), message
    assert message.endswith(
        f'Nothing was run. Rebuild it from the run folders with: python tools/reproduce.py '
        f'{study} --rebuild --results-dir {results} (the unreadable file is kept as '
        f'runs.json.corrupt-<time>), or restore it (git checkout -- {results}/tiny/runs.json)')
    assert (results / 'tiny' / 'runs.json').read_text() == truncated
    assert sorted(p.name for p in (results / 'tiny').iterdir()) == ['runs.json']


def test_another_studys_broken_files_do_not_stop_the_runs(tmp_path, monkeypatch, capsys):
    """A truncated runs.json of another study in the results folder and a truncated state.json
    of a reused study: warnings naming them, every run of this study done, exit 0."""
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY + "reuse = ['first']\n")
    results, work = tmp_path / 'results', tmp_path / 'work'
    (results / 'other').mkdir(parents=True)
    (results / 'other' / 'runs.json').write_text('{"format": 1, "study": {"name": "oth')
    (work / 'first').mkdir(parents=True)
    (work / 'first' / 'state.json').write_text('{"study": "first", "runs": {')
    tool = load_tool()
    monkeypatch.setattr(warnings, 'showwarning', warnings.showwarning)  # main() replaces it
    monkeypatch.setattr(tool, 'call', fake_call)
    monkeypatch.setattr(tool, 'check_config', lambda path, options: None)  # tested below
    code = tool.main([str(study), '--work-dir', str(work), '--results-dir', str(results)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert not tool.STOP.is_set()  # no run was terminated
    assert out.count('warning: ') == 2, out
    assert (f'warning: {work}/first/state.json is truncated: it ends at byte 28 inside the '
            "JSON (Expecting property name enclosed in double quotes: line 1, column 29, byte "
            "28); no run of study 'first' is reused") in out
    assert (f'warning: {results}/other/runs.json is truncated: it ends at byte 36 inside the '
            "JSON") in out and "the index lists study 'other' as unreadable" in out
    data = json.loads((results / 'tiny' / 'runs.json').read_text())
    assert [(r['key'], r['status'], r['record']['metrics']['test/accuracy/top1'])
            for r in data['runs']] == [('plain/seed0', 'done', 50.0), ('plain/seed1', 'done', 51.0),
                                       ('stepnet/seed0', 'done', 50.0),
                                       ('stepnet/seed1', 'done', 51.0)]
    index = (results / 'README.md').read_text()
    assert '| other | – | (unreadable: other/runs.json is truncated' in index
    assert '| [tiny](tiny/README.md) | s | no declared outcome | – | – | 4/4 |' in index
    # the other study's files are left as they were
    assert (results / 'other' / 'runs.json').read_text() == '{"format": 1, "study": {"name": "oth'


def test_rebuild_from_the_run_folders_keeps_the_corrupt_files(tmp_path, monkeypatch, capsys):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY)
    results, work = tmp_path / 'results', tmp_path / 'work'
    args = [str(study), '--work-dir', str(work), '--results-dir', str(results)]
    tool = load_tool()
    monkeypatch.setattr(warnings, 'showwarning', warnings.showwarning)  # main() replaces it
    monkeypatch.setattr(tool, 'call', fake_call)
    monkeypatch.setattr(tool, 'check_config', lambda path, options: None)
    assert tool.main(args) == 0
    runs_file, state_file = results / 'tiny' / 'runs.json', work / 'tiny' / 'state.json'
    before = json.loads(runs_file.read_text())
    runs_text, state_text = runs_file.read_text()[:300], state_file.read_text()[:200]
    runs_file.write_text(runs_text)
    state_file.write_text(state_text)
    capsys.readouterr()

    # the next run stops before any work, naming the state file and --rebuild
    with pytest.raises(SystemExit) as info:
        tool.main(args)
    assert str(info.value).startswith(f'error: {state_file} is truncated: it ends at byte 200')
    assert f'tools/reproduce.py {study} --rebuild --work-dir {work} --results-dir' in str(
        info.value)

    assert tool.main([*args, '--rebuild']) == 0
    out = capsys.readouterr().out
    assert 'study tiny: 4 run(s) rebuilt from their folders' in out and '4 of 4 runs done' in out
    kept = {
        p.name.split('.corrupt-')[0]: p.read_text()
        for p in (work / 'tiny').iterdir() if '.corrupt-' in p.name
    }
    kept.update({
        p.name.split('.corrupt-')[0]: p.read_text()
        for p in (results / 'tiny').iterdir() if '.corrupt-' in p.name
    })
    assert kept == {'state.json': state_text, 'runs.json': runs_text}
    after = json.loads(runs_file.read_text())
    for old, new in zip(before['runs'], after['runs']):
        assert (new['key'], new['status'], new['record']) == (old['key'], old['status'],
                                                              old['record'])
        assert [(s['name'], [a['command'] for a in s['attempts']]) for s in new['stages']
                ] == [(s['name'], [a['command'] for a in s['attempts']]) for s in old['stages']]
    # the rebuilt state resumes: nothing left to run
    assert tool.main(args) == 0
    assert '4 runs, 4 finished, 0 to run' in capsys.readouterr().out


@pytest.mark.slow  # loads the config and mmstiff's models (the registry) once
@pytest.mark.parametrize('option, expected', [
    ('train_cfg.max_epoch=1', "option train_cfg.max_epoch=1: train_cfg has no key "
     "'max_epoch'; did you mean train_cfg.max_epochs?"),
    ('model.adaptr.type=mmstiff.SEAdaptor', "option model.adaptr.type='mmstiff.SEAdaptor': "
     "model has no key 'adaptr'; did you mean model.backbone.adaptor.type?"),
    ('model.backbone.adaptor.type=mmstiff.SEAdaptr', "model.backbone.adaptor.type="
     "'mmstiff.SEAdaptr' is not a type mmstiff registers; did you mean 'mmstiff.SEAdaptor'"),
])
def test_misspelled_option_refused_before_any_run(tmp_path, option, expected):
    study = tmp_path / 'tiny.py'
    study.write_text(
        STUDY.replace("dict(label='stepnet', config={DEMO!r})".format(DEMO=DEMO),
                      f"dict(label='stepnet', config={DEMO!r}, "
                      f"cfg_options=[{option!r}])"))
    study_obj = load_study(str(study))  # the study file itself is fine
    with pytest.raises(StudyError) as info:
        check_run_configs(study_obj, load_tool().check_config)
    assert str(info.value).startswith(f"study file {study}, run 'stepnet' (config {DEMO}): " +
                                      expected), str(info.value)


@pytest.mark.slow
def test_dry_run_refuses_a_misspelled_option(tmp_path):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY + "cfg_options = ['train_cfg.max_epoch=1']\n")
    proc = reproduce(str(study), '--dry-run', '--work-dir', str(tmp_path / 'work'))
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr.splitlines()[-1] == (
        f"error: study file {study}, run 'plain' (config {DEMO}): option "
        "train_cfg.max_epoch=1: train_cfg has no key 'max_epoch'; did you mean "
        'train_cfg.max_epochs?')
    assert not (tmp_path / 'work').exists()


@pytest.mark.slow
@pytest.mark.parametrize('path', sorted(glob.glob(osp.join(REPO, 'configs', 'studies', '*.py'))))
def test_committed_studies_pass_the_option_check(path):
    """No study of the project is refused: every option of every variant (and of every entry
    of ``configs``) names a field of its config or adds one that is no near-miss."""
    check = load_tool().check_config
    for config_set in [None, *sorted(read_study_fields(path).get('configs') or {})]:
        check_run_configs(load_study(path, config_set), check)
