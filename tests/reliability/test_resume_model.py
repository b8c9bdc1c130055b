"""--resume with a checkpoint of another model stops listing the differences, before training.

Before: MMEngine loaded the weights it could and the optimizer failed with a ``ValueError:
loaded state dict contains a parameter group that doesn't match`` traceback.
"""
import pytest
import torch
import torch.nn as nn
from reliability_runs import copy_run

from mmstiff.utils.checkpoint import CheckpointMismatchError, check_resume_checkpoint


def test_resume_check_lists_keys_and_shapes_without_loading(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    other = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 5), nn.Linear(5, 1))
    path = str(tmp_path / 'other.pth')
    torch.save({'state_dict': other.state_dict()}, path)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(CheckpointMismatchError) as info:
        check_resume_checkpoint(model, path)
    message = str(info.value)
    assert message.startswith(f'resume checkpoint {path!r} does not match the model of the '
                              'config: 2 unexpected key(s): 2.weight, 2.bias; 2 error(s): '
                              '1.weight: shape (5, 4) in the checkpoint, (2, 4) in the model')
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    torch.save({'state_dict': model.state_dict()}, path)
    check_resume_checkpoint(model, path)  # the same model: nothing to say


@pytest.mark.slow
def test_resume_with_another_architecture_is_an_error(trained_run, train, tmp_path):
    config, trained = trained_run
    work = copy_run(trained, tmp_path / 'work')
    wide = [
        '--cfg-options', 'model.backbone.base_channels=16', 'model.backbone.stem_channels=16',
        'model.head.in_channels=128'
    ]
    proc = train(config, work, '--resume', *wide, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"error: resume checkpoint '{work / 'iter_4.pth'}' does not match the model of "
            'the config') in proc.stderr
    assert 'backbone.conv1.weight: shape (8, 3, 3, 3) in the checkpoint, (16, 3, 3, 3)' \
        in proc.stderr
    assert 'Traceback' not in proc.stderr
