"""tools/reproduce.py: study files checked before any work, and a tiny study end to end.

The end-to-end test runs 2 configs × 2 seeds × 2 iterations on tiny Fashion-MNIST-format
files, kills the runner (SIGKILL to its process group) while the second run's training sleeps
after its first checkpoint, resumes the study with ``--jobs 2``, and checks that the finished
run was not run again, that the interrupted one resumed from its checkpoint, the numbers of the
page against runs.json, and that ``--report-only`` writes the same bytes again.
"""
import json
import math
import os
import os.path as osp
import re
import signal
import subprocess
import sys
import time

import pytest
from scipy import stats

from mmstiff.analysis.statistics import mean

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')

GOOD = f'''
name = 'tiny'
claim = dict(quote='A step-size adaptor helps.', source='a test')
seeds = [0, 1]
runs = [dict(label='plain', config={DEMO!r}, cfg_options=['model.backbone.adaptor=None'],
             baseline=True),
        dict(label='stepnet', config={DEMO!r})]
'''


def child_env(env=None):
    """The environment of a runner started by a test: this checkout's mmstiff first."""
    full_env = dict(os.environ, OMP_NUM_THREADS='1')
    full_env.update(env or {})
    full_env['PYTHONPATH'] = os.pathsep.join(
        [REPO] + [p for p in full_env.get('PYTHONPATH', '').split(os.pathsep) if p])
    return full_env


def reproduce(*args, env=None, timeout=900):
    full_env = child_env(env)
    return subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'reproduce.py'), *args], cwd=REPO, env=full_env,
        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize('change, expected', [
    (("seeds = [0, 1]", "seeds = [0, '1']"), "seeds[1]='1' is not a seed"),
    (("seeds = [0, 1]", "seeds = [0, 1.5]"), 'seeds[1]=1.5 is not a seed'),
    (("seeds = [0, 1]", "seeds = [0, 0]"), 'repeats the seed(s) [0]'),
    (("label='stepnet'", "label='plain'"), "runs[1].label='plain' is used twice"),
    ((f"config={DEMO!r})", "config='configs/demo/missing.py')"),
     "runs[1].config='configs/demo/missing.py' does not exist"),
    (("config={DEMO!r})".format(DEMO=DEMO), f"config={DEMO!r}, analysis=['tns', 'hessain'])"),
     "runs[1].analysis[1]='hessain' is not an analysis tool; expected one of "
     "['freq_noise', 'hessian', 'spectrum', 'tns']"),
    (("baseline=True", "baseline='se'"), "runs[0].baseline='se' names 'se', which is not a label"),
    (("seeds = [0, 1]", "seeds = [0, 1]\nseed = 3"), "unknown field(s) ['seed']"),
    (("seeds = [0, 1]", "seeds = [0, 1]\nanalysis_arg = {}"),
     "has unknown field(s) ['analysis_arg'] (did you mean 'analysis_args' for 'analysis_arg'?); "
     'expected some of'),
    (("label='stepnet'", "label='stepnet', seed=[2]"),
     "runs[1] has unknown field(s) ['seed'] (did you mean 'seeds' for 'seed'?)"),
    (("seeds = [0, 1]", "seeds = [0, 1]\ncfg_options = ['randomness.seed=3']"),
     "cfg_options[0]='randomness.seed=3' sets the seed"),
    (("seeds = [0, 1]", "seeds = [0, 1]\nverdict = 'up by {delta[stepnet]}'"),
     'verdict refers to {delta[stepnet]}'),
    (("claim = dict(quote='A step-size adaptor helps.', ", "claim = dict("),
     "claim misses the required field(s) ['quote']"),
])
def test_bad_study_fails_before_any_work(change, expected, tmp_path):
    old, new = change
    assert old in GOOD
    study = tmp_path / 'study.py'
    study.write_text(GOOD.replace(old, new))
    work = tmp_path / 'work'
    proc = reproduce(str(study), '--work-dir', str(work), '--results-dir', str(tmp_path / 'r'))
    assert proc.returncode != 0
    assert proc.stderr.startswith('error: ') and expected in proc.stderr, proc.stderr
    assert not work.exists() and not (tmp_path / 'r').exists()


