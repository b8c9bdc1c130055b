"""STL-10 for mmpretrain (Coates, Lee & Ng, AISTATS 2011; the StepNet paper's 96×96 benchmark).

Reads the official binary release, ``stl10_binary/`` (see :mod:`mmstiff.testing.stl10` for
the byte layout): 5,000 labelled training images, 8,000 test images, 100,000 unlabelled images,
96 × 96 RGB, ten classes. Every split loads into memory as HWC uint8 arrays, like mmpretrain's
``CIFAR10``, so the pipelines need no ``LoadImageFromFile``. The dataset is never downloaded;
missing, truncated or empty files raise an error that names the file.
"""
import os.path as osp
from typing import List, Optional

import numpy as np
from mmengine.fileio import exists, get, join_path
from mmpretrain.datasets import BaseDataset

from mmstiff.registry import DATASETS

#: Official STL-10 class names, in label order (stored label 1 is 'airplane').
STL10_CATEGORIES = ('airplane', 'bird', 'car', 'cat', 'deer', 'dog', 'horse', 'monkey', 'ship',
                    'truck')
STL10_IMAGE_SHAPE = (3, 96, 96)
STL10_IMAGE_BYTES = 3 * 96 * 96


def decode_stl10_images(buffer: bytes, path: str = '<buffer>') -> np.ndarray:
    """Bytes of an official ``*_X.bin`` file -> (N, 96, 96, 3) uint8 HWC images.

    The file holds, per image, the R, G, B planes, each column-major, so a plain reshape gives
    axes ``(N, C, col, row)``; transposing to ``(N, row, col, C)`` gives HWC.

    Raises:
        ValueError: naming ``path`` when the size is not a multiple of 27648 bytes.
    """
    if len(buffer) % STL10_IMAGE_BYTES:
        raise ValueError(f'{path} holds {len(buffer)} bytes, not a multiple of the '
                         f'{STL10_IMAGE_BYTES} bytes of one 3x96x96 STL-10 image; the file is '
                         'truncated or not an STL-10 image file')
    planes = np.frombuffer(buffer, dtype=np.uint8).reshape((-1, ) + STL10_IMAGE_SHAPE)
    return np.ascontiguousarray(planes.transpose(0, 3, 2, 1))


def decode_stl10_labels(buffer: bytes, num_images: int, path: str = '<buffer>') -> np.ndarray:
    """Bytes of an official ``*_y.bin`` file (labels 1..10) -> int64 labels 0..9.

    Raises:
        ValueError: naming ``path`` when the count differs from ``num_images`` or a label is
            outside 1..10.
    """
    labels = np.frombuffer(buffer, dtype=np.uint8)
    if len(labels) != num_images:
        raise ValueError(f'{path} holds {len(labels)} labels but the image file holds '
                         f'{num_images} images; expected one label byte per image')
    if len(labels) and (labels.min() < 1 or labels.max() > len(STL10_CATEGORIES)):
        raise ValueError(f'{path} holds labels in [{labels.min()}, {labels.max()}]; expected '
                         f'1..{len(STL10_CATEGORIES)}')
    return labels.astype(np.int64) - 1


@DATASETS.register_module()
class STL10(BaseDataset):
    """`STL-10 <https://cs.stanford.edu/~acoates/stl10/>`_ from its official binary files.

    Args:
        data_root (str): folder that contains ``stl10_binary/``.
        split (str): ``'train'`` (5,000 labelled), ``'test'`` (8,000) or ``'unlabeled'``
            (100,000, every ``gt_label`` is -1). Default ``'train'``.
        metainfo (dict, optional): overrides the class names.
        data_prefix (str): folder of the binary files, relative to ``data_root``.
            Default ``'stl10_binary'``.
        test_mode (bool): passed to mmengine's ``BaseDataset``. Default False.
        **kwargs: other arguments of mmpretrain's ``BaseDataset`` (``pipeline``, ``indices``…).

    Example:
        >>> from mmstiff.testing.stl10 import write_stl10
        >>> ds = STL10(data_root=write_stl10('/tmp/stl'), split='test')
        >>> ds[0]['img'].shape, len(ds.CLASSES)
        ((96, 96, 3), 10)
    """

    METAINFO = {'classes': STL10_CATEGORIES}
    SPLITS = ('train', 'test', 'unlabeled')

    def __init__(self, data_root: str = '', split: str = 'train', metainfo: Optional[dict] = None,
                 data_prefix: str = 'stl10_binary', test_mode: bool = False, **kwargs):
        if split not in self.SPLITS:
            raise ValueError(f'split={split!r} is not supported; expected one of {self.SPLITS}')
        if not data_root and not osp.isabs(data_prefix):
            raise ValueError(f"data_root={data_root!r} is empty; expected the folder that "
                             f'contains {data_prefix!r}')
        self.split = split
        super().__init__(ann_file='', metainfo=metainfo, data_root=data_root,
                         data_prefix=dict(root=data_prefix), test_mode=test_mode, **kwargs)

    def _read(self, name):
        path = join_path(self.data_prefix['root'], name)
        if not exists(path):
            raise FileNotFoundError(f'{path} is missing; expected the official STL-10 binary '
                                    f"file {name!r} of split {self.split!r} (the dataset is "
                                    'never downloaded automatically)')
        return get(path), path

    def load_data_list(self) -> List[dict]:
        """Decode ``{split}_X.bin`` (and ``{split}_y.bin``) into ``img`` / ``gt_label`` dicts."""
        buffer, path = self._read(f'{self.split}_X.bin')
        images = decode_stl10_images(buffer, path)
        if not len(images):
            raise ValueError(f'{path} holds no image (0 bytes); expected at least one '
                             f'{STL10_IMAGE_BYTES}-byte STL-10 image')
        if self.split == 'unlabeled':
            labels = np.full(len(images), -1, dtype=np.int64)
        else:
            buffer, path = self._read(f'{self.split}_y.bin')
            labels = decode_stl10_labels(buffer, len(images), path)
        return [{'img': img, 'gt_label': int(label)} for img, label in zip(images, labels)]

    def extra_repr(self) -> List[str]:
        return [f"Prefix of data: \t{self.data_prefix['root']}", f'Split: \t{self.split}']
