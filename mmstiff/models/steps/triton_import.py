"""Triton, where it is installed (it ships with CUDA builds of torch): ``triton``, ``tl`` (None
without it) and :data:`HAS_TRITON`, for the kernel files of the fused step; and the host-side
arithmetic of their launch grids."""
import functools

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = tl = None

#: whether Triton is importable (the fused kernels can run on CUDA)
HAS_TRITON = triton is not None

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


def cdiv(a, b):
    """``ceil(a / b)`` for the launch grids, in plain Python: ``triton.cdiv`` is a
    ``ConstexprFunction``, whose call from the host costs microseconds per launch."""
    return -(-a // b)


def next_power_of_2(n):
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=1024)
def column_blocks(batch, channels):
    """``(BLOCK_B, BLOCK_C)`` of a program that holds a block of channels over the whole batch
    (about 4096 values): the (B, C) passes of the adaptors and of the folded BN (cached)."""
    block_b = next_power_of_2(batch)
    return block_b, max(1, min(next_power_of_2(channels), 4096 // block_b))


class ColumnKernels:
    """Base of the Triton kernel sets of (B, C) passes whose programs each hold a block of
    channels over the whole batch (:func:`column_blocks`); refuses to build without Triton."""

    #: the largest batch one program holds (larger batches take the PyTorch passes or modules)
    MAX_BATCH = 4096

    def __init__(self):
        if not HAS_TRITON:
            raise RuntimeError(f'{type(self).__name__} needs triton, which is not installed')
