"""Studies: runs taken over from another study (``reuse``), ``--recollect``, and the metrics
the collector derives from the logs and the spectrum (NSI–Δ correlation per stage, Δ log
amplitude change per kind of step)."""
import json
import math
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmstiff.studies import StudyError
from mmstiff.studies import collect as study_collect
from mmstiff.studies import load_study, plan_runs, runs_json
from mmstiff.studies.plan import (adopt_published_runs, adopt_reused_runs, check_against_state,
                                  needs_work)
from mmstiff.studies.state import DONE, StudyState

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

DEMO = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'


def _study(tmp_path, name, runs, extra=''):
    path = tmp_path / f'{name}.py'
    path.write_text(f"name = {name!r}\nclaim = dict(quote='q', source='s')\nseeds = [0, 1]\n"
                    f"analysis = []\nruns = {runs}\n{extra}")
    return load_study(str(path))


def _finished_run(work_root, study, plan, accuracy):
    """A finished run of ``study`` as the runner leaves it: work dir, metrics, state entry."""
    work_dir = osp.join(work_root, study, plan.key.replace('/', osp.sep))
    os.makedirs(work_dir)
    with open(osp.join(work_dir, 'metrics.json'), 'w') as f:
        json.dump({'accuracy/top1': accuracy}, f)
    state = StudyState(osp.join(work_root, study, 'state.json'), study)
    state.update(
        plan.key, status=DONE, spec=plan.spec(), work_dir=work_dir, stages=[
            dict(name='train', status=DONE, attempts=[dict(command='python x')]),
            dict(name='test', status=DONE, attempts=[])
        ], record=dict(metrics={'test/accuracy/top1': accuracy}, curves={}, profiles={}))
    return work_dir


def test_reuse_takes_identical_finished_runs_only(tmp_path):
    work_root = str(tmp_path / 'work')
    plain = f"dict(label='plain', config={DEMO!r}, cfg_options=['model.backbone.adaptor=None'])"
    first = _study(tmp_path, 'first', f'[{plain}]')
    for plan, accuracy in zip(plan_runs(first, work_root), (80.0, 81.0)):
        _finished_run(work_root, 'first', plan, accuracy)
    # seed 1 of 'first' is not finished: the second study must train it itself
    state = StudyState(osp.join(work_root, 'first', 'state.json'), 'first')
    state.update('plain/seed1', status='failed')
    second = _study(tmp_path, 'second', f"[{plain}, dict(label='stepnet', config={DEMO!r})]",
                    "reuse = ['first']")
    plans = plan_runs(second, work_root)
    mine = StudyState(osp.join(work_root, 'second', 'state.json'), 'second')
    assert adopt_reused_runs(plans, mine, work_root, second.reuse) == ['plain/seed0']
    entry = mine.run('plain/seed0')
    assert entry['reused_from'] == 'first/plain/seed0' and entry['status'] == DONE
    assert entry['record']['metrics'] == {'test/accuracy/top1': 80.0}
    assert entry['work_dir'] == plans[0].work_dir
    copied = osp.join(work_root, 'second', 'plain', 'seed0', 'metrics.json')
    assert json.load(open(copied)) == {'accuracy/top1': 80.0}
    # the stepnet runs differ in their options: not taken; a second pass adopts nothing more
    assert not mine.run('stepnet/seed0')
    assert adopt_reused_runs(plans, mine, work_root, second.reuse) == []


@pytest.mark.parametrize('reuse, expected', [
    ("reuse = 'first'", "reuse='first'; expected a list of strings"),
    ("reuse = ['second']", "reuse[0]='second'; expected the name of another study"),
    ("reuse = ['../x']", "reuse[0]='../x'; expected the name of another study"),
])
def test_bad_reuse_field_is_refused(tmp_path, reuse, expected):
    with pytest.raises(StudyError, match=expected.replace('[', r'\[').replace(']', r'\]')):
        _study(tmp_path, 'second', f"[dict(label='a', config={DEMO!r})]", reuse)


