"""Tiny CIFAR-10 / CIFAR-100 in the official "python version" pickle format.

The files are Python 2 pickles (protocol 2) with the official layout and keys, so readers with
``encoding='bytes'`` or ``'latin1'`` see them as the official ones. CIFAR-100's coarse labels
are a stand-in (``fine_label // 5``).
"""
import os
import os.path as osp
import pickle
import struct
from typing import Any, Optional, Sequence

import numpy as np

from .shapes import draw_class_image

#: Official CIFAR-10 class names, in label order.
CIFAR10_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship',
                 'truck')

#: Official CIFAR-100 fine class names, in label order.
CIFAR100_NAMES = ('apple', 'aquarium_fish', 'baby', 'bear', 'beaver', 'bed', 'bee', 'beetle',
                  'bicycle', 'bottle', 'bowl', 'boy', 'bridge', 'bus', 'butterfly', 'camel', 'can',
                  'castle', 'caterpillar', 'cattle', 'chair', 'chimpanzee', 'clock', 'cloud',
                  'cockroach', 'couch', 'crab', 'crocodile', 'cup', 'dinosaur', 'dolphin',
                  'elephant', 'flatfish', 'forest', 'fox', 'girl', 'hamster', 'house', 'kangaroo',
                  'keyboard', 'lamp', 'lawn_mower', 'leopard', 'lion', 'lizard', 'lobster', 'man',
                  'maple_tree', 'motorcycle', 'mountain', 'mouse', 'mushroom', 'oak_tree', 'orange',
                  'orchid', 'otter', 'palm_tree', 'pear', 'pickup_truck', 'pine_tree', 'plain',
                  'plate', 'poppy', 'porcupine', 'possum', 'rabbit', 'raccoon', 'ray', 'road',
                  'rocket', 'rose', 'sea', 'seal', 'shark', 'shrew', 'skunk', 'skyscraper', 'snail',
                  'snake', 'spider', 'squirrel', 'streetcar', 'sunflower', 'sweet_pepper', 'table',
                  'tank', 'telephone', 'television', 'tiger', 'tractor', 'train', 'trout', 'tulip',
                  'turtle', 'wardrobe', 'whale', 'willow_tree', 'wolf', 'woman', 'worm')

#: Official CIFAR-100 superclass names, in coarse-label order.
CIFAR100_COARSE_NAMES = ('aquatic_mammals', 'fish', 'flowers', 'food_containers',
                         'fruit_and_vegetables', 'household_electrical_devices',
                         'household_furniture', 'insects', 'large_carnivores',
                         'large_man-made_outdoor_things', 'large_natural_outdoor_scenes',
                         'large_omnivores_and_herbivores', 'medium_mammals',
                         'non-insect_invertebrates', 'people', 'reptiles', 'small_mammals', 'trees',
                         'vehicles_1', 'vehicles_2')

CIFAR10_FOLDER = 'cifar-10-batches-py'
CIFAR100_FOLDER = 'cifar-100-python'
IMAGE_SIZE = 32


class _Py2Pickler(pickle._Pickler):
    """Protocol-2 pickler that writes ``bytes`` as Python 2 ``str`` (BINSTRING opcodes).

    Uses the pure-Python pickler of the standard library, whose per-type ``dispatch`` table
    is the documented way to change how one type is saved.
    """

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj):
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack('<i', n) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def _py2_text(value):
    """Turn the ``str`` keys/values of a (nested) dict or list into bytes (Python 2 ``str``)."""
    if isinstance(value, str):
        return value.encode('latin1')
    if isinstance(value, dict):
        return {_py2_text(k): _py2_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_py2_text(v) for v in value]
    return value


def dump_py2_pickle(obj: Any, path: str) -> str:
    """Write ``obj`` to ``path`` as the official CIFAR files are written (see module doc)."""
    with open(path, 'wb') as f:
        _Py2Pickler(f, protocol=2).dump(_py2_text(obj))
    return path


