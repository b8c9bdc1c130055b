"""Tiny ImageNet-1k in the folder layout mmpretrain's ``ImageNet`` reads.

Layout written under ``root`` (the ``data_root`` of ``ImageNet(data_root=root, split=...)``)::

    train/<wnid>/<wnid>_<k>.JPEG          k = 1, 2, ... per class
    val/ILSVRC2012_val_<8 digits>.JPEG    numbered from 1, classes in random order
    meta/train.txt                        "<wnid>/<wnid>_<k>.JPEG <label>" per line
    meta/val.txt                          "ILSVRC2012_val_<8 digits>.JPEG <label>" per line

Paths in ``meta/*.txt`` are relative to the split folder, as in the official meta files
mmpretrain documents. Class ``c`` gets the synthetic WordNet-style id ``n{c:08d}``, so the
sorted folder names and the labels agree. Labels index mmpretrain's 1000 ImageNet class
names, which is why ``num_classes`` may not exceed 1000.
"""
import os
import os.path as osp
from typing import Optional

import numpy as np
from PIL import Image

from .cifar import balanced_labels
from .shapes import Size, check_size, draw_class_image

NUM_IMAGENET_CLASSES = 1000


def wnid(label: int) -> str:
    """The synthetic WordNet id of class ``label`` (sorts in label order)."""
    return f'n{label:08d}'


def val_name(index: int) -> str:
    """File name of the ``index``-th (1-based) validation image, as in ILSVRC2012."""
    return f'ILSVRC2012_val_{index:08d}.JPEG'


def save_jpeg(array: np.ndarray, path: str, quality: int = 95) -> str:
    """Save an (H, W, 3) uint8 array as a JPEG (no chroma subsampling) and return ``path``."""
    Image.fromarray(array).save(path, format='JPEG', quality=quality, subsampling=0)
    return path


def _check(name, value, low, high=None):
    if not isinstance(value, (int, np.integer)) or value < low or (high and value > high):
        bound = f'{low} <= {name} <= {high}' if high else f'{name} >= {low}'
        raise ValueError(f'{name}={value!r} is invalid; expected an int with {bound}')


def write_imagenet(root: str, num_classes: int = 4, per_class: int = 3, size: Size = (64, 64),
                   seed: int = 0, val_per_class: Optional[int] = None) -> str:
    """Write a tiny ImageNet under ``root``; return ``root``.

    Args:
        root (str): folder to write into; created if missing.
        num_classes (int): number of classes, 1..1000 (labels ``0..num_classes-1``).
        per_class (int): training images per class.
        size (tuple): ``(W, H)`` of every image.
        seed (int): seed of every random choice; equal seeds write equal files.
        val_per_class (int, optional): validation images per class (default ``per_class``).

    Returns:
        str: ``root``.
    """
    _check('num_classes', num_classes, 1, NUM_IMAGENET_CLASSES)
    _check('per_class', per_class, 1)
    val_per_class = per_class if val_per_class is None else val_per_class
    _check('val_per_class', val_per_class, 1)
    size = check_size(size)
    rng = np.random.default_rng(seed)
    os.makedirs(osp.join(root, 'meta'), exist_ok=True)

    train_lines = []
    for label in range(num_classes):
        folder = osp.join(root, 'train', wnid(label))
        os.makedirs(folder, exist_ok=True)
        for k in range(1, per_class + 1):
            rel = f'{wnid(label)}/{wnid(label)}_{k}.JPEG'
            save_jpeg(draw_class_image(label, num_classes, size, rng), osp.join(root, 'train', rel))
            train_lines.append(f'{rel} {label}\n')

    os.makedirs(osp.join(root, 'val'), exist_ok=True)
    val_lines = []
    for index, label in enumerate(
            balanced_labels(num_classes * val_per_class, num_classes, rng), start=1):
        image = draw_class_image(int(label), num_classes, size, rng)
        save_jpeg(image, osp.join(root, 'val', val_name(index)))
        val_lines.append(f'{val_name(index)} {label}\n')

    with open(osp.join(root, 'meta', 'train.txt'), 'w') as f:
        f.writelines(train_lines)
    with open(osp.join(root, 'meta', 'val.txt'), 'w') as f:
        f.writelines(val_lines)
    return root
