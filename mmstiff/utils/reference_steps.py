"""A switch to the reference residual step for code that differentiates twice.

The fused step's autograd Functions (docs/methods.md §0, "The fused step") have first
derivatives only: their backward passes refuse to build a graph (:func:`first_order`). Code
that needs second derivatives runs the model inside ``reference_steps(model)``, which computes
the same values through PyTorch's own operators. Models and the analysis meet here, in the
lowest layer, so neither imports the other.
"""
import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch


@contextmanager
def reference_steps(*modules: torch.nn.Module) -> Iterator[None]:
    """Within the block, the step blocks of ``modules`` take the reference step (their
    ``take_step`` is its ``reference``, restored after); other models keep theirs."""
    blocks = [m for module in modules for m in module.modules() if 'take_step' in m.__dict__]
    saved = [m.take_step for m in blocks]
    try:
        for m in blocks:
            m.take_step = getattr(m.take_step, 'reference', m.take_step)
        yield
    finally:
        for m, step in zip(blocks, saved):
            m.take_step = step


def exporting() -> bool:
    """Whether the model is being exported or scripted (``torch.onnx.export``,
    ``torch.export``, TorchScript), where the blocks take the reference step and the attention
    layers their unfolded scales, whatever ``fused`` says."""
    return torch.jit.is_scripting() or torch.jit.is_tracing() \
        or torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting()


def first_order(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate the ``backward`` of an autograd Function that has no second derivative: a
    backward pass that builds a graph (``create_graph=True``, the first half of a double
    backward) raises a RuntimeError naming the way out instead of returning gradients whose
    own gradients would silently lack terms (``torch.autograd.function.once_differentiable``
    detaches them: a Hessian-vector product through them is zero, not an error)."""

    @functools.wraps(backward)
    def checked(ctx, *grads):
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            raise RuntimeError(
                f'{backward.__qualname__.split(".")[0]}: the fused residual step has no second '
                'derivative, and this backward pass builds a graph (create_graph=True); run '
                'the model inside mmstiff.utils.reference_steps.reference_steps(model) (the '
                "Hessian tools and hooks do), or build it with fused=False")
        return backward(ctx, *grads)

    return checked
