"""tools/demo.py end to end on tiny Fashion-MNIST-format files: train, test, diagnostics, plots."""
import json
import os.path as osp

import pytest


@pytest.mark.slow
def test_demo_trains_evaluates_and_plots(tiny_data, run_tool, tmp_path):
    work = tmp_path / 'demo'
    proc = run_tool('tools/demo.py', '--data-root', tiny_data('mnist'), '--work-dir', str(work),
                    '--cfg-options', 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
                    'custom_hooks.0.interval=1', 'custom_hooks.1.interval=1')
    assert '== mmstiff demo ==' in proc.stdout
    metrics = json.loads((work / 'test_metrics.json').read_text())
    assert f"accuracy/top1: {metrics['accuracy/top1']:.2f}" in proc.stdout
    # the diagnostics were logged while training and plotted afterwards
    for folder, figure in [('training', 'stiffness_nsi.png'), ('training', 'freq_hf_ratio.png'),
                           ('tns', 'nsi_heatmap.png'), ('spectrum', 'dlogamp_profiles.png'),
                           ('freq_noise', 'freq_noise.png')]:
        png = work / 'plots' / folder / figure
        assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n', png
    tns = json.loads((work / 'plots' / 'tns' / 'tns.json').read_text())
    assert set(tns['blocks']) == {f'layer{i}.{j}' for i in (1, 2, 3) for j in range(3)}


@pytest.mark.slow
def test_quick_first_run_from_another_folder_writes_its_own_data(repo_root, tmp_path):
    """``python -m mmstiff.demo`` from a folder outside the checkout: the tiny dataset is
    written there, the config and the tools come from beside the imported package."""
    import os
    import subprocess
    import sys

    from mmstiff.testing import write_mnist
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(
        filter(None, [repo_root, os.environ.get('PYTHONPATH')])))
    proc = subprocess.run([sys.executable, '-m', 'mmstiff.demo', '--work-dir', 'first'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    work = tmp_path / 'first'
    # the data is the seeded writer's, byte for byte
    expected = write_mnist(str(tmp_path / 'expected'), num_train=256, num_test=128)
    for name in os.listdir(expected):
        assert (work / 'data' / name).read_bytes() == (tmp_path / 'expected' / name).read_bytes()
    metrics = json.loads((work / 'test_metrics.json').read_text())
    assert f"accuracy/top1: {metrics['accuracy/top1']:.2f}" in proc.stdout
    assert 'quick run:   256 training images' in proc.stdout
    curves = json.loads((work / 'plots' / 'training' / 'curves.json').read_text())
    # 256 images / batch 32 = 8 iterations, diagnostics every 2
    assert curves['series']['stiffness/nsi']['layer1.0']['steps'] == [2, 4, 6, 8]
    assert curves['series']['val']['accuracy/top1']['values'] == [metrics['accuracy/top1']]
    assert (work / 'plots' / 'tns' / 'nsi_heatmap.png').read_bytes()[:4] == b'\x89PNG'
    assert not (work / 'plots' / 'spectrum').exists()  # printed, to run by hand
    assert proc.stdout.count('skipped:     ') == 2
    # it ends with the dashboard the diagnostics hook drew into the work dir
    from mmstiff.visualization.dashboard import read_panels
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f'dashboard:   {osp.join("first", "dashboard.png")}'), last
    panels = read_panels(str(work / 'dashboard.png'))
    assert 'Validation metrics' in panels and any(p.startswith('Adjoint gain') for p in panels)
