"""Tiny STL-10 in the official binary format (``stl10_binary``, Coates et al. 2011).

The official files are headerless uint8 arrays:

* ``*_X.bin``: images one after the other, 3 × 96 × 96 = 27648 bytes each. Inside an image the
  red plane comes first, then green, then blue; each plane is stored **column-major** (the
  format was written from Matlab): byte ``c·9216 + col·96 + row`` is pixel ``(row, col)`` of
  channel ``c``. ``np.frombuffer(...).reshape(-1, 3, 96, 96)`` therefore has axes
  ``(N, C, col, row)``.
* ``*_y.bin``: one byte per image, the label in 1..10.
* ``class_names.txt``: the ten class names, one a line, in label order.

Layout written under ``root``::

    stl10_binary/{train_X.bin, train_y.bin, test_X.bin, test_y.bin, class_names.txt
                  [, unlabeled_X.bin]}
"""
import os
import os.path as osp
from typing import List, Optional, Sequence, Union

import numpy as np

from .shapes import draw_class_image

#: Official STL-10 class names, in label order (label 1 is 'airplane').
STL10_NAMES = ('airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse', 'monkey', 'ship', 'truck')
STL10_FOLDER = 'stl10_binary'
IMAGE_SIZE = 96
IMAGE_BYTES = 3 * IMAGE_SIZE * IMAGE_SIZE


def encode_stl10_images(images: np.ndarray) -> bytes:
    """(N, 96, 96, 3) uint8 HWC images -> the bytes of an official ``*_X.bin`` file."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (96, 96, 3):
        raise ValueError(f'images of shape {images.shape} and dtype {images.dtype} are not '
                         'supported; expected uint8 of shape (N, 96, 96, 3)')
    # (N, row, col, C) -> (N, C, col, row): channel planes, each column-major.
    return np.ascontiguousarray(images.transpose(0, 3, 2, 1)).tobytes()


def write_stl10_split(folder: str, split: str, images: np.ndarray,
                      labels: Optional[Union[np.ndarray, Sequence[int]]] = None) -> List[str]:
    """Write one split: ``{split}_X.bin`` and, given ``labels`` (0..9), ``{split}_y.bin`` (1..10).

    Returns:
        list[str]: the paths written.
    """
    os.makedirs(folder, exist_ok=True)
    paths = [osp.join(folder, f'{split}_X.bin')]
    with open(paths[0], 'wb') as f:
        f.write(encode_stl10_images(images))
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (len(images), ) or labels.min() < 0 or labels.max() > 9:
            raise ValueError(f'labels of shape {labels.shape} are not supported; expected '
                             f'{len(images)} labels in 0..9')
        paths.append(osp.join(folder, f'{split}_y.bin'))
        with open(paths[1], 'wb') as f:
            f.write((labels + 1).astype(np.uint8).tobytes())
    return paths


def _images(labels, rng):
    return np.stack(
        [draw_class_image(int(label), 10, (IMAGE_SIZE, IMAGE_SIZE), rng)
         for label in labels]) if len(labels) else np.zeros(
             (0, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)


def write_stl10(root: str, num_train: int = 20, num_test: int = 10, seed: int = 0,
                with_unlabeled: bool = False, num_unlabeled: Optional[int] = None) -> str:
    """Write a tiny STL-10 into ``root/stl10_binary``; return ``root``.

    Images are drawn class-dependent shapes (:mod:`.shapes`), so a model can learn them; the
    labels cover the ten classes as evenly as possible.

    Args:
        root (str): folder to write into; pass it as ``data_root`` of :class:`mmstiff.STL10`.
        num_train (int): training images. Default 20.
        num_test (int): test images. Default 10.
        seed (int): seed of every random choice; equal seeds write equal bytes.
        with_unlabeled (bool): also write ``unlabeled_X.bin``.
        num_unlabeled (int, optional): its images (default ``num_train``).
    """
    num_unlabeled = num_train if num_unlabeled is None else num_unlabeled
    for name, value in (('num_train', num_train), ('num_test', num_test), ('num_unlabeled',
                                                                           num_unlabeled)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f'{name}={value!r} is not supported; expected a positive int')
    rng = np.random.default_rng(seed)
    folder = osp.join(root, STL10_FOLDER)
    for split, num in (('train', num_train), ('test', num_test)):
        labels = rng.permutation(np.arange(num) % 10)
        write_stl10_split(folder, split, _images(labels, rng), labels)
    if with_unlabeled:
        write_stl10_split(folder, 'unlabeled', _images(rng.integers(0, 10, num_unlabeled), rng))
    with open(osp.join(folder, 'class_names.txt'), 'w') as f:
        f.write(''.join(f'{name}\n' for name in STL10_NAMES))
    return root
