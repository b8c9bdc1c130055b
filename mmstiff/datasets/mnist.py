"""MNIST and Fashion-MNIST that check their IDX files before mmpretrain reads them.

A label count that differs from the image count, a truncated or foreign file, an empty split,
a ``split`` that disagrees with ``test_mode`` or a label outside the classes fails naming the
file (docs/reliability.md, "Bad data").
"""
import os.path as osp
from typing import Optional

import numpy as np
from mmpretrain.datasets import MNIST as _UpstreamMNIST
from mmpretrain.datasets import FashionMNIST as _UpstreamFashionMNIST

from mmstiff.registry import DATASETS
from .fashion_mnist import IMAGES_MAGIC, LABELS_MAGIC, SPLIT_FILES, verify_idx


def check_label_range(labels: str, num_classes: int) -> None:
    """Every label of the (verified) IDX label file ``labels`` is in ``[0, num_classes)``.

    Raises:
        ValueError: naming the file, how many labels are out of range and the first one.
    """
    values = np.fromfile(labels, dtype=np.uint8, offset=8)
    bad = np.flatnonzero(values >= num_classes)
    if bad.size:
        raise ValueError(f'{labels} holds {bad.size} label(s) outside [0, {num_classes}), the '
                         f'first at index {bad[0]}: {values[bad[0]]}; expected class indices '
                         f'of the {num_classes} classes')


def check_idx_split(root: str, split: str, num_classes: Optional[int] = None) -> int:
    """Check the image and label files of ``split`` under ``root``; return the image count.

    Raises:
        FileNotFoundError: a file is missing.
        ValueError: a bad header, image size or file size, a label count that differs from the
            image count, no image at all, or (with ``num_classes``) a label out of range.
    """
    images_name, labels_name = SPLIT_FILES[split]
    images, labels = osp.join(root, images_name), osp.join(root, labels_name)
    num_images = verify_idx(images, IMAGES_MAGIC)[0]
    num_labels = verify_idx(labels, LABELS_MAGIC)[0]
    if num_labels != num_images:
        raise ValueError(f'{labels} holds {num_labels} labels but {images} holds {num_images} '
                         'images; expected one label per image')
    if num_images == 0:
        raise ValueError(f'{images} holds 0 images; expected at least one')
    if num_classes is not None:
        check_label_range(labels, num_classes)
    return num_images


class _IdxChecked:
    """Checks split / test_mode and the IDX files before mmpretrain's reader runs."""

    def __init__(self, *args, split='train', test_mode=False, **kwargs):
        if split not in SPLIT_FILES:
            raise ValueError(f'split={split!r} is not supported; expected one of '
                             f'{tuple(SPLIT_FILES)}')
        if (split == 'test') != bool(test_mode):
            raise ValueError(
                f'split={split!r} with test_mode={test_mode!r}: mmpretrain reads the files '
                f"by test_mode, so this would read the {'test' if test_mode else 'training'} "
                f"files; expected test_mode={split == 'test'} for split={split!r}")
        super().__init__(*args, split=split, test_mode=test_mode, **kwargs)

    def load_data_list(self):
        if self._check_exists() or not self.download:
            classes = self.metainfo.get('classes')
            check_idx_split(self.data_prefix['root'], self.split,
                            num_classes=len(classes) if classes else None)
        return super().load_data_list()


@DATASETS.register_module()
class MNIST(_IdxChecked, _UpstreamMNIST):
    """mmpretrain's ``MNIST`` with the checks of the module docstring; same arguments."""


@DATASETS.register_module()
class FashionMNIST(_IdxChecked, _UpstreamFashionMNIST):
    """mmpretrain's ``FashionMNIST`` with the checks of the module docstring; same arguments."""
