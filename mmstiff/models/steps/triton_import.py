"""Triton, where it is installed (it ships with CUDA builds of torch): ``triton``, ``tl`` (None
without it) and :data:`HAS_TRITON`, for the kernel files of the fused step."""
try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = tl = None

#: whether Triton is importable (the fused kernels can run on CUDA)
HAS_TRITON = triton is not None
