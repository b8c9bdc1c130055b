"""``mmstiff.CocoDataset`` registered without importing mmdet.

Classification needs no mmdet, so ``import mmstiff.datasets`` must not load it. The registry
first holds :class:`LazyCocoDataset` under the name ``CocoDataset``: building it imports
:mod:`mmstiff.datasets.coco`, whose real class then takes the name over, and returns the real
dataset. Where mmdet is missing, the build fails with one line that says what to install.
"""
import importlib

from mmstiff.registry import DATASETS

_MODULE = 'mmstiff.datasets.coco'


def load_coco_dataset():
    """Import the checked COCO dataset and return its class.

    Raises:
        ImportError: mmdet is not installed; the message says how to install it.
    """
    try:
        return importlib.import_module(_MODULE).CocoDataset
    except ModuleNotFoundError as e:
        if (e.name or '').split('.')[0] == 'mmdet':
            raise ImportError('mmstiff.CocoDataset needs mmdet, which is not installed: '
                              'pip install "mmstiff[det]"') from None
        raise


@DATASETS.register_module(name='CocoDataset')
class LazyCocoDataset:
    """Stands for ``mmstiff.CocoDataset`` until the first build; see the module docstring."""

    def __new__(cls, *args, **kwargs):
        return load_coco_dataset()(*args, **kwargs)
