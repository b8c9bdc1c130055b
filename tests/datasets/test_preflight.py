"""The pre-flight data checks on mmpretrain's own MNIST / CIFAR types (the tools run them before
the Runner; docs/reliability.md, "Data checks before the Runner")."""
import os.path as osp
import pickle

import pytest

from mmstiff.datasets.preflight import DataCheckError, check_data
from mmstiff.testing import write_cifar, write_mnist
from mmstiff.testing.cifar import dump_py2_pickle


def config(dataset, field='test_dataloader'):
    return {'default_scope': 'mmpretrain', field: dict(dataset=dataset)}


def test_upstream_mnist_split_without_test_mode_is_a_warning_and_the_files_read_are_checked(
        tmp_path):
    root = write_mnist(str(tmp_path / 'mnist'), num_train=40, num_test=20)
    [line] = check_data(config(dict(type='MNIST', data_root=root, split='test')))
    assert line.startswith("test_dataloader.dataset: split='test' with test_mode=False: "
                           'mmpretrain reads the files by test_mode, so this reads the training '
                           'files; expected test_mode=True')
    assert 'mmstiff.MNIST / mmstiff.FashionMNIST refuse this' in line
    with pytest.raises(DataCheckError, match="split='test' with test_mode=False: .* would read"):
        check_data(config(dict(type='mmstiff.MNIST', data_root=root, split='test')))
    # the training files are the ones read, so the ones checked
    with open(osp.join(root, 'train-labels-idx1-ubyte'), 'r+b') as f:
        f.truncate(8 + 39)
    with pytest.raises(DataCheckError, match='train-labels-idx1-ubyte: file is 47 bytes'):
        check_data(config(dict(type='MNIST', data_root=root, split='test')))


def test_upstream_cifar_batch_with_a_label_out_of_range(tmp_path):
    root = write_cifar(str(tmp_path / 'cifar'), num_classes=10, num_train=20, num_test=10)
    path = osp.join(root, 'cifar-10-batches-py', 'test_batch')
    with open(path, 'rb') as f:
        batch = pickle.load(f, encoding='latin1')
    batch['labels'][3] = 12
    dump_py2_pickle(batch, path)
    cfg = config(dict(type='CIFAR10', data_root=root, split='test', download=False))
    with pytest.raises(DataCheckError) as err:
        check_data(cfg)
    text = str(err.value)
    assert text.startswith(f"test_dataloader.dataset: {path}: field 'labels' holds 12, out of "
                           'range; expected labels in [0, 10)')
    assert "type='CIFAR10' does not check this; mmstiff.CIFAR10 / mmstiff.CIFAR100" in text
    cfg['skip_data_checks'] = True
    assert check_data(cfg) == []
