"""mmstiff.CIFAR10 / CIFAR100 check the files' format instead of the official md5 sums."""
import os
import os.path as osp
import pickle
import shutil

import numpy as np
import pytest

from mmstiff.datasets.cifar import CIFAR10, CIFAR100
from mmstiff.testing import write_cifar


@pytest.fixture(scope='module')
def c10_root(tmp_path_factory):
    return write_cifar(str(tmp_path_factory.mktemp('c10')), 10, num_train=12, num_test=6)


@pytest.fixture(scope='module')
def c100_root(tmp_path_factory):
    return write_cifar(str(tmp_path_factory.mktemp('c100')), 100, num_train=8, num_test=4)


@pytest.fixture
def c10_copy(c10_root, tmp_path):
    """A private copy of the tiny CIFAR-10 to corrupt."""
    root = str(tmp_path / 'copy')
    shutil.copytree(c10_root, root)
    return root


def _batch_path(root, name='data_batch_2'):
    return osp.join(root, 'cifar-10-batches-py', name)


def _rewrite(path, change):
    """Load a CIFAR pickle, apply ``change(entry)`` and write it back (Python 3 pickle)."""
    with open(path, 'rb') as f:
        entry = pickle.load(f, encoding='latin1')
    change(entry)
    with open(path, 'wb') as f:
        pickle.dump(entry, f)


def _bytes_entry(path):
    with open(path, 'rb') as f:
        return pickle.load(f, encoding='bytes')


def test_cifar10_loads_tiny_files(c10_root):
    train = CIFAR10(data_root=c10_root, split='train')
    test = CIFAR10(data_root=c10_root, split='test')
    assert len(train) == 12 and len(test) == 6
    entry = _bytes_entry(_batch_path(c10_root, 'test_batch'))
    info = test.get_data_info(3)
    assert info['gt_label'] == entry[b'labels'][3]
    expected = entry[b'data'][3].reshape(3, 32, 32).transpose(1, 2, 0)
    assert np.array_equal(info['img'], expected)
    assert train.metainfo['classes'][0] == 'airplane'


def test_cifar100_loads_tiny_files(c100_root):
    ds = CIFAR100(data_root=c100_root, split='train')
    entry = _bytes_entry(osp.join(c100_root, 'cifar-100-python', 'train'))
    assert len(ds) == 8
    assert [ds.get_data_info(i)['gt_label'] for i in range(8)] == entry[b'fine_labels']
    assert len(ds.metainfo['classes']) == 100


def test_upstream_md5_check_rejects_what_mmstiff_accepts(c10_root):
    from mmpretrain.datasets import CIFAR10 as UpstreamCIFAR10
    with pytest.raises(RuntimeError, match='download=True'):
        UpstreamCIFAR10(data_root=c10_root, split='train', download=False)


@pytest.mark.det
def test_built_from_mmpretrain_and_mmdet_scopes(c10_root):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS as MMPRE_DATASETS
    for scope in ('mmpretrain', 'mmdet'):
        with DefaultScope.overwrite_default_scope(scope):
            ds = MMPRE_DATASETS.build(
                dict(type='mmstiff.CIFAR10', data_root=c10_root, split='test', pipeline=[]))
        assert isinstance(ds, CIFAR10) and len(ds) == 6


def test_meta_file_read_and_checked_when_classes_unset(c10_root, c10_copy):
    ds = CIFAR10(data_root=c10_root, split='test', metainfo=dict(classes=None))
    assert list(ds.metainfo['classes']) == [
        'airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'
    ]
    meta = _batch_path(c10_copy, 'batches.meta')
    _rewrite(meta, lambda e: e.update(label_names=e['label_names'][:9]))
    with pytest.raises(
            ValueError, match="batches.meta: field 'label_names' must be a list "
            'of 10 class names'):
        CIFAR10(data_root=c10_copy, split='test', metainfo=dict(classes=None))


