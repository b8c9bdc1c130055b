"""Datasets mmstiff adds, and writers of tiny datasets in the real on-disk formats."""
from .cifar import CIFAR10, CIFAR100  # noqa: F401
from .stl10 import STL10  # noqa: F401
