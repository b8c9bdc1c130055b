"""The ``cuda`` tests: skipped where no CUDA device is present; strict float32 while they run.

Each test of this folder that needs a GPU is marked ``@pytest.mark.cuda`` (or has a ``'cuda'``
parameter marked so); the ones without the mark run their CPU variants everywhere (bfloat16
autocast on the CPU).
"""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs a CUDA device')
    for item in items:
        if item.get_closest_marker('cuda') is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def strict_float32():
    """No TF32 in float32 matrix products and convolutions, so that float32 on the GPU is
    compared with float32 on the CPU at float32 tolerances."""
    if not torch.cuda.is_available():
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
