"""Which layers of a backbone a per-layer switch selects (``None``, ``'all'`` or indices)."""
from typing import FrozenSet

from mmstiff.utils.checks import check_indices
from .types import LayerSelection


def select_layers(field: str, value: LayerSelection, num_layers: int) -> FrozenSet[int]:
    """Turn ``None`` | ``'all'`` | a sequence of layer indices into a frozenset of indices.

    Negative indices count from the end (``-1`` is the last layer).

    Raises:
        ValueError: naming ``field``, the bad value and what is expected.
    """
    if value is None:
        return frozenset()
    if isinstance(value, str) and value == 'all':
        return frozenset(range(num_layers))
    return check_indices(field, value, num_layers, what='layers', alternatives=('None', "'all'"))
