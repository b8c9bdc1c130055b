"""CIFAR-10 / CIFAR-100 that verify the files' format instead of their md5 sums.

Every file is unpickled with a restricted unpickler before mmpretrain reads it; a bad file
fails naming the file, the field and what was expected (docs/reliability.md, "Bad data").
"""
from typing import List

import numpy as np
from mmengine.fileio import exists, get, join_path
from mmpretrain.datasets import CIFAR10 as _UpstreamCIFAR10
from mmpretrain.datasets import CIFAR100 as _UpstreamCIFAR100

from mmstiff.registry import DATASETS
from .safe_pickle import UnsafePickleError, loads_numpy_data

#: Values per CIFAR image row: 3 planes of 32 x 32.
ROW_LENGTH = 3 * 32 * 32


def load_cifar_pickle(path: str) -> dict:
    """Unpickle a CIFAR file as mmpretrain does (``encoding='latin1'``), but building only
    plain data and numpy arrays; it must be a dict."""
    try:
        entry = loads_numpy_data(get(path), encoding='latin1')
    except UnsafePickleError as exc:
        raise ValueError(f'{path} is not a CIFAR pickle file: {exc}') from None
    except Exception as exc:  # any unpickling failure means a bad file
        raise ValueError(f'{path} is not a CIFAR pickle file: unpickling failed with '
                         f'{type(exc).__name__}: {exc}') from exc
    if not isinstance(entry, dict):
        raise ValueError(f'{path} must unpickle to a dict; got {type(entry).__name__}')
    return entry


def _field(entry, path, key):
    if key not in entry:
        raise ValueError(f'{path} has no field {key!r}; expected the fields '
                         f'{sorted(map(str, entry))} to include it')
    return entry[key]


def check_cifar_batch(entry: dict, path: str, label_key: str, num_classes: int) -> int:
    """Check one unpickled CIFAR batch; return the number of images.

    Args:
        entry (dict): the unpickled file.
        path (str): the file, for messages.
        label_key (str): ``'labels'`` (CIFAR-10) or ``'fine_labels'`` (CIFAR-100).
        num_classes (int): labels must lie in ``[0, num_classes)``.
    """
    data = _field(entry, path, 'data')
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != ROW_LENGTH:
        desc = (f'{data.dtype} array of shape {data.shape}'
                if isinstance(data, np.ndarray) else type(data).__name__)
        raise ValueError(f"{path}: field 'data' must be a uint8 array of shape "
                         f'(N, {ROW_LENGTH}); got {desc}')
    labels = _field(entry, path, label_key)
    try:
        labels = np.asarray(labels)
    except Exception:  # ragged or odd objects
        labels = np.asarray([], dtype=object)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise ValueError(f'{path}: field {label_key!r} must be a list of ints; got '
                         f'{type(entry[label_key]).__name__} of dtype {labels.dtype}')
    if len(labels) != len(data):
        raise ValueError(f'{path}: field {label_key!r} has {len(labels)} labels but '
                         f"'data' has {len(data)} rows; expected one label per row")
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if bad.size:
        raise ValueError(f'{path}: field {label_key!r} holds {bad[0]}, out of range; '
                         f'expected labels in [0, {num_classes})')
    return len(data)


def check_cifar_meta(entry: dict, path: str, key: str, num_classes: int) -> List[str]:
    """Check an unpickled CIFAR meta file; return its list of class names."""
    names = _field(entry, path, key)
    if not isinstance(names, (list, tuple)) or len(names) != num_classes \
            or not all(isinstance(n, str) for n in names):
        raise ValueError(f'{path}: field {key!r} must be a list of {num_classes} class '
                         f'names; got {names!r:.200}')
    return list(names)


class _FormatChecked:
    """Replaces the md5 checks of mmpretrain's CIFAR datasets by format checks."""

    label_key = None
    num_classes = None

    def __init__(self, *args, download=False, **kwargs):
        super().__init__(*args, download=download, **kwargs)

    def _path(self, filename):
        return join_path(self.data_prefix['root'], self.base_folder, filename)

    def _missing_files(self):
        names = [f for f, _ in self.train_list + self.test_list] + [self.meta['filename']]
        return [self._path(name) for name in names if not exists(self._path(name))]

    def _split_files(self):
        # mmpretrain >= 1.0 chooses by ``split``; older versions by ``test_mode``.
        split = getattr(self, 'split', 'test' if self.test_mode else 'train')
        return self.train_list if split == 'train' else self.test_list

    def _check_integrity(self):
        """Whether every file exists (mmpretrain's hook, called around downloads)."""
        return not self._missing_files()

    def check_format(self):
        """Check every file of the current split; raise ``ValueError`` on the first bad one,
        or when the split holds no image."""
        total = 0
        paths = [self._path(filename) for filename, _ in self._split_files()]
        for path in paths:
            total += check_cifar_batch(
                load_cifar_pickle(path), path, self.label_key, self.num_classes)
        if not total:
            split = getattr(self, 'split', 'test' if self.test_mode else 'train')
            raise ValueError(f'{type(self).__name__} split {split!r} holds no image: '
                             f"{', '.join(paths)} have 0 rows of 'data'; expected at least one")

    def load_data_list(self):
        missing = self._missing_files()
        if missing and not self.download:
            raise FileNotFoundError(
                f'{type(self).__name__}: missing {", ".join(missing)}. Download {self.url} '
                f'and extract it into {self.data_prefix["root"] or "."} (it creates '
                f'{self.base_folder}/), pass download=True to let mmpretrain download it, or '
                'write tiny test data with mmstiff.testing.write_cifar().')
        if not missing:
            self.check_format()
        return super().load_data_list()

    def _load_meta(self):
        """Read class names from the meta file, checking its format instead of its md5.

        Called when no class names are configured (e.g. ``metainfo=dict(classes=None)``).
        """
        path = self._path(self.meta['filename'])
        names = check_cifar_meta(load_cifar_pickle(path), path, self.meta['key'], self.num_classes)
        if self._metainfo.get('classes') is None:
            self._metainfo['classes'] = names


@DATASETS.register_module()
class CIFAR10(_FormatChecked, _UpstreamCIFAR10):
    """mmpretrain's ``CIFAR10`` with format checks instead of md5 checks (module doc).

    Same arguments as :class:`mmpretrain.datasets.CIFAR10`, except that ``download``
    defaults to ``False``.
    """

    label_key = 'labels'
    num_classes = 10


@DATASETS.register_module()
class CIFAR100(_FormatChecked, _UpstreamCIFAR100):
    """mmpretrain's ``CIFAR100`` with format checks instead of md5 checks (module doc).

    Same arguments as :class:`mmpretrain.datasets.CIFAR100`, except that ``download``
    defaults to ``False``.
    """

    label_key = 'fine_labels'
    num_classes = 100
