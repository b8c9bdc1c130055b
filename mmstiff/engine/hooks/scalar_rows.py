"""The rows of scalars a diagnostics hook writes: batched reductions and means over ranks.

A recorded iteration leaves a :class:`RecordedIteration`; many of them are summarised together
(:class:`BatchedReductions`: one stacked call per group of equal shapes, one transfer to the
host) and averaged over the ranks in one ``all_reduce`` (docs/diagnostics.md, "How they run").
"""
import math
from collections import OrderedDict
from typing import Callable, Dict, List, NamedTuple, Sequence

import torch
from mmengine.dist import all_reduce, get_world_size


class RankMeans(NamedTuple):
    """One row's scalars averaged over the ranks.

    Attributes:
        means (OrderedDict[str, float]): the mean of each name with at least one finite value.
        counts (dict[str, int]): for every name, the number of ranks whose value was finite.
    """
    means: Dict[str, float]
    counts: Dict[str, int]


class RecordedIteration(NamedTuple):
    """What a recorded iteration leaves until its row is written.

    Attributes:
        step (int): the step it is logged at: its 1-based training iteration
            (``runner.iter + 1``), also logged as ``iter``.
        epoch (int): its 1-based epoch (``runner.epoch + 1``; 1 throughout an
            iteration-based loop, whose ``runner.epoch`` MMEngine keeps at 0).
        outputs (dict[str, OrderedDict]): each recorder's outputs, by recorder role.
    """
    step: int
    epoch: int
    outputs: Dict[str, dict]


class ScalarRow(NamedTuple):
    """The scalars of one recorded iteration, to be written at ``step`` (its ``iter``) with
    its ``epoch``."""
    step: int
    epoch: int
    scalars: Dict[str, float]


class BatchedReductions:
    """Reductions of many small tensors (a few per step and recorded iteration), computed with
    one stacked call per group of equal shapes and brought to the host in one transfer.

    :meth:`add` registers ``reduce`` of a tensor and returns the index of its value in the list
    :meth:`compute` returns; the tensors stay where they are (the model's device) until then,
    so a recorded iteration costs no synchronisation with the device.
    """

    def __init__(self):
        self._groups = OrderedDict()  # (reduce, shape, dtype, device) -> (tensors, indices)
        self._count = 0

    def add(self, tensor: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor]) -> int:
        """Register ``reduce(tensor)``; ``reduce`` maps a stack ``(k, *tensor.shape)`` to ``k``
        values (``(k,)``). Returns the value's index."""
        key = (reduce, tuple(tensor.shape), tensor.dtype, tensor.device)
        tensors, indices = self._groups.setdefault(key, ([], []))
        tensors.append(tensor)
        indices.append(self._count)
        self._count += 1
        return self._count - 1

    def _reduced(self):
        """``(values, order)``: every group's values, concatenated (float64, on the device),
        and the index each of them was added under."""
        parts, order = [], []
        for (reduce, *_), (tensors, indices) in self._groups.items():
            parts.append(reduce(torch.stack(tensors)).reshape(-1).double())
            order.extend(indices)
        if len({part.device for part in parts}) > 1:
            parts = [part.cpu() for part in parts]
        return torch.cat(parts), order

    def compute(self) -> List[float]:
        """Every registered value, as Python floats in the order they were added."""
        if not self._groups:
            return []
        flat, order = self._reduced()
        values = [math.nan] * self._count
        for index, value in zip(order, flat.tolist()):  # the one transfer
            values[index] = value
        return values

    def compute_on_device(self) -> List[torch.Tensor]:
        """Every registered value as a 0-d float64 tensor where the tensors are, in the order
        they were added: the same computation, without the transfer."""
        if not self._groups:
            return []
        flat, order = self._reduced()
        values = [None] * self._count
        for index, value in zip(order, flat.unbind()):
            values[index] = value
        return values


def reduce_scalars_across_ranks(scalars: Dict[str, float]) -> RankMeans:
    """Mean of each scalar over the ranks that have a finite value.

    Args:
        scalars (dict[str, float]): this rank's values; every rank must pass the same names
            (they come from the model's structure, so they do).

    Returns:
        RankMeans: ``(means, counts)``, the means of the names with at least one finite value,
        and for every name the number of ranks whose value was finite.
    """
    return reduce_rows_across_ranks([scalars])[0]


def reduce_rows_across_ranks(rows: Sequence[Dict[str, float]]) -> List[RankMeans]:
    """:func:`reduce_scalars_across_ranks` of several rows (recorded iterations) with one
    ``all_reduce``, a :class:`RankMeans` per row; every rank must pass the same rows with the
    same names."""
    keys = [(i, name) for i, row in enumerate(rows) for name in sorted(row)]
    if get_world_size() == 1:
        values = [float(rows[i][name]) for i, name in keys]
        counts = [int(math.isfinite(v)) for v in values]
        sums = [v if c else 0.0 for v, c in zip(values, counts)]
    else:
        values = torch.tensor([float(rows[i][name]) for i, name in keys], dtype=torch.float64)
        finite = torch.isfinite(values)
        packed = torch.stack(
            [torch.where(finite, values, torch.zeros_like(values)),
             finite.double()])
        all_reduce(packed, op='sum')
        sums = packed[0].tolist()
        counts = [int(round(c)) for c in packed[1].tolist()]
    reduced = [RankMeans(OrderedDict(), {}) for _ in rows]
    for (i, name), total, count in zip(keys, sums, counts):
        row = reduced[i]
        row.counts[name] = count
        if count > 0:
            row.means[name] = total / count
    return reduced
