"""A checkpoint of another model is an error listing the keys, not numbers of a random model.

MMEngine loads ``load_from`` with ``strict=False``: tools/test.py and the analysis tools used
to report the metrics of a partly random model with exit status 0. Now a missing, unexpected
or differently shaped parameter fails before any evaluation, naming the keys, unless
``--allow-partial-load`` asks for it.
"""
import pytest
import torch
import torch.nn as nn
from reliability_runs import load

from mmstiff.utils.checkpoint import (CheckpointMismatchError, StateDictMismatch, load_weights,
                                      state_dict_of)


def small_model(out=2):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, out))


def other_checkpoint():
    """The state of a model with a wider last layer, one key dropped and one added."""
    torch.manual_seed(1)
    state = small_model(out=5).state_dict()
    del state['0.bias']
    del state['1.num_batches_tracked']  # never counted as missing, as in MMEngine
    state['extra.weight'] = torch.ones(1)
    return {'state_dict': state}


def test_strict_load_lists_missing_unexpected_and_shapes():
    model = small_model()
    with pytest.raises(CheckpointMismatchError) as info:
        load_weights(model, other_checkpoint(), 'other.pth')
    message = str(info.value)
    assert "checkpoint 'other.pth' does not match the model" in message
    assert '1 missing key(s): 0.bias;' in message
    assert '1 unexpected key(s): extra.weight;' in message
    assert '2 error(s): size mismatch for 2.weight' in message and 'size mismatch for 2.bias' \
        in message
    assert 'num_batches_tracked' not in message and '--allow-partial-load' in message


def test_partial_load_loads_what_matches_and_reports_the_rest():
    model, checkpoint = small_model(), other_checkpoint()
    before = model[2].weight.detach().clone()
    mismatch = load_weights(model, checkpoint, 'other.pth', strict=False)
    assert mismatch.missing == ('0.bias', ) and mismatch.unexpected == ('extra.weight', )
    assert len(mismatch.errors) == 2
    torch.testing.assert_close(model[0].weight, checkpoint['state_dict']['0.weight'])
    torch.testing.assert_close(model[1].running_var, checkpoint['state_dict']['1.running_var'])
    torch.testing.assert_close(model[2].weight, before)  # the mismatched layer is untouched


def test_matching_checkpoint_loads_with_ddp_prefix_and_nothing_reported():
    source, model = small_model(), small_model(out=2)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    state = {f'module.{k}': v for k, v in source.state_dict().items()}
    assert not load_weights(model, {'state_dict': state}, 'ddp.pth')
    for (name, a), b in zip(source.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(b, a, msg=name)
    assert list(state_dict_of({'a': 1})) == ['a']  # a bare state dict is its own parameters


def test_describe_lists_at_most_ten_of_each_kind():
    mismatch = StateDictMismatch(missing=[f'k{i}' for i in range(13)])
    assert mismatch.describe() == ('13 missing key(s): k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, '
                                   '... (3 more)')
    assert not StateDictMismatch() and StateDictMismatch(unexpected=['x'])


def edited_checkpoint(source, path):
    """``source`` with ``head.fc.weight`` dropped and ``neck.extra`` added."""
    checkpoint = load(source)
    del checkpoint['state_dict']['head.fc.weight']
    checkpoint['state_dict']['neck.extra'] = torch.zeros(3)
    torch.save(checkpoint, path)
    return str(path)


@pytest.mark.slow
def test_test_tool_refuses_another_models_checkpoint(trained_run, run_tool, tmp_path):
    config, work = trained_run
    edited = edited_checkpoint(work / 'iter_4.pth', tmp_path / 'edited.pth')
    proc = run_tool('tools/test.py', config, edited, '--work-dir', str(tmp_path / 'a'), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f'error: checkpoint {edited!r} does not match the model of the config' in proc.stderr
    assert 'missing key(s): head.fc.weight' in proc.stderr
    assert 'unexpected key(s): neck.extra' in proc.stderr
    assert 'accuracy/top1' not in out and 'Traceback' not in out

    # a wider model: every shape differs
    wide = [
        '--cfg-options', 'model.backbone.base_channels=16', 'model.backbone.stem_channels=16',
        'model.head.in_channels=128'
    ]
    proc = run_tool('tools/test.py', config, str(work / 'iter_4.pth'), '--work-dir',
                    str(tmp_path / 'b'), *wide, check=False)
    assert proc.returncode != 0 and 'size mismatch for backbone.conv1.weight' in proc.stderr

    proc = run_tool('tools/test.py', config, edited, '--work-dir', str(tmp_path / 'c'),
                    '--allow-partial-load')
    out = proc.stdout + proc.stderr
    assert 'loaded partially (--allow-partial-load)' in out and 'head.fc.weight' in out
    assert 'accuracy/top1' in out


@pytest.mark.slow
def test_analysis_tool_refuses_another_models_checkpoint(trained_run, run_tool, tmp_path):
    config, work = trained_run
    edited = edited_checkpoint(work / 'iter_4.pth', tmp_path / 'edited.pth')
    proc = run_tool('tools/analysis/tns.py', config, edited, '--num-batches', '1', '--out-dir',
                    str(tmp_path / 'tns'), check=False)
    assert proc.returncode != 0
    assert f'error: checkpoint {edited!r} does not match' in proc.stderr
    assert 'head.fc.weight' in proc.stderr and 'neck.extra' in proc.stderr
    assert not (tmp_path / 'tns' / 'tns.json').exists()