@pytest.mark.slow
def test_recollect_reads_the_work_dirs_again(tmp_path):
    work_root = str(tmp_path / 'work')
    study = _study(tmp_path, 'first', f"[dict(label='plain', config={DEMO!r})]")
    plans = plan_runs(study, work_root)
    for plan in plans:
        work_dir = _finished_run(work_root, 'first', plan, 80.0)
        with open(osp.join(work_dir, 'metrics.json'), 'w') as f:
            json.dump({'accuracy/top1': 90.0}, f)  # what a newer collector would read
    results = tmp_path / 'results'
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(
            [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    proc = subprocess.run([
        sys.executable, 'tools/reproduce.py', study.file, '--work-dir', work_root, '--results-dir',
        str(results), '--recollect'
    ], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    runs = json.load(open(results / 'first' / 'runs.json'))['runs']
    assert [r['record']['metrics']['test/accuracy/top1'] for r in runs] == [90.0, 90.0]


def test_dlogamp_change_per_kind_of_step():
    states = [('input', -1.0, 8), ('layer1.conv0', -0.5, 8), ('layer1.msa1', -2.0, 8),
              ('layers.0.mlp', -1.0, None), ('layers.0.msa', float('nan'), 8), ('layer2.0', 0.0, 8),
              ('layer3.0', 2.0, 4), ('layer3.1', 1.0, 4)]
    # conv: -1 -> -0.5 (+0.5) and 2 -> 1 (-1); msa: -0.5 -> -2 (-1.5); mlp: -2 -> -1 (+1; an
    # unknown size matches); the NaN state drops both steps that touch it; layer3.0 halves the
    # map: a downsampling step (+2), whatever its kind
    assert study_collect.dlogamp_steps(states) == {
        'conv': -0.25,
        'msa': -1.5,
        'mlp': 1.0,
        'downsample': 2.0
    }
    assert [study_collect.step_kind(n) for n in ('layer3.msa12', 'blocks.msa_proj', 'x.mlp')] \
        == ['msa', 'conv', 'mlp']


def test_correlation_means_per_stage_and_over_training():
    group = 'stiffness/nsi_step_corr'
    rows = [{
        f'{group}/layer1.0': -0.5,
        f'{group}/layer1.1': 0.1,
        f'{group}/layer2.0': 0.4
    }, {
        f'{group}/layer1.0': -0.3,
        f'{group}/layer1.1': float('nan'),
        f'{group}/layer2.0': 0.2,
        'stiffness/nsi/layer1.0': 3.0
    }]
    means = study_collect._training_means(rows, group)
    assert means == pytest.approx({'layer1.0': -0.4, 'layer1.1': 0.1, 'layer2.0': 0.3})
    stages = study_collect._stage_means(rows[1], group)
    assert stages == pytest.approx({'layer1': -0.3, 'layer2': 0.2})
    assert math.isclose(
        study_collect._stage_means({
            f'{group}/{k}': v
            for k, v in means.items()
        }, group)['layer1'], (-0.4 + 0.1) / 2)


def test_published_runs_are_adopted_without_their_work_dirs(tmp_path):
    """A fresh checkout has runs.json but no work dirs: the finished runs it lists with the same
    spec are taken over, so only new seeds train; a run with other options is not."""
    work_root = str(tmp_path / 'work')
    study = _study(tmp_path, 'grown', f"[dict(label='plain', config={DEMO!r}, "
                   "cfg_options=['a=1'])]", "analysis_args = {}\n")
    plans = plan_runs(study, work_root)
    published = StudyState(str(tmp_path / 'old_state.json'), 'grown')
    for plan in plans:
        published.update(
            plan.key, status=DONE, variant='plain', seed=plan.seed, stages=[
                dict(name='train', status=DONE, attempts=[]),
                dict(name='test', status=DONE, attempts=[])
            ], record=dict(metrics={'test/accuracy/top1': 80.0 + plan.seed}, curves={},
                           profiles={}))
    data = runs_json(study, plans, published)
    data['runs'][1]['seed'] = 7  # seed1's entry says another seed: another spec
    state = StudyState(osp.join(work_root, 'grown', 'state.json'), 'grown')
    assert adopt_published_runs(plans, state, data) == ['plain/seed0']
    check_against_state(plans, state)  # no work dir, yet kept
    entry = state.run('plain/seed0')
    assert entry['status'] == DONE and entry['from_results'] is True
    assert entry['record']['metrics'] == {'test/accuracy/top1': 80.0}
    assert not needs_work(plans[0], entry)
    assert needs_work(plans[1], state.run('plain/seed1'))
    # written back, the adopted run's entry is the published one
    assert runs_json(study, plans, state)['runs'][0] == data['runs'][0]
