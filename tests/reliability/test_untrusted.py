"""Untrusted files run no code: crafted checkpoints and CIFAR batches are refused by name.

Each crafted file holds a payload that, if unpickled in full, creates a marker file (through
``open`` or ``os.system``, or ``getattr`` to reach a method that writes). The tools and the
dataset must refuse the file naming it and what it refers to, and the marker must not exist
afterwards. A checkpoint the tools wrote themselves loads without any flag.
"""
import os
import pickle

import numpy as np
import pytest
import torch
from reliability_runs import load

from mmstiff.datasets import CIFAR10
from mmstiff.testing import write_cifar
from mmstiff.utils.checkpoint import (CheckpointError, UntrustedCheckpointError, config_code,
                                      load_checkpoint_file)


class OpenPayload:
    """Unpickles to ``open(path, 'w')``: creates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, 'w'))


class SystemPayload:
    """Unpickles to ``os.system('touch path')``: creates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.system, (f'touch {self.path}', ))


class _Attribute:
    """Pickles as ``getattr(obj, name)``; callable, as pickle wants a reduce function to be."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name

    def __call__(self, *args):
        return getattr(self.obj, self.name)(*args)

    def __reduce__(self):
        return (getattr, (self.obj, self.name))


class GetattrPayload:
    """Unpickles to ``getattr(np.ndarray, 'tofile')(array, path)``: writes ``path``, through
    the ``getattr`` that MMEngine checkpoints need for ``HistoryBuffer``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (_Attribute(np.ndarray, 'tofile'), (np.zeros(1), self.path))


PAYLOADS = {
    'open': (OpenPayload, 'io.open'),
    'system': (SystemPayload, 'system'),
    'getattr': (GetattrPayload, 'getattr')
}


def crafted_checkpoint(source, path, payload):
    """A copy of the real checkpoint ``source`` with ``payload`` in its meta, at ``path``."""
    checkpoint = load(source)
    checkpoint['meta']['note'] = payload
    torch.save(checkpoint, path)
    return str(path)


@pytest.mark.parametrize('kind', sorted(PAYLOADS))
def test_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path, kind):
    payload, named = PAYLOADS[kind]
    marker = tmp_path / 'marker'
    path = str(tmp_path / 'crafted.pth')
    torch.save({'state_dict': {'w': torch.zeros(2)}, 'meta': {'x': payload(marker)}}, path)
    with pytest.raises(UntrustedCheckpointError) as info:
        load_checkpoint_file(path)
    message = str(info.value)
    assert path in message and named in message and '--trust-checkpoint' in message
    assert not marker.exists()


def test_a_file_that_is_no_checkpoint_is_not_called_untrusted(tmp_path):
    path = tmp_path / 'notes.pth'
    path.write_text('not a checkpoint')
    with pytest.raises(CheckpointError, match=f"checkpoint '{path}' could not be read") as info:
        load_checkpoint_file(str(path))
    assert not isinstance(info.value, UntrustedCheckpointError)
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_checkpoint_file(str(tmp_path / 'missing.pth'))


def test_trusted_checkpoint_unpickles_in_full(tmp_path):
    from fractions import Fraction
    path = str(tmp_path / 'fraction.pth')
    torch.save({'state_dict': {}, 'meta': {'ratio': Fraction(1, 3)}}, path)
    with pytest.raises(UntrustedCheckpointError, match='fractions.Fraction'):
        load_checkpoint_file(path)
    assert load_checkpoint_file(path, trust=True)['meta']['ratio'] == Fraction(1, 3)


def test_code_in_meta_config_is_refused(tmp_path):
    """``Runner.resume`` executes ``meta['config']`` as a Python config."""
    marker = tmp_path / 'marker'
    code = f"import os\nos.system('touch {marker}')\nmodel = dict(type='X')\n"
    path = str(tmp_path / 'config.pth')
    torch.save({'state_dict': {}, 'meta': {'config': code}}, path)
    with pytest.raises(UntrustedCheckpointError, match=r"meta\['config'\] holds Import at line 1"):
        load_checkpoint_file(path)
    assert config_code("model = dict(type='X', depth=-1, mean=[1.0, 2.5], ok=True)\n") is None
    assert config_code('x = open("f", "w")') == 'a call at line 1'
    assert config_code('x = os.environ') == 'Attribute at line 1'
    assert config_code("custom_imports = dict(imports=['m'])").startswith('an assignment')
    assert not marker.exists()


