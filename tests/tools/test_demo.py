"""tools/demo.py end to end on tiny Fashion-MNIST-format files: train, test, diagnostics, plots."""
import json

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
