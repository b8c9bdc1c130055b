"""The start an adaptor was trained with, kept in its checkpoints (docs/methods.md §3).

``start='identity'`` computes ``Δ = 2 σ(z)``, ``start='paper'`` ``Δ = σ(z)``: the same weights
give another network under the other start. Every state dict records an adaptor's start in its
per-module metadata (``state_dict._metadata[prefix]['start']``), and loading it into an adaptor
of the other start is refused (:func:`check_saved_start`); checkpoints without it load as
before. An entry of another shape does not load, and the adaptor counts as not loaded
(:func:`mismatched_entries`), so the backbone gives it its start back.
"""
from typing import Any, Dict, List, Optional, Tuple

import torch.nn as nn

from mmstiff.utils.checkpoint import CheckpointError

#: the key of an adaptor's start in its state-dict metadata
START_KEY = 'start'

#: a state-dict entry of another shape: ``(key, checkpoint shape, adaptor shape)``
Mismatch = Tuple[str, Tuple[int, ...], Tuple[int, ...]]


class AdaptorStartError(CheckpointError):
    """A checkpoint entry trained with another start than the adaptor it is loaded into."""


def record_start(module: nn.Module, state_dict: Dict[str, Any], prefix: str,
                 local_metadata: Dict[str, Any]) -> None:
    """State-dict hook of an adaptor: its ``start`` into its metadata."""
    start = getattr(module, 'start', None)
    if start is not None:
        local_metadata[START_KEY] = start


def check_saved_start(adaptor: nn.Module, local_metadata: Optional[Dict[str, Any]],
                      prefix: str) -> None:
    """Refuse a state-dict entry saved by an adaptor of another ``start``.

    Raises:
        AdaptorStartError: naming the entry, both starts and what the mismatch computes.
    """
    saved = (local_metadata or {}).get(START_KEY)
    start = getattr(adaptor, 'start', None)
    if saved is None or start is None or saved == start:
        return
    formula = {'identity': 'Δ = 2σ(z)', 'paper': 'Δ = σ(z)'}
    raise AdaptorStartError(
        f"checkpoint entry {prefix.rstrip('.')!r} was trained with start={saved!r}, but the "
        f'config builds that adaptor with start={start!r}, which would compute '
        f'{formula.get(start, start)} with weights trained for {formula.get(saved, saved)}; '
        f"expected the adaptor's start={saved!r} in the config")


def mismatched_entries(adaptor: nn.Module, state_dict: Dict[str, Any],
                       prefix: str) -> List[Mismatch]:
    """``[(key, checkpoint shape, adaptor shape)]`` of the adaptor's entries in ``state_dict``
    whose shape differs from the adaptor's."""
    found = []
    own = list(adaptor.named_parameters()) + list(adaptor.named_buffers())
    for name, tensor in own:
        value = state_dict.get(prefix + name)
        if value is not None and hasattr(value, 'shape') and value.shape != tensor.shape:
            found.append((prefix + name, tuple(value.shape), tuple(tensor.shape)))
    return found
