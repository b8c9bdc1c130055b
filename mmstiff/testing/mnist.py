"""Tiny MNIST / Fashion-MNIST in the IDX format mmpretrain's ``MNIST`` and ``FashionMNIST`` read.

IDX files start with a big-endian header: the magic number (``0x0803`` = 2051 for an unsigned
byte 3-D tensor of images, ``0x0801`` = 2049 for a 1-D tensor of labels), then one
big-endian uint32 per dimension; the raw uint8 values follow. Files written under ``root``
(unzipped, as mmpretrain reads them from ``data_root``; gzipped with ``compress=True``, as
they are distributed)::

    train-images-idx3-ubyte   train-labels-idx1-ubyte
    t10k-images-idx3-ubyte    t10k-labels-idx1-ubyte

mmpretrain 1.2.0 reads the ``t10k`` files only with ``test_mode=True`` (``split='test'``
alone still reads the training files), as its ``lenet5_mnist.py`` config does.
"""
import gzip
import os
import os.path as osp
import struct
from typing import Tuple

import numpy as np

from .cifar import balanced_labels
from .shapes import draw_class_image

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
IMAGE_SIZE = 28
NUM_CLASSES = 10

#: (images file, labels file) of each split, unzipped names.
MNIST_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array of 1 (labels) or 3 (images) dimensions."""
    array = np.asarray(array)
    if array.dtype != np.uint8 or array.ndim not in (1, 3):
        raise ValueError(f'IDX arrays here are uint8 with 1 or 3 dims; got {array.dtype} '
                         f'with shape {array.shape}')
    magic = IMAGES_MAGIC if array.ndim == 3 else LABELS_MAGIC
    header = struct.pack(f'>{1 + array.ndim}I', magic, *array.shape)
    return header + np.ascontiguousarray(array).tobytes()


def write_idx(array: np.ndarray, path: str, compress: bool = False) -> str:
    """Write ``array`` as an IDX file (gzipped when ``compress``); return the path."""
    opener = gzip.open if compress else open
    with opener(path, 'wb') as f:
        f.write(idx_bytes(array))
    return path


def mnist_split(n: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` grey 28x28 images of class shapes and their labels, as uint8 arrays."""
    labels = balanced_labels(n, NUM_CLASSES, rng).astype(np.uint8)
    images = np.stack([
        draw_class_image(int(v), NUM_CLASSES, (IMAGE_SIZE, IMAGE_SIZE), rng, channels=1)[..., 0]
        for v in labels
    ])
    return images, labels


def write_mnist(root: str, num_train: int = 40, num_test: int = 20, seed: int = 0,
                compress: bool = False) -> str:
    """Write a tiny MNIST-format dataset (10 classes, 28x28 grey) under ``root``; return ``root``.

    Args:
        root (str): folder to write into; created if missing. Pass it as ``data_root`` of
            mmpretrain's ``MNIST`` / ``FashionMNIST``.
        num_train (int): training images.
        num_test (int): test images.
        seed (int): seed of every random choice; equal seeds write equal bytes.
        compress (bool): write ``<name>.gz`` files (the distributed form) instead.
    """
    for name, value in (('num_train', num_train), ('num_test', num_test)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f'{name}={value!r} is invalid; expected a positive int')
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    suffix = '.gz' if compress else ''
    for split, n in (('train', num_train), ('test', num_test)):
        images, labels = mnist_split(n, rng)
        images_file, labels_file = MNIST_FILES[split]
        write_idx(images, osp.join(root, images_file + suffix), compress)
        write_idx(labels, osp.join(root, labels_file + suffix), compress)
    return root
