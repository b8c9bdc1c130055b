"""Triton, where it is installed (it ships with CUDA builds of torch): ``triton``, ``tl`` (None
without it) and :data:`HAS_TRITON`, for the kernel files of the fused step; and the host-side
arithmetic of their launch grids."""
try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = tl = None

#: whether Triton is importable (the fused kernels can run on CUDA)
HAS_TRITON = triton is not None


def cdiv(a, b):
    """``ceil(a / b)`` for the launch grids, in plain Python: ``triton.cdiv`` is a
    ``ConstexprFunction``, whose call from the host costs microseconds per launch."""
    return -(-a // b)


def next_power_of_2(n):
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def column_blocks(batch, channels):
    """``(BLOCK_B, BLOCK_C)`` of a program that holds a block of channels over the whole batch
    (about 4096 values): the (B, C) passes of the adaptors and of the folded BN."""
    block_b = next_power_of_2(batch)
    return block_b, max(1, min(next_power_of_2(channels), 4096 // block_b))
