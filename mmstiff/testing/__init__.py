"""Test data: writers of tiny datasets in the real on-disk formats.

Tests and demos point the upstream dataset configs at these folders by overriding only their
data settings, so every writer reproduces the official layout byte format, and its images
carry a learnable class signal (:mod:`.shapes`). All writers are deterministic given
``seed`` and return the root they wrote.
"""
from .cifar import write_cifar, write_cifar10, write_cifar100
from .coco import COCO_CATEGORIES, write_coco
from .imagenet import write_imagenet
from .mnist import write_mnist
from .stl10 import write_stl10

__all__ = [
    'write_cifar', 'write_cifar10', 'write_cifar100', 'write_coco', 'write_imagenet', 'write_mnist',
    'write_stl10', 'COCO_CATEGORIES'
]
