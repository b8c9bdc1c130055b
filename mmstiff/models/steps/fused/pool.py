"""The pooling pass of the fused step: the (B, C) means of x_t and f in one read, and Δ_t from
them through the adaptor's module call (docs/methods.md §0)."""
import math
from typing import Any, Optional, Sequence, Tuple, Union

import torch

from mmstiff.utils.reference_steps import first_order
from ..base import StepAdaptor, TakeOver, step_from_means
from .torch_kernels import broadcast_step


class PoolStates(torch.autograd.Function):
    """``(mean x_t, mean f)`` over the pooled axes in one pass (``mean f`` only for x_t None)."""

    @staticmethod
    def forward(ctx, state: Optional[torch.Tensor], residual: torch.Tensor, layout: str,
                kernels: Any) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        pooled, pooled_f = kernels.pool(state, residual, layout)
        ctx.layout = layout
        ctx.shapes = (None if state is None else state.shape), residual.shape
        return pooled_f if pooled is None else (pooled, pooled_f)

    @staticmethod
    @first_order
    def backward(ctx, *grads: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        shapes = [shape for shape in ctx.shapes if shape is not None]
        expanded = [_spread(grad, shape, ctx.layout) for grad, shape in zip(grads, shapes)]
        if ctx.shapes[0] is None:
            return None, expanded[0], None, None
        return expanded[0], expanded[1], None, None


def pooled_count(shape: Sequence[int], layout: str) -> int:
    """N, the values of a state of ``shape`` that one (b, c) mean pools."""
    return shape[1] if layout == 'nlc' else math.prod(shape[2:])


def broadcast_pooled(grad: torch.Tensor, shape: Sequence[int], layout: str) -> torch.Tensor:
    """A (B, C) gradient broadcast over the pooled axes of a state of ``shape`` (a view)."""
    return broadcast_step(grad, shape, layout).expand(shape)


def _spread(grad, shape, layout):
    """The gradient of a mean: ``grad / N`` broadcast over the pooled axes (a view)."""
    return broadcast_pooled(grad * (1.0 / pooled_count(shape, layout)), shape, layout)


def adaptive_step(adaptor: StepAdaptor, x_t: torch.Tensor, f: torch.Tensor, layout: str,
                  kernels: object, phi: Optional[TakeOver] = None) -> torch.Tensor:
    """Δ_t (B, C) of a pooled-state adaptor from one pooling pass, through the adaptor's own
    module call (its hooks see Δ_t in the adaptor's shape); ``phi`` computes Δ_t in the
    fused step's passes where it can (:func:`~..base.step_from_means`)."""
    if adaptor.pools_state:
        state, residual = PoolStates.apply(x_t, f, layout, kernels)
    else:
        state, residual = None, PoolStates.apply(None, f, layout, kernels)
    step = step_from_means(adaptor, state, residual, phi)
    return step.reshape(f.shape[0], -1)