@pytest.mark.slow
def test_real_checkpoint_loads_without_the_flag(trained_run):
    """A checkpoint tools/train.py wrote (HistoryBuffer, numpy scalars) loads weights-only."""
    from mmengine.logging import HistoryBuffer
    _, work = trained_run
    checkpoint = load_checkpoint_file(str(work / 'iter_4.pth'))
    full = load(work / 'iter_4.pth')
    assert checkpoint['meta'] == full['meta']
    buffers = checkpoint['message_hub']['log_scalars']
    assert buffers and all(isinstance(b, HistoryBuffer) for b in buffers.values())
    for key, buffer in buffers.items():
        np.testing.assert_array_equal(buffer.data[0],
                                      full['message_hub']['log_scalars'][key].data[0])
        assert buffer.mean() == full['message_hub']['log_scalars'][key].mean()
    for key, value in full['state_dict'].items():
        torch.testing.assert_close(checkpoint['state_dict'][key], value, rtol=0, atol=0)


@pytest.mark.slow
def test_tools_refuse_a_crafted_checkpoint(trained_run, run_tool, tmp_path):
    config, work = trained_run
    for kind, (payload, named) in sorted(PAYLOADS.items()):
        marker = tmp_path / f'marker_{kind}'
        crafted = crafted_checkpoint(work / 'iter_4.pth', tmp_path / f'{kind}.pth', payload(marker))
        runs = {
            'test': ('tools/test.py', config, crafted, '--work-dir', str(tmp_path / 'test')),
            'train': ('tools/train.py', config, '--resume', crafted, '--work-dir',
                      str(tmp_path / f'train_{kind}'), '--cfg-options', 'train_cfg.max_iters=6'),
            'analysis':
            ('tools/analysis/tns.py', config, crafted, '--num-batches', '1', '--out-dir',
             str(tmp_path / 'tns')),
        }
        if kind != 'system':  # one payload through every tool; the others through test.py
            runs = {'test': runs['test']}
        for tool, args in runs.items():
            proc = run_tool(*args, check=False)
            err = proc.stderr
            assert proc.returncode != 0, (tool, proc.stdout[-2000:])
            assert f'error: checkpoint {crafted!r}' in err and named in err, (tool, err[-3000:])
            assert 'Traceback' not in err, (tool, err[-3000:])
            assert not marker.exists(), (kind, tool)


@pytest.mark.slow
def test_tools_load_their_own_checkpoint_without_the_flag(trained_run, run_tool, tmp_path):
    config, work = trained_run
    proc = run_tool('tools/test.py', config, str(work / 'iter_4.pth'), '--work-dir', str(tmp_path))
    assert 'accuracy/top1' in proc.stdout + proc.stderr
    assert 'unpickling checkpoint' not in proc.stdout + proc.stderr  # no full unpickling


def craft_cifar_batch(root, payload):
    """Replace the tiny CIFAR-10 test batch under ``root`` by one whose ``data`` is ``payload``."""
    path = os.path.join(root, 'cifar-10-batches-py', 'test_batch')
    with open(path, 'wb') as f:
        pickle.dump(
            {
                'batch_label': 'testing batch 1 of 1',
                'labels': [0],
                'data': payload,
                'filenames': ['x.png']
            }, f, protocol=2)
    return path


@pytest.mark.parametrize('kind', ['open', 'system'])
def test_crafted_cifar_batch_is_refused_and_runs_nothing(tmp_path, kind):
    payload, named = PAYLOADS[kind]
    root = write_cifar(str(tmp_path / 'cifar'), num_classes=10, num_train=10, num_test=10)
    marker = tmp_path / 'marker'
    path = craft_cifar_batch(root, payload(marker))
    with pytest.raises(ValueError) as info:
        CIFAR10(data_root=root, split='test')
    message = str(info.value)
    assert path in message and named in message and 'could run code' in message
    assert not marker.exists()
