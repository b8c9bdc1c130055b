"""The (B, C) column passes' Triton helpers: a program holds a block of channels over the whole
batch (the adaptors' and the folded BN's kernels). Triton itself and the launch arithmetic every
kernel file shares are in :mod:`mmstiff.utils.triton_launch`."""
from typing import Tuple

from mmstiff.utils.triton_launch import HAS_TRITON, TILE_VALUES, next_power_of_2, tl, triton

if HAS_TRITON:

    @triton.jit
    def column_tile(B, C, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr):
        """``(cs, bs, c_ok, ok)``: this program's block of channels and the whole batch's rows
        of a (B, C) tensor, the channels' mask and the tile's (:func:`column_blocks`)."""
        cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
        bs = tl.arange(0, BLOCK_B)
        c_ok = cs < C
        return cs, bs, c_ok, (bs < B)[:, None] & c_ok[None, :]
else:  # pragma: no cover - triton ships with CUDA builds of torch
    column_tile = None


def column_blocks(batch: int, channels: int) -> Tuple[int, int]:
    """``(BLOCK_B, BLOCK_C)`` of a program that holds a block of channels over the whole batch
    (:data:`~mmstiff.utils.triton_launch.TILE_VALUES` values where the batch allows): the (B, C)
    passes of the adaptors and of the folded BN."""
    block_b = next_power_of_2(batch)
    return block_b, max(1, min(next_power_of_2(channels), TILE_VALUES // block_b))


class ColumnKernels:
    """Base of the Triton kernel sets of (B, C) passes whose programs each hold a block of
    channels over the whole batch (:func:`column_blocks`); refuses to build without Triton."""

    #: the largest batch one program holds (larger batches take the PyTorch passes or modules):
    #: :data:`~mmstiff.utils.triton_launch.TILE_VALUES` (a larger batch spilled StepNet's
    #: backward to local memory: docs/benchmarks.md, "Registers and spills, compiled without a GPU")
    MAX_BATCH = TILE_VALUES

    def __init__(self):
        if not HAS_TRITON:
            raise RuntimeError(f'{type(self).__name__} needs triton, which is not installed')
