"""STL-10 from its official binary files, and the tiny-file writer."""
import os
import os.path as osp

import numpy as np
import pytest

from mmstiff.datasets.stl10 import STL10
from mmstiff.testing.stl10 import write_stl10, write_stl10_split

OFFICIAL_NAMES = [
    'airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse', 'monkey', 'ship', 'truck'
]


def pixel(n, c, row, col):
    """A value that differs for every (image, channel, row, column) up to wrap-around."""
    return (n * 101 + c * 37 + row * 3 + col * 7) % 256


def write_by_hand(folder, labels_1_to_10):
    """Write images in the official byte order, one byte at a time: for each image, for each of
    the R, G, B planes, the 96 columns one after the other, each column top to bottom."""
    os.makedirs(folder, exist_ok=True)
    data = bytearray()
    for n in range(len(labels_1_to_10)):
        for c in range(3):
            for col in range(96):
                for row in range(96):
                    data.append(pixel(n, c, row, col))
    with open(osp.join(folder, 'test_X.bin'), 'wb') as f:
        f.write(bytes(data))
    with open(osp.join(folder, 'test_y.bin'), 'wb') as f:
        f.write(bytes(labels_1_to_10))


def test_decodes_official_byte_order_to_hwc(tmp_path):
    write_by_hand(str(tmp_path / 'stl10_binary'), [3, 10])
    ds = STL10(data_root=str(tmp_path), split='test')
    assert len(ds) == 2
    rows, cols = np.meshgrid(np.arange(96), np.arange(96), indexing='ij')
    for n in range(2):
        img = ds.get_data_info(n)['img']
        assert img.shape == (96, 96, 3) and img.dtype == np.uint8
        for c in range(3):
            np.testing.assert_array_equal(img[:, :, c], pixel(n, c, rows, cols))
    # a few pixels spelled out: row 0 / column 1 is byte 96 of the red plane
    assert ds.get_data_info(0)['img'][0, 1, 0] == 7
    assert ds.get_data_info(0)['img'][1, 0, 0] == 3
    assert ds.get_data_info(1)['img'][5, 2, 2] == (101 + 74 + 15 + 14) % 256
    assert [ds.get_data_info(n)['gt_label'] for n in range(2)] == [2, 9]
    assert list(ds.metainfo['classes']) == OFFICIAL_NAMES


def test_writer_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 96, 96, 3), dtype=np.uint8)
    labels = np.array([0, 9, 4, 4, 1])
    folder = str(tmp_path / 'stl10_binary')
    write_stl10_split(folder, 'train', images, labels)
    assert osp.getsize(osp.join(folder, 'train_X.bin')) == 5 * 27648
    ds = STL10(data_root=str(tmp_path), split='train')
    np.testing.assert_array_equal(np.stack([d['img'] for d in ds.load_data_list()]), images)
    assert [ds.get_data_info(i)['gt_label'] for i in range(5)] == labels.tolist()
    raw = np.fromfile(osp.join(folder, 'train_y.bin'), dtype=np.uint8)
    assert raw.tolist() == (labels + 1).tolist()


def test_write_stl10_layout_and_splits(tmp_path):
    root = write_stl10(
        str(tmp_path), num_train=20, num_test=10, seed=1, with_unlabeled=True, num_unlabeled=3)
    folder = osp.join(root, 'stl10_binary')
    assert sorted(os.listdir(folder)) == sorted([
        'train_X.bin', 'train_y.bin', 'test_X.bin', 'test_y.bin', 'class_names.txt',
        'unlabeled_X.bin'
    ])
    with open(osp.join(folder, 'class_names.txt')) as f:
        assert f.read().split() == OFFICIAL_NAMES
    train = STL10(data_root=root, split='train')
    assert len(train) == 20
    assert np.bincount([train.get_data_info(i)['gt_label'] for i in range(20)]).tolist() == [2] * 10
    assert len(STL10(data_root=root, split='test')) == 10
    unlabeled = STL10(data_root=root, split='unlabeled')
    assert len(unlabeled) == 3 and unlabeled.get_data_info(0)['gt_label'] == -1
    # the same seed writes the same bytes
    again = write_stl10(str(tmp_path / 'again'), num_train=20, num_test=10, seed=1)
    with open(osp.join(folder, 'train_X.bin'), 'rb') as a, \
            open(osp.join(again, 'stl10_binary', 'train_X.bin'), 'rb') as b:
        assert a.read() == b.read()


def test_pipeline_through_mmpretrain_registry(tmp_path):
    from mmpretrain.registry import DATASETS

    import mmstiff  # noqa: F401
    root = write_stl10(str(tmp_path), num_train=4, num_test=2)
    ds = DATASETS.build(
        dict(
            type='mmstiff.STL10', data_root=root, split='train', pipeline=[
                dict(type='RandomCrop', crop_size=96, padding=12),
                dict(type='RandomFlip', prob=0.5, direction='horizontal'),
                dict(type='PackInputs')
            ]))
    item = ds[0]
    assert tuple(item['inputs'].shape) == (3, 96, 96)
    assert item['data_samples'].gt_label.item() == ds.get_data_info(0)['gt_label']


def test_missing_file_is_named(tmp_path):
    root = write_stl10(str(tmp_path), num_train=2, num_test=2)
    os.remove(osp.join(root, 'stl10_binary', 'test_y.bin'))
    with pytest.raises(FileNotFoundError, match='test_y.bin'):
        STL10(data_root=root, split='test')
    with pytest.raises(FileNotFoundError, match='unlabeled_X.bin'):
        STL10(data_root=root, split='unlabeled')


def test_truncated_image_file_is_named(tmp_path):
    root = write_stl10(str(tmp_path), num_train=2, num_test=2)
    path = osp.join(root, 'stl10_binary', 'train_X.bin')
    with open(path, 'r+b') as f:
        f.truncate(2 * 27648 - 1)
    with pytest.raises(ValueError, match=r'train_X\.bin holds 55295 bytes.*27648'):
        STL10(data_root=root, split='train')


@pytest.mark.parametrize('labels, pattern', [
    (bytes([1]), r'test_y\.bin holds 1 labels.*2 images'),
    (bytes([1, 2, 3]), r'test_y\.bin holds 3 labels'),
    (bytes([0, 5]), r'test_y\.bin holds labels in \[0, 5\]'),
    (bytes([11, 5]), r'test_y\.bin holds labels in \[5, 11\]'),
])
def test_bad_label_file_is_named(tmp_path, labels, pattern):
    root = write_stl10(str(tmp_path), num_train=2, num_test=2)
    with open(osp.join(root, 'stl10_binary', 'test_y.bin'), 'wb') as f:
        f.write(labels)
    with pytest.raises(ValueError, match=pattern):
        STL10(data_root=root, split='test')


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="split='val'"):
        STL10(data_root=str(tmp_path), split='val')
    with pytest.raises(ValueError, match="data_root=''"):
        STL10(split='train')
    with pytest.raises(ValueError, match='num_train=0'):
        write_stl10(str(tmp_path), num_train=0)
