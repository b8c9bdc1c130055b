"""An analysis tool whose split yields no batch stops naming it, before any work.

Before: ``loss_landscape.py`` ended in ``ZeroDivisionError``, ``hessian.py`` and
``feature_variance.py`` exited 0 with nothing measured.
"""
import pytest

USER_ENV = {'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '0'}
#: a batch larger than the tiny test split (10 images), the last partial batch dropped
NO_BATCH = [
    '--split', 'test', '--batch-size', '64', '--cfg-options', 'test_dataloader.drop_last=True'
]


@pytest.mark.slow
@pytest.mark.parametrize('tool', ['loss_landscape', 'hessian', 'tns'])
def test_empty_split_is_an_error_naming_it(trained_run, run_tool, tmp_path, tool):
    config, work = trained_run
    out_dir = tmp_path / tool
    proc = run_tool(f'tools/analysis/{tool}.py', config, str(work / 'iter_4.pth'), '--out-dir',
                    str(out_dir), *NO_BATCH, check=False, env=USER_ENV)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ('error: --split test: test_dataloader yields no batch (its dataset has 10 samples; '
            'batch_size=64); nothing to analyse') in proc.stderr
    assert 'Traceback' not in proc.stderr
    assert not any(p.suffix in ('.json', '.png') for p in out_dir.rglob('*'))
