"""Datasets mmstiff adds, and the format checks of the datasets it reads from disk."""
from .cifar import CIFAR10, CIFAR100  # noqa: F401
from .lazy_coco import LazyCocoDataset  # noqa: F401  (imports mmdet when built)
from .mnist import MNIST, FashionMNIST  # noqa: F401
from .stiff_flow import StiffFlowDataset
from .stl10 import STL10  # noqa: F401

__all__ = [
    'CIFAR10', 'CIFAR100', 'LazyCocoDataset', 'MNIST', 'FashionMNIST', 'StiffFlowDataset', 'STL10'
]
