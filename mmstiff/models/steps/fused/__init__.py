"""The fused residual step, taken by a block with ``fused=True`` and imported only then
(docs/methods.md §0, "The fused step"; its figures: docs/benchmarks.md).

One module per pass, each with its autograd Function and its PyTorch passes, beside the Triton
kernels of the same pass: :mod:`.pool`, :mod:`.fold`, :mod:`.update`, :mod:`.stepnet_phi`,
:mod:`.se_phi`; :mod:`.step` chooses the passes of a call.
"""
from .step import FusedPhi, FusedStep
from .torch_kernels import TorchStepKernels
from .triton_step import HAS_TRITON, TritonStepKernels

__all__ = ['FusedStep', 'FusedPhi', 'TorchStepKernels', 'TritonStepKernels', 'HAS_TRITON']
