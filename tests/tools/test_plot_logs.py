"""tools/analysis/plot_logs.py on logs in MMEngine's format written here: the training curves
and the diagnostics of one run in one call, wrong keys, and a run that logged no diagnostics."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmstiff.analysis.quantities import BY_GROUP

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = '''
default_scope = 'mmpretrain'
custom_hooks = [
    dict(type='mmstiff.DivergenceHook'),
    dict(type='mmstiff.StiffnessHook', interval=50),
    dict(type='mmstiff.FrequencyHook', interval=100),
]
'''


def write_run(folder, diagnostics=True, iters=8, epochs=2):
    """A run folder as MMEngine writes it for an epoch-based run of ``epochs`` x ``iters/epochs``
    iterations, logging every 2 iterations; returns the rows written."""
    vis = folder / 'vis_data'
    vis.mkdir(parents=True)
    (vis / 'config.py').write_text(CONFIG)
    rows, per_epoch = [], iters // epochs
    for it in range(2, iters + 1, 2):
        epoch = (it - 1) // per_epoch + 1
        rows.append(
            dict(lr=0.1 / it, data_time=0.01, loss=2.0 / it, loss_aux=0.5 / it, time=0.2,
                 epoch=epoch, iter=it, step=it))
        if diagnostics:
            rows.append({
                'stiffness/nsi/layer1.0': 1.0 + it,
                'stiffness/nsi/layer1.1': 2.0 + it,
                'iter': it,
                'epoch': epoch,
                'step': it
            })
        if it % per_epoch == 0:
            rows.append({
                'accuracy/top1': 10.0 * epoch,
                'data_time': 0.01,
                'time': 0.1,
                'step': epoch
            })
    (vis / 'scalars.json').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return rows


def plot_logs(*args):
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get('PYTHONPATH')])))
    return subprocess.run(
        [sys.executable,
         osp.join(REPO, 'tools', 'analysis', 'plot_logs.py'), *map(str, args)], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_one_call_plots_loss_lr_validation_and_diagnostics(tmp_path):
    rows = write_run(tmp_path / 'run')
    out = tmp_path / 'plots'
    proc = plot_logs(tmp_path / 'run', '--out-dir', out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    curves = json.loads((out / 'curves.json').read_text())
    series = curves['series']
    train = [r for r in rows if 'lr' in r]
    assert series['loss']['loss'] == dict(steps=[r['iter'] for r in train],
                                          values=[r['loss'] for r in train])
    assert series['loss']['loss_aux']['values'] == [r['loss_aux'] for r in train]
    assert series['lr']['lr']['values'] == [r['lr'] for r in train]
    assert series['val'] == {'accuracy/top1': dict(steps=[1, 2], values=[10.0, 20.0])}
    assert series['stiffness/nsi']['layer1.1'] == dict(steps=[2, 4, 6, 8],
                                                       values=[4.0, 6.0, 8.0, 10.0])
    assert sorted(curves['figures']) == ['loss.png', 'lr.png', 'stiffness_nsi.png', 'val.png']
    for name in curves['figures']:
        assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # and the whole run in one figure, its panels named in its metadata
    from mmstiff.visualization.dashboard import read_panels
    assert curves['dashboard'] == ['dashboard.png']
    assert f'dashboard: {out / "dashboard.png"}' in proc.stdout
    panels = read_panels(str(out / 'dashboard.png'))
    assert panels[:2] == ['Training loss and learning rate', 'Validation metrics']
    assert panels[2] == BY_GROUP['stiffness/nsi'].title and len(panels) == 3
    assert curves['note'] is None and 'time' not in json.dumps(series)


@pytest.mark.slow
def test_keys_select_and_a_wrong_key_lists_what_the_log_has(tmp_path):
    write_run(tmp_path / 'run')
    proc = plot_logs(tmp_path / 'run', '--out-dir', tmp_path / 'a', '--keys', 'loss',
                     'stiffness/nsi/layer1.0')
    assert proc.returncode == 0, proc.stderr[-3000:]
    series = json.loads((tmp_path / 'a' / 'curves.json').read_text())['series']
    assert {
        g: sorted(c)
        for g, c in series.items()
    } == {
        'loss': ['loss'],
        'stiffness/nsi': ['layer1.0']
    }

    proc = plot_logs(tmp_path / 'run', '--out-dir', tmp_path / 'b', '--keys', 'stifness/*', 'loss')
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: --keys stifness/* matches no scalar of the log; it has: accuracy/top1, loss, '
        'loss_aux, lr, stiffness/nsi/* (2)')
    assert not (tmp_path / 'b').exists()


@pytest.mark.slow
def test_a_run_without_diagnostics_gets_its_curves_and_the_reason(tmp_path):
    write_run(tmp_path / 'run', diagnostics=False, iters=8)
    proc = plot_logs(tmp_path / 'run', '--out-dir', tmp_path / 'plots')
    assert proc.returncode == 0, proc.stderr[-3000:]
    note = ('the run has mmstiff.StiffnessHook (interval=50), mmstiff.FrequencyHook '
            '(interval=100) but logged no diagnostics: it ended at iteration 8, before their '
            'first recorded iteration; for a short run lower the interval, e.g. --cfg-options '
            'custom_hooks.1.interval=4')
    assert f'note: {note}' in proc.stderr.splitlines()
    curves = json.loads((tmp_path / 'plots' / 'curves.json').read_text())
    assert curves['note'] == note
    assert sorted(curves['figures']) == ['loss.png', 'lr.png', 'val.png']

    # without diagnostic hooks in the config, the note says which to add
    (tmp_path / 'run' / 'vis_data' / 'config.py').write_text("default_scope = 'mmpretrain'\n")
    proc = plot_logs(tmp_path / 'run', '--out-dir', tmp_path / 'plots2')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("note: the run logged no diagnostics; train with custom_hooks=[dict(type="
            "'mmstiff.StiffnessHook'), dict(type='mmstiff.FrequencyHook')]") in proc.stderr