def cifar_images(labels: Sequence[int], num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Images of ``labels`` as CIFAR rows: (N, 3072) uint8, R, G, B planes row-major."""
    rows = np.empty((len(labels), 3 * IMAGE_SIZE * IMAGE_SIZE), dtype=np.uint8)
    for i, label in enumerate(labels):
        hwc = draw_class_image(int(label), num_classes, (IMAGE_SIZE, IMAGE_SIZE), rng)
        rows[i] = hwc.transpose(2, 0, 1).reshape(-1)
    return rows


def balanced_labels(n: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` labels covering the classes as evenly as possible, in random order."""
    return rng.permutation(np.arange(n) % num_classes)


def _batch(labels, num_classes, rng, names, batch_label, label_keys):
    labels = [int(v) for v in labels]
    entry = {
        'batch_label': batch_label,
        'data': cifar_images(labels, num_classes, rng),
        'filenames': [f'{names[v]}_s_{i:06d}.png' for i, v in enumerate(labels)],
    }
    for key, fn in label_keys.items():
        entry[key] = [fn(v) for v in labels]
    return entry


def _check_sizes(num_train, num_test):
    for name, value in (('num_train', num_train), ('num_test', num_test)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f'{name}={value!r} is invalid; expected a positive int')


def write_cifar10(root: str, num_train: int = 50, num_test: int = 20, seed: int = 0) -> str:
    """Write a tiny CIFAR-10 into ``root/cifar-10-batches-py``; return ``root``.

    The ``num_train`` images are split over the five data batches as evenly as possible.
    """
    _check_sizes(num_train, num_test)
    rng = np.random.default_rng(seed)
    folder = osp.join(root, CIFAR10_FOLDER)
    os.makedirs(folder, exist_ok=True)
    keys = {'labels': int}
    train = balanced_labels(num_train, 10, rng)
    for k, part in enumerate(np.array_split(train, 5), start=1):
        entry = _batch(part, 10, rng, CIFAR10_NAMES, f'training batch {k} of 5', keys)
        dump_py2_pickle(entry, osp.join(folder, f'data_batch_{k}'))
    test = balanced_labels(num_test, 10, rng)
    entry = _batch(test, 10, rng, CIFAR10_NAMES, 'testing batch 1 of 1', keys)
    dump_py2_pickle(entry, osp.join(folder, 'test_batch'))
    meta = {
        'num_cases_per_batch': int(np.ceil(num_train / 5)),
        'label_names': list(CIFAR10_NAMES),
        'num_vis': 3 * IMAGE_SIZE * IMAGE_SIZE
    }
    dump_py2_pickle(meta, osp.join(folder, 'batches.meta'))
    return root


def write_cifar100(root: str, num_train: int = 200, num_test: int = 100, seed: int = 0) -> str:
    """Write a tiny CIFAR-100 into ``root/cifar-100-python``; return ``root``."""
    _check_sizes(num_train, num_test)
    rng = np.random.default_rng(seed)
    folder = osp.join(root, CIFAR100_FOLDER)
    os.makedirs(folder, exist_ok=True)
    keys = {'fine_labels': int, 'coarse_labels': lambda v: v // 5}
    for split, n, batch_label in (('train', num_train, 'training batch 1 of 1'),
                                  ('test', num_test, 'testing batch 1 of 1')):
        labels = balanced_labels(n, 100, rng)
        entry = _batch(labels, 100, rng, CIFAR100_NAMES, batch_label, keys)
        dump_py2_pickle(entry, osp.join(folder, split))
    meta = {
        'fine_label_names': list(CIFAR100_NAMES),
        'coarse_label_names': list(CIFAR100_COARSE_NAMES)
    }
    dump_py2_pickle(meta, osp.join(folder, 'meta'))
    return root


def write_cifar(root: str, num_classes: int = 10, num_train: Optional[int] = None,
                num_test: Optional[int] = None, seed: int = 0) -> str:
    """Write a tiny CIFAR-10 (``num_classes=10``) or CIFAR-100 (``100``) under ``root``.

    Args:
        root (str): folder to write into; created if missing. Pass it as ``data_root`` (or
            ``data_prefix``) of mmpretrain's / mmstiff's ``CIFAR10`` / ``CIFAR100``.
        num_classes (int): 10 or 100.
        num_train (int, optional): training images (default 50 for 10 classes, 200 for 100).
        num_test (int, optional): test images (default 20 for 10 classes, 100 for 100).
        seed (int): seed of every random choice; equal seeds write equal bytes.

    Returns:
        str: ``root``.
    """
    if num_classes == 10:
        writer, defaults = write_cifar10, (50, 20)
    elif num_classes == 100:
        writer, defaults = write_cifar100, (200, 100)
    else:
        raise ValueError(f'num_classes={num_classes!r} is not a CIFAR variant; expected 10 or 100')
    num_train = defaults[0] if num_train is None else num_train
    num_test = defaults[1] if num_test is None else num_test
    return writer(root, num_train=num_train, num_test=num_test, seed=seed)