def test_missing_file_names_path_and_does_not_download(c10_copy, monkeypatch):
    import mmpretrain.datasets.cifar as upstream

    def no_download(*args, **kwargs):
        raise AssertionError('download attempted')

    monkeypatch.setattr(upstream, 'download_and_extract_archive', no_download)
    os.remove(_batch_path(c10_copy, 'data_batch_4'))
    with pytest.raises(FileNotFoundError) as info:
        CIFAR10(data_root=c10_copy, split='test')
    message = str(info.value)
    assert _batch_path(c10_copy, 'data_batch_4') in message
    assert 'cifar-10-python.tar.gz' in message and 'download=True' in message


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match='cifar-100-python'):
        CIFAR100(data_root=str(tmp_path), split='train')


def test_download_true_defers_to_mmpretrain(tmp_path, monkeypatch):
    import mmpretrain.datasets.cifar as upstream
    calls = []

    def fake_download(url, download_root, filename=None, md5=None):
        calls.append((url, osp.normpath(download_root), filename))
        write_cifar(download_root, 10, num_train=5, num_test=5)

    monkeypatch.setattr(upstream, 'download_and_extract_archive', fake_download)
    ds = CIFAR10(data_root=str(tmp_path), split='train', download=True)
    assert len(ds) == 5
    assert calls == [(upstream.CIFAR10.url, str(tmp_path), 'cifar-10-python.tar.gz')]


@pytest.mark.parametrize('change, message', [
    (lambda e: e.update(label=e.pop('labels')), "field 'labels'"),
    (lambda e: e.update(data=e['data'][:, :3000]), r"'data' must be a uint8 array of shape "
     r'\(N, 3072\); got uint8 array of shape '
     r'\(\d+, 3000\)'),
    (lambda e: e.update(data=e['data'].astype(np.float32)), 'got float32 array'),
    (lambda e: e.update(data=e['data'].tolist()), 'got list'),
    (lambda e: e['labels'].__setitem__(0, 10), r"'labels' holds 10, out of range; expected "
     r'labels in \[0, 10\)'),
    (lambda e: e['labels'].__setitem__(0, -1), 'holds -1'),
    (lambda e: e['labels'].pop(), "'labels' has 1 labels but 'data' has 2 rows"),
    (lambda e: e.update(labels=['cat', 'dog']), "'labels' must be a list of ints"),
])
def test_corrupted_batch_names_file_and_field(c10_copy, change, message):
    path = _batch_path(c10_copy)  # data_batch_2 holds 2 or 3 images
    _rewrite(path, lambda e: e.update(data=e['data'][:2], labels=e['labels'][:2]))
    _rewrite(path, change)
    with pytest.raises(ValueError, match=message) as info:
        CIFAR10(data_root=c10_copy, split='train')
    assert path in str(info.value)
    # the test split does not read the corrupted file
    assert len(CIFAR10(data_root=c10_copy, split='test')) == 6


def test_not_a_pickle(c10_copy):
    path = _batch_path(c10_copy, 'test_batch')
    with open(path, 'wb') as f:
        f.write(b'PK\x03\x04 this is a zip header, not a pickle')
    with pytest.raises(ValueError, match='test_batch is not a CIFAR pickle file'):
        CIFAR10(data_root=c10_copy, split='test')
    with open(path, 'wb') as f:
        pickle.dump([1, 2, 3], f)
    with pytest.raises(ValueError, match='must unpickle to a dict; got list'):
        CIFAR10(data_root=c10_copy, split='test')


def test_cifar100_wrong_label_field(c100_root, tmp_path):
    root = str(tmp_path / 'c100')
    shutil.copytree(c100_root, root)
    path = osp.join(root, 'cifar-100-python', 'test')
    _rewrite(path, lambda e: e.update(labels=e.pop('fine_labels')))
    with pytest.raises(ValueError, match="has no field 'fine_labels'"):
        CIFAR100(data_root=root, split='test')
