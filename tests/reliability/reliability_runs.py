"""Helpers of the reliability tests: configs of a narrow CIFAR ResNet-18, checkpoint reading.

``write_config`` writes a config on top of ``tests/data/configs/cifar10_resnet18_tiny.py``
(no random augmentation, constant learning rate, a checkpoint every 2 iterations) with the
tiny CIFAR-10 files as data and ``base_channels=8``, plus any fields given;
``faults.py`` of this folder is importable from it (``custom_imports=dict(imports=['faults'])``).
"""
import os
import os.path as osp
import shutil

import torch

from mmstiff.utils.checkpoint import load_checkpoint_file

HERE = osp.dirname(osp.abspath(__file__))
REPO = osp.dirname(osp.dirname(HERE))
BASE_CONFIG = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
#: the environment the tools run in: this folder importable, for ``faults``.
FAULT_ENV = {'PYTHONPATH': os.pathsep.join(p for p in (HERE, os.environ.get('PYTHONPATH')) if p)}
FAULTS = dict(imports=['faults'], allow_failed_imports=False)


def write_config(path, data_root, **fields):
    """Write a training config to ``path``: the tiny CIFAR config, narrowed, plus ``fields``."""
    loader = dict(dataset=dict(data_root=data_root))
    settings = dict(
        model=dict(backbone=dict(base_channels=8, stem_channels=8), head=dict(in_channels=64)),
        train_dataloader=loader, val_dataloader=loader, test_dataloader=loader)
    settings.update(fields)
    lines = [f'_base_ = [{BASE_CONFIG!r}]'
             ] + [f'{key} = {value!r}' for key, value in settings.items()]
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return str(path)


def load(path):
    """A checkpoint the tools wrote, loaded weights-only as the tools load it."""
    return load_checkpoint_file(str(path))


def parameters(path):
    """The learnable tensors of a checkpoint (BatchNorm running statistics left out)."""
    state = load(path)['state_dict']
    return {
        k: v
        for k, v in state.items()
        if not k.endswith(('running_mean', 'running_var', 'num_batches_tracked'))
    }


def assert_same_weights(path_a, path_b):
    a, b = load(path_a), load(path_b)
    assert a['state_dict'].keys() == b['state_dict'].keys()
    for key, value in a['state_dict'].items():
        torch.testing.assert_close(b['state_dict'][key], value, rtol=1e-5, atol=1e-6, msg=key)


def copy_run(work_dir, to):
    """A copy of a work dir whose ``last_checkpoint`` names the copied checkpoint."""
    shutil.copytree(work_dir, to)
    marker = to / 'last_checkpoint'
    marker.write_text(str(to / osp.basename(marker.read_text().strip())))
    return to
