"""Format checks of the Fashion-MNIST IDX files (header, dimensions, exact size)."""
import struct

import pytest

from mmstiff.datasets import fashion_mnist as fm
from mmstiff.testing import write_mnist


def test_verify_rejects_wrong_magic_counts_and_shapes(tmp_path):
    path = str(tmp_path / 'x')
    with open(path, 'wb') as f:
        f.write(struct.pack('>2I', 2049, 3) + bytes(3))
    assert fm.verify_idx(path, fm.LABELS_MAGIC, 3) == (3, )
    with pytest.raises(ValueError, match='magic number is 2049; expected 2051'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)
    with pytest.raises(ValueError, match='holds 3 items; expected 60000'):
        fm.verify_idx(path, fm.LABELS_MAGIC, 60000)
    with open(path, 'wb') as f:
        f.write(struct.pack('>4I', 2051, 1, 32, 32) + bytes(1024))
    with pytest.raises(ValueError, match=r'images are \(32, 32\); expected \(28, 28\)'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)
    with open(path, 'wb') as f:
        f.write(b'\x00\x00')
    with pytest.raises(ValueError, match='2 bytes long; expected an IDX header'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)


def test_verify_folder_counts_each_split_and_names_a_short_file(tmp_path):
    root = write_mnist(str(tmp_path / 'mnist'), num_train=12, num_test=5)
    assert fm.verify_folder(root, counts=None) == {'train': 12, 'test': 5}
    with pytest.raises(ValueError, match='holds 12 items; expected 60000'):
        fm.verify_folder(root)  # the full dataset by default
    labels = tmp_path / 'mnist' / 't10k-labels-idx1-ubyte'
    labels.write_bytes(labels.read_bytes()[:-1])
    with pytest.raises(
            ValueError, match=r't10k-labels-idx1-ubyte: file is 12 bytes; its header '
            r'\(5,\) needs 13'):
        fm.verify_folder(root, counts=None)
