"""``mmstiff.CocoDataset`` registered without importing mmdet.

Classification needs no mmdet, so ``import mmstiff.datasets`` must not load it. The registry
first holds :class:`LazyCocoDataset` under the name ``CocoDataset``: building it imports
:mod:`mmstiff.datasets.coco`, whose real class then takes the name over, and returns the real
dataset. Where mmdet is missing or cannot run (no mmcv ops, an mmcv outside its range), the
build fails with one line that says what to install
(:func:`mmstiff.dependencies.missing_dependency`).
"""
from mmstiff.dependencies import import_detection_class
from mmstiff.registry import DATASETS

_MODULE = 'mmstiff.datasets.coco'


def load_coco_dataset() -> type:
    """Import the checked COCO dataset and return its class.

    Raises:
        ImportError: mmdet is missing or cannot run here; the message says what to install.
    """
    return import_detection_class(_MODULE, 'CocoDataset', 'mmstiff.CocoDataset')


@DATASETS.register_module(name='CocoDataset')
class LazyCocoDataset:
    """Stands for ``mmstiff.CocoDataset`` until the first build; see the module docstring."""

    def __new__(cls, *args, **kwargs):
        return load_coco_dataset()(*args, **kwargs)
