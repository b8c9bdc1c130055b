"""The error of an unsupported ``depth``, of the same types upstream and mmstiff raise.

mmpretrain's and mmdet's ResNets raise ``KeyError`` for a depth they do not have; mmstiff
raises ``ValueError`` for every bad argument. :class:`UnsupportedDepthError` is both, so code
written against either (``except KeyError`` around an upstream ResNet, ``except ValueError``
around mmstiff) catches it, and its ``str()`` is the plain message (a ``KeyError`` alone
would print it quoted).
"""
from typing import Collection

from mmstiff.errors import MmstiffError


class UnsupportedDepthError(KeyError, ValueError, MmstiffError):
    """``depth`` is not one the backbone can build (a ``KeyError`` and a ``ValueError``)."""

    def __str__(self) -> str:
        return ValueError.__str__(self)


def check_depth(depth: int, supported: Collection[int], owner: str) -> int:
    """``depth`` if it is one of ``supported``; else :class:`UnsupportedDepthError` naming
    ``owner`` (the backbone) and the depths it supports."""
    if isinstance(depth, bool) or depth not in tuple(supported):
        raise UnsupportedDepthError(f'depth={depth!r} is not supported by {owner}; expected '
                                    f'one of {tuple(supported)}')
    return depth