def test_unknown_study_file_and_missing_results(tmp_path):
    proc = reproduce('no_such_study', '--work-dir', str(tmp_path / 'work'))
    assert proc.returncode != 0
    assert "study file 'no_such_study' does not exist" in proc.stderr
    study = tmp_path / 'study.py'
    study.write_text(GOOD)
    proc = reproduce(str(study), '--report-only', '--results-dir', str(tmp_path / 'r'))
    assert proc.returncode != 0 and 'runs.json does not exist' in proc.stderr


def test_yaml_study_dry_run_prints_every_command(tmp_path):
    study = tmp_path / 'study.yaml'
    study.write_text(f'''
name: tiny_yaml
claim: {{quote: q, source: s}}
seeds: [3, 4]
analysis: [tns]
analysis_args: {{tns: [--num-batches, '2']}}
cfg_options: [train_cfg.max_epochs=1]
runs:
  - {{label: plain, config: {DEMO}, cfg_options: [model.backbone.adaptor=None], baseline: true}}
  - {{label: stepnet, config: {DEMO}}}
''')
    proc = reproduce(str(study), '--dry-run', '--work-dir', str(tmp_path / 'work'))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith(' ')
            ] == ['plain/seed3', 'plain/seed4', 'stepnet/seed3', 'stepnet/seed4']
    run_dir = osp.join(str(tmp_path / 'work'), 'tiny_yaml', 'plain', 'seed4')
    assert (f'  python tools/train.py {DEMO} --work-dir {run_dir} --cfg-options '
            'train_cfg.max_epochs=1 model.backbone.adaptor=None randomness.seed=4') in lines
    assert (f'  python tools/analysis/tns.py {DEMO} CKPT --out-dir {run_dir}/analysis/tns '
            '--num-batches 2 --cfg-options train_cfg.max_epochs=1 '
            'model.backbone.adaptor=None randomness.seed=4') in lines
    assert not (tmp_path / 'work').exists()


def handwritten_runs(study_file):
    """runs.json of a study with variants a (baseline) and b, seeds 0-2, written by hand."""
    accuracy = dict(a=[1.0, 2.0, 3.0], b=[3.0, 4.0, 5.0])
    runs = []
    for label in ('a', 'b'):
        for seed, value in enumerate(accuracy[label]):
            runs.append(
                dict(
                    key=f'{label}/seed{seed}', variant=label, seed=seed, status='done',
                    work_dir=f'work_dirs/studies/hand/{label}/seed{seed}', error=None, started=None,
                    finished=None, wall_time_s=10.0 + seed, checkpoint=None,
                    environment='CPU, 2 cores', stages=[
                        dict(
                            name='train', status='done', attempts=[
                                dict(
                                    command=('python tools/train.py x.py --cfg-options '
                                             f'randomness.seed={seed}'), returncode=0,
                                    wall_time_s=10.0 + seed)
                            ])
                    ], record=dict(
                        metrics={
                            'test/accuracy/top1': value,
                            'train/time_per_iter_s': 0.5
                        }, curves={
                            'train/loss': dict(x=[1, 2], y=[2.0, 1.0 + seed], x_label='iteration')
                        }, profiles={
                            'freq_noise/drop':
                            dict(x=[0.0, 0.5, 1.0], y=[0.0, seed, 2.0 * seed],
                                 x_label='noise band centre (×π)')
                        })))
    variants = [
        dict(label='a', config=DEMO, cfg_options=[], is_baseline=True, compare_to=[],
             seeds=[0, 1, 2], analysis=[]),
        dict(label='b', config=DEMO, cfg_options=['x=1'], is_baseline=False, compare_to=['a'],
             seeds=[0, 1, 2], analysis=[])
    ]
    return dict(
        format=1, runs=runs,
        study=dict(name='hand', file=study_file, claim=dict(quote='q', source='s', tested=None),
                   cfg_options=[], variants=variants, analysis_args={}))


