"""Format checks of the Fashion-MNIST files mmpretrain's ``FashionMNIST`` reads.

mmpretrain's ``FashionMNIST(data_root=DIR)`` reads the four *unzipped* IDX files from ``DIR``
(60,000 + 10,000 grey 28x28 images, 10 classes). IDX files start with a big-endian header:
the magic number (2051 images, 2049 labels), then one uint32 per dimension; the raw uint8
values follow. :func:`verify_idx` and :func:`verify_folder` check the header, the dimensions
and the exact size of each file, so a truncated or foreign file fails by name before training.

``tools/prepare_fashion_mnist.py`` fills ``DIR`` from Debian's ``dataset-fashion-mnist``.
"""
import math
import os.path as osp
import struct
from typing import Dict, Optional, Tuple

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
IMAGE_SHAPE = (28, 28)

#: split -> (images file, labels file), unzipped names as mmpretrain reads them.
SPLIT_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}
#: Images per split of the full Fashion-MNIST.
FULL_COUNTS = {'train': 60000, 'test': 10000}


def read_idx_header(path: str) -> Tuple[int, Tuple[int, ...]]:
    """``(magic, dims)`` of the IDX file ``path`` (unzipped), from its big-endian header."""
    with open(path, 'rb') as f:
        head = f.read(4)
        if len(head) < 4:
            raise ValueError(f'{path}: file is {len(head)} bytes long; expected an IDX header')
        magic, = struct.unpack('>I', head)
        ndim = magic & 0xFF
        raw = f.read(4 * ndim)
    if len(raw) < 4 * ndim:
        raise ValueError(f'{path}: header is truncated; expected {ndim} dimensions')
    return magic, struct.unpack(f'>{ndim}I', raw)


def verify_idx(path: str, magic: int, count: Optional[int] = None) -> Tuple[int, ...]:
    """Check an unzipped IDX file's magic, dimensions and exact size; return its dims.

    Args:
        path (str): the file.
        magic (int): expected magic number (2051 images, 2049 labels).
        count (int, optional): expected number of items (first dimension).
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} does not exist')
    found, dims = read_idx_header(path)
    if found != magic:
        raise ValueError(f'{path}: magic number is {found}; expected {magic}')
    if magic == IMAGES_MAGIC and tuple(dims[1:]) != IMAGE_SHAPE:
        raise ValueError(f'{path}: images are {dims[1:]}; expected {IMAGE_SHAPE}')
    if count is not None and dims[0] != count:
        raise ValueError(f'{path}: holds {dims[0]} items; expected {count}')
    want = 4 * (1 + len(dims)) + math.prod(dims)
    size = osp.getsize(path)
    if size != want:
        raise ValueError(f'{path}: file is {size} bytes; its header {dims} needs {want} '
                         '(truncated or corrupted file)')
    return dims


def verify_folder(root: str, counts: Optional[Dict[str, int]] = FULL_COUNTS) -> Dict[str, int]:
    """Verify the four unzipped files in ``root``; return ``{split: number of images}``.

    ``counts`` (``{split: n}`` or None) fixes the expected number of images per split.
    """
    found = {}
    for split, (images, labels) in SPLIT_FILES.items():
        want = None if counts is None else counts[split]
        n = verify_idx(osp.join(root, images), IMAGES_MAGIC, want)[0]
        verify_idx(osp.join(root, labels), LABELS_MAGIC, n)
        found[split] = n
    return found
