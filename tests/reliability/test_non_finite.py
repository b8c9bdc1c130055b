"""A checkpoint with NaN or inf weights or statistics is refused before any evaluation.

A model with NaN weights evaluates to numbers that look like results (accuracy 0.0, exit 0);
tools/test.py and the analysis tools now stop naming the non-finite entries, unless
``--allow-non-finite`` asks to go on.
"""
import pytest
import torch
import torch.nn as nn
from reliability_runs import load

from mmstiff.utils.checkpoint import (NonFiniteCheckpointError, check_finite, load_checkpoint_into,
                                      non_finite_entries)

USER_ENV = {'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '0'}


def small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def test_non_finite_entries_counts_nan_and_inf_in_order():
    state = small_model().state_dict()
    state['0.weight'][0, :2] = float('nan')
    state['1.running_var'][3] = float('inf')
    state['2.bias'][1] = -float('inf')
    assert non_finite_entries(state) == [('0.weight', 2), ('1.running_var', 1), ('2.bias', 1)]
    # integer buffers (num_batches_tracked) are never non-finite
    assert non_finite_entries(small_model().state_dict()) == []


def test_non_finite_checkpoint_is_refused_before_loading(tmp_path):
    state = small_model().state_dict()
    state['1.running_var'].fill_(float('inf'))
    path = str(tmp_path / 'bad.pth')
    torch.save({'state_dict': state}, path)
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(
            NonFiniteCheckpointError,
            match=r"'.*bad.pth' holds non-finite \(NaN or inf\) values in 1 "
            r'parameter\(s\) or statistic\(s\): 1.running_var \(4 value\(s\)\)'
            r'.*pass --allow-non-finite'):
        load_checkpoint_into(model, path)
    for key, value in model.state_dict().items():  # nothing was loaded
        assert torch.equal(value, before[key])
    load_checkpoint_into(model, path, allow_non_finite=True)
    assert torch.isinf(model[1].running_var).all()
    # a finite checkpoint passes
    assert check_finite({'state_dict': small_model().state_dict()}, 'ok.pth') == []


def nan_checkpoint(source, path):
    """``source`` with the first convolution's weights NaN."""
    checkpoint = load(source)
    checkpoint['state_dict']['backbone.conv1.weight'].fill_(float('nan'))
    torch.save(checkpoint, path)
    return str(path)


@pytest.mark.slow
def test_test_tool_refuses_a_nan_checkpoint(trained_run, run_tool, tmp_path):
    config, work = trained_run
    bad = nan_checkpoint(work / 'iter_4.pth', tmp_path / 'nan.pth')
    proc = run_tool('tools/test.py', config, bad, '--work-dir', str(tmp_path / 'a'), check=False,
                    env=USER_ENV)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert (f'error: checkpoint {bad!r} holds non-finite (NaN or inf) values in 1 parameter(s) '
            'or statistic(s): backbone.conv1.weight') in proc.stderr
    assert 'accuracy/top1' not in out and 'Traceback' not in out
    proc = run_tool('tools/test.py', config, bad, '--work-dir', str(tmp_path / 'b'),
                    '--allow-non-finite', env=USER_ENV)
    out = proc.stdout + proc.stderr
    assert '(--allow-non-finite: used anyway)' in out and 'accuracy/top1' in out


@pytest.mark.slow
def test_analysis_tool_refuses_a_nan_checkpoint(trained_run, run_tool, tmp_path):
    config, work = trained_run
    bad = nan_checkpoint(work / 'iter_4.pth', tmp_path / 'nan.pth')
    proc = run_tool('tools/analysis/tns.py', config, bad, '--num-batches', '1', '--out-dir',
                    str(tmp_path / 'tns'), check=False, env=USER_ENV)
    assert proc.returncode == 1
    assert f'error: checkpoint {bad!r} holds non-finite' in proc.stderr
    assert 'backbone.conv1.weight' in proc.stderr
    assert not (tmp_path / 'tns' / 'tns.json').exists()