#: the study of handwritten_runs: b against the baseline a, greater by 1 or more
HAND_STUDY = f"""
name = 'hand'
claim = dict(quote='B beats A.', source='a hand-made study')
seeds = [0, 1, 2]
runs = [dict(label='a', config={DEMO!r}, baseline=True),
        dict(label='b', config={DEMO!r}, cfg_options=['x=1'])]
outcome = dict(metric='test/accuracy/top1', comparison=['b', 'a'], direction='greater',
               margin=1.0)
"""


@pytest.mark.slow
def test_report_only_from_runs_json_by_hand(tmp_path):
    study = tmp_path / 'hand.py'
    study.write_text(HAND_STUDY + """
verdict = ('Inconclusive: b - a = {diff[b][test/accuracy/top1]}, CI '
           '{ci[b][a][test/accuracy/top1]}, p = {p[b][test/accuracy/top1]}, n = '
           '{n[b][test/accuracy/top1]}, mean {mean[a][test/accuracy/top1]} ± '
           '{std[a][test/accuracy/top1]}')
""")
    results = tmp_path / 'results'
    (results / 'hand').mkdir(parents=True)
    (results / 'hand' / 'runs.json').write_text(json.dumps(handwritten_runs(str(study))))
    proc = reproduce(str(study), '--report-only', '--results-dir', str(results))
    assert proc.returncode == 0, proc.stderr
    page = (results / 'hand' / 'README.md').read_text()
    # a = 1, 2, 3 and b = 3, 4, 5: difference 2, se = sqrt(2/3), ν = 4, t_{0.975, 4} = 2.776445
    # (printed tables), half width 2.26696 (one decimal: two significant digits of it),
    # p = 0.0705; MDE = (2.776445 + 0.940965) · se = 3.035; the interval holds 0 and the
    # margin 1: inconclusive
    lines = page.splitlines()
    assert lines[2:5] == ['> B beats A.', '', '— a hand-made study']
    assert lines[6:10] == [
        '- **Declared outcome:** `test/accuracy/top1`, b − a: b greater than a, smallest '
        'effect of interest 1.',
        '- **Verdict: inconclusive** (the interval holds both 0 and the margin; the effect it '
        'could have detected: 3.0).',
        '- **Effect:** +2.0, 95% CI [-0.3, 4.3] (Welch; 3 and 3 seeds; p = 0.070); seeds with b '
        'above / below a: 3 / 0.',
        '- **Minimum detectable effect:** 3.0 (80% power, two-sided α = 0.05, the observed seed '
        'SDs); seeds per variant to detect 1: ' + lines[9].rsplit(': ', 1)[1]
    ]
    assert 'Inconclusive: b - a = +2.0, CI [-0.3, 4.3], p = 0.070, n = 3, mean 2.0 ± 1.0' in page
    assert table_row(
        page, ['test/accuracy/top1']) == ['test/accuracy/top1', '2.0 ± 1.0 (3)', '4.0 ± 1.0 (3)']
    # the primary comparison is not among the secondary ones; the other one gets q = p (m = 1)
    row = table_row(page, ['b − a', 'train/time_per_iter_s'])
    assert row[2:4] == ['0', '[0, 0]'] and row[5] == '–'
    assert not [line for line in lines if line.startswith('| b − a | test/accuracy/top1')]
    assert table_row(page, ['test/accuracy/top1', '1, 2, 3'])[2] == '3, 4, 5'
    assert table_row(page, ['b/seed2', 'done']) == ['b/seed2', 'done', '12.0 s', '12.0 s']
    assert 'python tools/train.py x.py --cfg-options randomness.seed=2' in page
    assert table_row(page, ['b', f'`{DEMO}`', '`x=1`', 'a'])[4] == '0, 1, 2'
    for figure in ('train_loss.png', 'noise_robustness.png'):
        assert (results / 'hand' / figure).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert sorted(p.name for p in (results / 'hand').glob('*.png')) == [
        'noise_robustness.png', 'train_loss.png'
    ]
    index = (results / 'README.md').read_text()
    assert ('| [hand](hand/README.md) | a hand-made study | inconclusive | '
            '`test/accuracy/top1` b − a: +2.0 [-0.3, 4.3] | 3.0 | 6/6 |') in index

    # same inputs, same bytes; a stale figure is removed
    (results / 'hand' / 'old.png').write_bytes(b'x')
    written = {p.name: p.read_bytes() for p in (results / 'hand').iterdir() if p.name != 'old.png'}
    assert reproduce(str(study), '--report-only', '--results-dir', str(results)).returncode == 0
    assert {p.name: p.read_bytes() for p in (results / 'hand').iterdir()} == written

    # prose that claims another category than the runner's is refused, before any writing
    study.write_text(study.read_text().replace("'Inconclusive: b", "'Held: b"))
    proc = reproduce(str(study), '--report-only', '--results-dir', str(results))
    assert proc.returncode != 0
    assert ("the verdict text says 'Held', but the declared outcome gives the category "
            "'inconclusive'") in proc.stderr
    assert {p.name: p.read_bytes() for p in (results / 'hand').iterdir()} == written

    # without a verdict: not yet judged; a placeholder without a value: an error naming it
    study.write_text(study.read_text().replace('verdict = (', 'verdict = None and ('))
    assert reproduce(str(study), '--report-only', '--results-dir', str(results)).returncode == 0
    assert '## Verdict\n\nnot yet judged\n' in (results / 'hand' / 'README.md').read_text()
    study.write_text(study.read_text().replace('verdict = None and (',
                                               'verdict = (').replace('{n[b][test/accuracy/top1]}',
                                                                      '{n[c][test/accuracy/top1]}'))
    proc = reproduce(str(study), '--report-only', '--results-dir', str(results))
    assert proc.returncode != 0 and 'verdict refers to {n[c][test/accuracy/top1]}' in proc.stderr


