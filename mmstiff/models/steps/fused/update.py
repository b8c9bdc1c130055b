"""The Euler update pass of the fused step: ``act(shortcut + Δ ⊙ f)`` written in one pass and
its backward in one more (docs/methods.md §0)."""
from typing import Any, Optional, Tuple, Union

import torch

from mmstiff.utils.reference_steps import first_order

#: what :class:`EulerUpdate` returns: the output, or ``(out, moved, state)`` with ``state_relu``
Updated = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
#: the gradients of the inputs of :class:`EulerUpdate` (None: no gradient)
UpdateGrads = Tuple[Optional[torch.Tensor], ...]


class EulerUpdate(torch.autograd.Function):
    """``act(shortcut + Δ ⊙ f)`` with Δ (B, C) (None: Δ ≡ 1) and act ReLU or identity.

    With ``state_relu`` given (True or False) it returns ``(out, moved, state)``, the (B, C)
    sums of squares of ``measured_step`` besides the output (not differentiable). With
    ``affine`` given, the folded norm's ``(a, b)`` per sample (2, B, C), a broadcast of (2, C)
    (:class:`NormMoments`), f is ``a ⊙ y + b`` of the y given as ``f`` (:mod:`.fold`),
    differentiable in both; affine's gradient is the per-sample parts (2, B, C) the step's
    backward writes, whose sums over the batch are a's and b's gradients.
    """

    @staticmethod
    def forward(ctx, shortcut: torch.Tensor, step: Optional[torch.Tensor], f: torch.Tensor,
                relu: bool, layout: str, kernels: Any, state_relu: Optional[bool] = None,
                affine: Optional[torch.Tensor] = None) -> Updated:
        norm = None if affine is None else affine[:, 0].unbind(0)
        if state_relu is None:
            out = kernels.step(shortcut, step, f, relu, layout, norm=norm)
        else:
            out, moved, state = kernels.measured_step(shortcut, step, f, relu, layout, state_relu,
                                                      norm=norm)
            ctx.mark_non_differentiable(moved, state)
        ctx.relu, ctx.layout, ctx.kernels = relu, layout, kernels
        ctx.has_step, ctx.folded = step is not None, norm is not None
        kept_f = f if ctx.has_step or ctx.folded else None
        ctx.save_for_backward(out if relu else None, kept_f, step, affine)
        return out if state_relu is None else (out, moved, state)

    @staticmethod
    @first_order
    def backward(ctx, grad: torch.Tensor, *unused: torch.Tensor) -> UpdateGrads:
        out, f, step, affine = ctx.saved_tensors
        if ctx.folded:
            need_sums = ctx.needs_input_grad[1] or ctx.needs_input_grad[7]
            grad_x, grad_f, parts = ctx.kernels.step_backward(grad, out, f, step, ctx.relu,
                                                              ctx.layout, need_sums,
                                                              norm=affine[:, 0].unbind(0))
            grad_step, per_sample = (None, None) if parts is None else parts
            return grad_x, grad_step, grad_f, None, None, None, None, per_sample
        need_step_grad = ctx.has_step and ctx.needs_input_grad[1]
        grad_x, grad_f, grad_step = ctx.kernels.step_backward(grad, out, f, step, ctx.relu,
                                                              ctx.layout, need_step_grad)
        return grad_x, grad_step, grad_f, None, None, None, None, None
