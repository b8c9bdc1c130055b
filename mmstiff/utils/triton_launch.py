"""Triton, where it is installed (it ships with CUDA builds of torch): ``triton``, ``tl`` (None
without it) and :data:`HAS_TRITON`, for every kernel file of the package (the fused step's, the
stiffness norms', the frequency sums'); the host-side arithmetic of their launch grids, how a
state is addressed as (B, N, C) with its own strides (:func:`as_bnc`, :func:`state_blocks`), and
where a diagnostic's kernel runs (:class:`OptionalKernel`)."""
import contextlib
import functools
import warnings
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = tl = None

#: whether Triton is importable (the fused kernels can run on CUDA)
HAS_TRITON = triton is not None

#: what a kernel's launch returns
T = TypeVar('T')


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for the launch grids, in plain Python: ``triton.cdiv`` is a
    ``ConstexprFunction``, whose call from the host costs more than the arithmetic (its cost:
    docs/benchmarks.md, "The fused residual step")."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def as_bnc(x: torch.Tensor,
           layout: str) -> Tuple[torch.Tensor, Tuple[int, int, int], Tuple[int, int, int]]:
    """``(x, (B, N, C), (stride_b, stride_n, stride_c))``: a state addressed as (B, N, C).

    ``'nchw'`` tensors whose H and W cannot be merged into one strided axis are made contiguous.
    (Called several times per launch: the shape and strides are read once each.)
    """
    shape, strides = x.shape, x.stride()
    if layout == 'nlc':
        return x, shape, strides
    if len(shape) == 4:
        batch, channels, height, width = shape
        if width == 1:
            stride_n = strides[2]
        else:
            if height > 1 and strides[2] != width * strides[3]:
                x = x.contiguous()
                strides = x.stride()
            stride_n = strides[3]
        return x, (batch, height * width, channels), (strides[0], stride_n, strides[1])
    raise ValueError(f'x has shape {tuple(shape)}; expected (B, C, H, W) for layout nchw')


#: the values a program's tile of a pass holds: with a few float32 accumulators of that size
#: (the step's backward: two) a program keeps its values in registers on sm_80 and sm_90, where
#: larger tiles spilled to local memory (docs/benchmarks.md, "Registers and spills, compiled
#: without a GPU")
TILE_VALUES = 2048


def tile_warps(rows: int, columns: int, full: int = 8) -> int:
    """The warps of a program whose tile is ``rows × columns`` (``BLOCK_N × BLOCK_C`` or
    ``BLOCK_B × BLOCK_C``): ``full`` (8) for a full tile of :data:`TILE_VALUES` values or more,
    4 below.

    The usual rule for Triton reductions (8 warps from 2048 values). With 4 warps the
    reductions over a full tile take so many registers a thread that an SM holds few of their
    warps, and some of them spilled to local memory; with 8 warps (16 for StepNet's backward)
    none spills and an SM holds more of them (docs/benchmarks.md, "Registers and spills,
    compiled without a GPU", measured with ``tools/benchmark/kernel_resources.py``).
    """
    return full if rows * columns >= TILE_VALUES else 4


@functools.lru_cache(maxsize=1024)
def state_blocks(n: int, c: int, stride_n: int, stride_c: int) -> Tuple[int, int]:
    """Tile sizes (BLOCK_N, BLOCK_C) of a pass over a (B, N, C) state, :data:`TILE_VALUES` values
    at most: long along the axis that is contiguous in memory (cached: a network launches the
    same few shapes again and again)."""
    if stride_c == 1 and stride_n != 1:  # channels innermost (tokens, channels-last)
        block_c = min(64, next_power_of_2(c))
        return min(next_power_of_2(n), TILE_VALUES // block_c), block_c
    block_n = min(1024, next_power_of_2(n))
    return block_n, max(1, min(next_power_of_2(c), TILE_VALUES // block_n))


class OptionalKernel:
    """Where a diagnostic's Triton kernel runs, and what happens when it cannot.

    The kernel runs on CUDA tensors, and on CPU tensors inside :meth:`forced` (there Triton's
    interpreter runs it when ``TRITON_INTERPRET=1`` was set before Triton was imported: the
    tests). The first launch that fails (a machine without the C compiler Triton builds its
    launcher with, a GPU it does not support) is warned about once, and the kernel is not tried
    again in this process: the caller's PyTorch operators take over, since a diagnostic must not
    stop training.

    Args:
        name (str): what the warning calls the kernel (``'the NSI sums kernel'``).
        fallback (str): what the warning says takes over.
    """

    def __init__(self, name: str, fallback: str):
        self.name, self.fallback = name, fallback
        self.is_forced = False
        #: the error of the first launch that failed (None: none failed)
        self.failure = None

    @contextlib.contextmanager
    def forced(self) -> Iterator[None]:
        """Inside it, :meth:`runs_on` holds for CPU tensors too."""
        before = self.is_forced
        self.is_forced = True
        try:
            yield
        finally:
            self.is_forced = before

    def runs_on(self, x: torch.Tensor) -> bool:
        """Whether the kernel takes tensors like ``x``: Triton is there, no launch has failed,
        and ``x`` is on a CUDA device (or the kernel is forced)."""
        return HAS_TRITON and self.failure is None and (x.is_cuda or self.is_forced)

    def attempt(self, launch: Callable[..., T], x: torch.Tensor, *args: Any) -> Optional[T]:
        """``launch(x, *args)``, or None where it fails (warned about once, with ``x``'s
        device; the kernel is not tried again)."""
        try:
            return launch(x, *args)
        except Exception as error:  # Triton's compile and launch errors have no common base
            self.failure = error
            warnings.warn(
                f'{self.name} could not run on {x.device} ({type(error).__name__}: {error}); '
                f'{self.fallback}', RuntimeWarning, stacklevel=3)
            return None