# ---------------------------------------------------------------------------- end to end
PAUSE_HOOK = '''
import os
import time

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class PauseOnceHook(Hook):
    """Counts training processes; the ``pause_at``-th one sleeps after its first epoch's
    checkpoint (this hook runs after CheckpointHook) until it is killed."""
    priority = 'LOWEST'

    def __init__(self, counter, pause_at, marker, seconds=300):
        self.counter, self.pause_at, self.marker, self.seconds = counter, pause_at, marker, seconds

    def before_train(self, runner):
        with open(self.counter, 'a') as f:
            f.write('x')
        with open(self.counter) as f:
            self.number = len(f.read())

    def after_train_epoch(self, runner):
        if self.number == self.pause_at and runner.epoch == 0:
            with open(self.marker, 'w') as f:
                f.write(str(os.getpid()))
            time.sleep(self.seconds)
'''


def snapshot(folder):
    """``{relative path: (size, mtime_ns)}`` of every file under ``folder``."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = osp.join(root, name)
            stat = os.stat(path)
            out[osp.relpath(path, folder)] = (stat.st_size, stat.st_mtime_ns)
    return out


def write_study(tmp_path, data_root):
    hooks = tmp_path / 'hooks'
    hooks.mkdir()
    (hooks / 'pause_once_hook.py').write_text(PAUSE_HOOK)
    plain = tmp_path / 'plain_config.py'
    plain.write_text(f'''
_base_ = [{osp.join(REPO, DEMO)!r}]
model = dict(backbone=dict(adaptor=None))
custom_imports = dict(imports=['pause_once_hook'], allow_failed_imports=False)
custom_hooks = [
    dict(type='mmstiff.StiffnessHook', interval=50),
    dict(type='mmstiff.FrequencyHook', interval=100),
    dict(type='PauseOnceHook', counter={str(tmp_path / 'trainings')!r}, pause_at=2,
         marker={str(tmp_path / 'paused')!r}),
]
''')
    options = [
        f'{loader}.{key}' for loader in LOADERS
        for key in (f'dataset.data_root={data_root}', 'num_workers=0', 'persistent_workers=False')
    ]
    options += [
        'train_dataloader.batch_size=40', 'val_dataloader.batch_size=20',
        'test_dataloader.batch_size=20', 'train_cfg.max_epochs=2', 'train_cfg.val_interval=1',
        'default_hooks.logger.interval=1', 'custom_hooks.0.interval=1', 'custom_hooks.1.interval=1'
    ]
    study = tmp_path / 'tiny_study.py'
    study.write_text(f'''
name = 'tiny_study'
claim = dict(quote='Step sizes from the next state\\nhelp.', source='a test, §1',
             tested='2 iterations of tiny data')
seeds = [0, 1]
analysis_args = dict(tns=['--num-batches', '1'], spectrum=['--num-batches', '1'])
cfg_options = {options!r}
runs = [
    dict(label='plain', config={str(plain)!r}, baseline=True, analysis=['tns']),
    dict(label='stepnet', config={DEMO!r}, analysis=['spectrum']),
]
verdict = ('stepnet - plain = {{diff[stepnet][test/accuracy/top1]}} points, '
           'CI {{ci[stepnet][test/accuracy/top1]}}')
''')
    return str(study), {'PYTHONPATH': str(hooks)}


def start_and_kill_at_pause(args, env, tmp_path, timeout=900):
    """Start the runner in its own process group; SIGKILL the group once the marker exists."""
    log = open(tmp_path / 'first_invocation.log', 'w')
    full_env = child_env(env)
    proc = subprocess.Popen(
        [sys.executable, osp.join(REPO, 'tools', 'reproduce.py'), *args], cwd=REPO, env=full_env,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not (tmp_path / 'paused').exists():
            if proc.poll() is not None:
                raise AssertionError('the runner ended before the pause:\n' +
                                     (tmp_path / 'first_invocation.log').read_text()[-4000:])
            assert time.monotonic() < deadline, 'no training paused in time'
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    return (tmp_path / 'first_invocation.log').read_text()


def read_json(path):
    with open(path) as f:
        return json.load(f)


def table_row(page, first_cells):
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if cells[:len(first_cells)] == first_cells:
            return cells
    raise AssertionError(f'no table row starting with {first_cells}')


@pytest.mark.slow
def test_study_interrupted_resumed_and_reported(tiny_data, tmp_path):
    study, env = write_study(tmp_path, tiny_data('mnist'))
    work, results = tmp_path / 'work', tmp_path / 'results'
    args = [study, '--work-dir', str(work), '--results-dir', str(results)]
    runs = work / 'tiny_study'

    # 1. The second run's training is killed (with the runner) after its first checkpoint.
    out = start_and_kill_at_pause(args, env, tmp_path)
    assert '[1/4] plain/seed0: done in' in out and 'ETA' in out
    state = json.loads((runs / 'state.json').read_text())
    assert state['runs']['plain/seed0']['status'] == 'done'
    interrupted = state['runs']['plain/seed1']
    assert interrupted['status'] == 'running'
    assert [(s['name'], s['status']) for s in interrupted['stages']] == [('train', 'running')]
    assert interrupted['stages'][0]['attempts'][0]['returncode'] is None
    assert (runs / 'plain/seed1/epoch_1.pth').is_file()
    assert not (runs / 'plain/seed1/epoch_2.pth').exists()
    assert not (runs / 'stepnet').exists()
    finished = snapshot(runs / 'plain/seed0')
    assert 'metrics.json' in finished and 'analysis/tns/tns.json' in finished

    # 2. Again, two runs at a time, every GPU hidden (`env CUDA_VISIBLE_DEVICES= python ...`):
    # the finished run is skipped, the interrupted one resumes.
    proc = reproduce(*args, '--jobs', '2', '--device', 'cpu', env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'tiny_study: 4 runs, 1 finished, 3 to run (2 at a time)' in proc.stdout
    assert 'start plain/seed1 (resuming)' in proc.stdout
    assert 'start plain/seed0' not in proc.stdout
    assert re.search(r'\[4/4\] \S+: done in .*; 0 left, ETA 0 s', proc.stdout), proc.stdout
    assert snapshot(runs / 'plain/seed0') == finished  # not run again
    state = json.loads((runs / 'state.json').read_text())
    assert {
        k: r['status']
        for k, r in state['runs'].items()
    } == dict.fromkeys(['plain/seed0', 'plain/seed1', 'stepnet/seed0', 'stepnet/seed1'], 'done')
    train = state['runs']['plain/seed1']['stages'][0]
    assert [a['returncode'] for a in train['attempts']] == [None, 0]
    assert '--resume' not in train['attempts'][0]['command']
    assert '--resume' in train['attempts'][1]['command']
    assert 'resumed epoch: 1' in (runs / 'plain/seed1/reproduce.log').read_text()
    assert (runs / 'plain/seed1/epoch_2.pth').is_file()

    # 3. runs.json: the numbers of every run, as read from its work dir.
    data = json.loads((results / 'tiny_study/runs.json').read_text())
    assert [(r['key'], r['status']) for r in data['runs']] == [('plain/seed0', 'done'),
                                                               ('plain/seed1', 'done'),
                                                               ('stepnet/seed0', 'done'),
                                                               ('stepnet/seed1', 'done')]
    for run in data['runs']:
        record = run['record']
        metrics = read_json(osp.join(REPO, run['work_dir'], 'metrics.json'))
        assert record['metrics']['test/accuracy/top1'] == metrics['accuracy/top1']
        if run['variant'] == 'plain':
            tns = read_json(osp.join(REPO, run['work_dir'], 'analysis/tns/tns.json'))
            assert record['metrics']['tns/network'] == pytest.approx(tns['network_tns'])
            assert record['profiles']['tns/nsi']['x'] == list(tns['blocks'])
        else:
            spectrum = read_json(osp.join(REPO, run['work_dir'], 'analysis/spectrum/spectrum.json'))
            last = list(spectrum['states'].values())[-1]
            assert record['metrics']['spectrum/hf_ratio/last'] == pytest.approx(last['hf_ratio'])
            assert record['profiles']['spectrum/hf_ratio']['x'][0] == 'input'
        assert record['curves']['train/loss']['x'] == [1, 2]
        # per epoch; plain/seed1 was killed before its first validation, then resumed
        assert record['curves']['val/accuracy/top1']['x'] == ([2] if run['key'] == 'plain/seed1'
                                                              else [1, 2])
        assert record['train_info']['iterations'] == 2
        assert record['train_info']['iters_per_epoch'] == 1
        assert record['metrics']['train/time_per_epoch_s'] > 0
        assert record['profiles']['log/nsi']['x'][:2] == ['layer1.0', 'layer1.1']
        assert run['wall_time_s'] > 0
    assert data['runs'][1]['record']['train_info']['logs'] == 2  # first process + resumed one
    assert 'log/step' in data['runs'][2]['record']['profiles']  # StepNet has step sizes
    assert 'log/step' not in data['runs'][0]['record']['profiles']  # Δ ≡ 1 is not logged

    # 4. The page: claim, verdict and the Welch interval computed from runs.json.
    page = (results / 'tiny_study/README.md').read_text()
    assert '> Step sizes from the next state\n> help.\n\n— a test, §1' in page
    accuracy = {
        label: [
            r['record']['metrics']['test/accuracy/top1'] for r in data['runs']
            if r['variant'] == label
        ]
        for label in ('plain', 'stepnet')
    }
    diff = mean(accuracy['stepnet']) - mean(accuracy['plain'])
    verdict = re.search(r'## Verdict\n\nstepnet - plain = (\S+) points, CI (.+)', page)
    assert verdict, page
    row = table_row(page, ['stepnet − plain', 'test/accuracy/top1'])
    var = [sum((v - mean(vs))**2 for v in vs) for vs in (accuracy['plain'], accuracy['stepnet'])]
    se = math.sqrt(var[0] / 2 + var[1] / 2)  # n = 2 per group: s² = sum of squares / 1
    if se > 0:
        df = se**4 / ((var[0] / 2)**2 + (var[1] / 2)**2)
        low, high = (float(x) for x in row[3].strip('[]').split(','))
        half = stats.t.ppf(0.975, df) * se
        # printed with two significant digits of the half width
        digits = 10.0**(math.floor(math.log10(half)) - 1)
        assert low == pytest.approx(diff - half, abs=digits)
        assert high == pytest.approx(diff + half, abs=digits)
        assert float(verdict.group(1)) == pytest.approx(diff, abs=digits)
        assert verdict.group(2) == row[3]
    assert table_row(page, ['plain/seed1', 'done'])[3].endswith('(2 attempts: 1 interrupted)')
    assert table_row(page, ['stepnet/seed0', 'done'])[5] == '–'  # no tns stage
    assert 'python tools/train.py' in page and '--resume --cfg-options' in page
    assert 'env CUDA_VISIBLE_DEVICES= python tools/train.py' in page
    figures = sorted(p.name for p in (results / 'tiny_study').glob('*.png'))
    assert {
        'train_loss.png', 'val_accuracy_top1.png', 'nsi_per_block.png', 'step_size_per_block.png'
    } <= set(figures)
    for name in figures:
        assert (results / 'tiny_study' / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
        assert f']({name})' in page
    index = (results / 'README.md').read_text()
    assert ('| [tiny_study](tiny_study/README.md) | a test, §1 | no declared outcome | – | '
            '– | 4/4 |') in index

    # 5. --report-only: nothing runs, the same bytes are written again.
    committed = {p.name: p.read_bytes() for p in (results / 'tiny_study').iterdir()}
    committed_index = (results / 'README.md').read_bytes()
    before = snapshot(runs)
    proc = reproduce(*args, '--report-only')
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in (results / 'tiny_study').iterdir()} == committed
    assert (results / 'README.md').read_bytes() == committed_index
    assert snapshot(runs) == before

    # 6. A third run of the study finds nothing to do.
    proc = reproduce(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert '4 runs, 4 finished, 0 to run' in proc.stdout
    assert 'start ' not in proc.stdout
    assert {
        k: v
        for k, v in snapshot(runs).items() if k != 'state.json'
    } == {
        k: v
        for k, v in before.items() if k != 'state.json'
    }
    assert (results / 'tiny_study/README.md').read_bytes() == committed['README.md']


def test_ties_of_the_primary_outcome_are_counted(tmp_path):
    """A seed where the variant equals its baseline is neither above nor below: said so."""
    from mmstiff.studies import load_study
    from mmstiff.studies.report import render_page
    study = tmp_path / 'hand.py'
    study.write_text(HAND_STUDY)
    data = handwritten_runs(str(study))
    tied = next(r for r in data['runs'] if r['key'] == 'b/seed0')
    tied['record']['metrics']['test/accuracy/top1'] = 1.0  # a/seed0 is 1.0
    page = render_page(data, load_study(str(study)), figures={}, strict=False)
    assert 'seeds with b above / below a: 2 / 0 (1 equal).' in page
    data['runs'][3]['record']['metrics']['test/accuracy/top1'] = 3.5  # no tie: no count of ties
    assert 'above / below a: 3 / 0.' in render_page(data, load_study(str(study)), figures={},
                                                    strict=False)
