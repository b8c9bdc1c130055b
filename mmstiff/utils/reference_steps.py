"""A switch to the reference residual step for code that differentiates twice.

The fused step's autograd Functions (docs/methods.md §0, "The fused step") have first
derivatives only: their backward passes are kernels, and the statistics they save (the pooled
means, the folded BN's moments) carry no graph. A Hessian-vector product through them would
lose the second-order terms, so their backward passes refuse to build a graph
(:func:`first_order`), and code that needs second derivatives runs the blocks' reference step
inside :func:`reference_steps` (every ``fused`` choice alike), which computes the same values
through PyTorch's own operators.
Models and the analysis meet here, in the lowest layer, so neither imports the other.
"""
import functools
from contextlib import contextmanager

import torch

_DEPTH = [0]  # the enclosing reference_steps blocks


@contextmanager
def reference_steps():
    """Within the block, every residual step of mmstiff's backbones is the reference step."""
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1


def reference_steps_forced():
    """Whether a :func:`reference_steps` block is open."""
    return _DEPTH[0] > 0


def first_order(backward):
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
                'the model inside mmstiff.utils.reference_steps.reference_steps() (the '
                "Hessian tools and hooks do), or build it with fused=False")
        return backward(ctx, *grads)

    return checked
