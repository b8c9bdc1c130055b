"""The full-size passes of the fused step in PyTorch (docs/methods.md §0, "The fused step"):
the fused step on the CPU and the reference of the Triton kernels (:mod:`.triton_step`).

``pool`` (the (B, C) means of x_t and f), ``moments`` (with y's variances, for the folded BN,
:mod:`.fold`) and ``moments_backward``, ``step`` (``act(shortcut + Δ ⊙ f)``, with
``norm=(a, b)``: f is ``a ⊙ y + b``), ``measured_step`` (``step`` and the (B, C) sums of squares
of ``x_{t+1} - x_t`` and x_t a recorder reads) and ``step_backward``. Every kernel set takes
``'nchw'`` (B, C, H, W) or ``'nlc'`` (B, N, C) tensors and (B, C) step sizes; this one has no
``phi``: on the CPU the adaptors' modules compute their (B, C) arithmetic.
"""
from typing import Optional, Sequence, Tuple, Union

import torch

from mmstiff.utils.layout import POOLED_AXES, pool_state
from ..update import as_state_dtype, state_dtype  # noqa: F401 (the kernel sets' dtype rule)

#: the folded norm's ``(a, b)``, each (C,) float32: f is ``a ⊙ y + b`` (:mod:`.fold`)
Affine = Tuple[torch.Tensor, torch.Tensor]
#: what ``measured_step`` returns: ``(out, moved, state)``, the sums (B, C) float32
Measured = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: the last of ``step_backward``'s results: the step's gradient or None (not asked for, or
#: Δ ≡ 1); with ``norm``, ``(grad of step or None, parts)``, or None where it was not asked for
StepGrad = Union[torch.Tensor, Tuple[Optional[torch.Tensor], torch.Tensor], None]
#: what ``step_backward`` returns: ``(grad of shortcut, grad of f (of y with norm), StepGrad)``
StepGrads = Tuple[torch.Tensor, torch.Tensor, StepGrad]


def wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 where it is in half precision (float16, bfloat16); itself otherwise."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def folded_grads(step: Optional[torch.Tensor], scale: torch.Tensor, shift: torch.Tensor,
                 s_gy: torch.Tensor,
                 s_g: torch.Tensor) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    """``(grad of Δ or None, Δ ⊙ Σ g' ⊙ y, Δ ⊙ Σ g')`` of the step ``x_t + Δ ⊙ (a ⊙ y + b)``
    (the folded norm) from the (B, C) sums over the pooled axes ``s_gy = Σ g' ⊙ y`` and
    ``s_g = Σ g'`` (``g'`` the gradient after the activation); the last two, summed over the
    batch, are the gradients of a and b. Δ None: Δ ≡ 1, no gradient of it."""
    if step is None:
        return None, s_gy, s_g
    grad_step = torch.addcmul(shift * s_g, scale, s_gy).to(step.dtype)
    return grad_step, wide(step) * s_gy, wide(step) * s_g


def broadcast_step(step: torch.Tensor, like: Union[torch.Tensor, Sequence[int]],
                   layout: str) -> torch.Tensor:
    """A (B, C) tensor viewed as broadcastable against the state ``like`` of ``layout`` (a
    tensor or its shape)."""
    if layout == 'nlc':
        return step.view(step.shape[0], 1, step.shape[1])
    rank = like.dim() if torch.is_tensor(like) else len(like)
    return step.view(step.shape[0], step.shape[1], *([1] * (rank - 2)))


def broadcast_channels(values: torch.Tensor, like: torch.Tensor, layout: str) -> torch.Tensor:
    """A (C,) tensor viewed as broadcastable against the state ``like`` of ``layout``."""
    if layout == 'nlc':
        return values.view(1, 1, -1)
    return values.view(1, -1, *([1] * (like.dim() - 2)))


def _step_affine(step, norm, like, layout):
    """``Δ ⊙ a`` and ``Δ ⊙ b`` of ``norm=(a, b)``, float32, broadcastable against ``like``."""
    if step is None:
        return tuple(broadcast_channels(v, like, layout) for v in norm)
    step = wide(step)
    return tuple(broadcast_step(step * v, like, layout) for v in norm)


class TorchStepKernels:
    """The passes of a residual step as PyTorch operations (the reference kernel set)."""

    name = 'torch'

    @staticmethod
    def pool(state: Optional[torch.Tensor], residual: torch.Tensor,
             layout: str) -> Tuple[Optional[torch.Tensor], torch.Tensor]:
        """The (B, C) means of ``state`` (None: not pooled, None returned) and ``residual``."""
        pooled = None if state is None else pool_state(state, layout, keepdim=False)
        return pooled, pool_state(residual, layout, keepdim=False)

    @staticmethod
    def moments(state: Optional[torch.Tensor], y: torch.Tensor,
                layout: str) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
        """``(mean x_t or None, mean y, var y)``: the (B, C) mean of ``state`` (None: not pooled)
        and the float32 mean and population variance of ``y`` over the pooled axes."""
        pooled = None if state is None else pool_state(state, layout, keepdim=False)
        axes = POOLED_AXES[layout]
        y = wide(y)
        # sums about each (b, c)'s first value, as the Triton kernel (no cancellation where the
        # mean is large against the spread); a tenth of var_mean's time on the CPU
        shift = y[:, :1] if layout == 'nlc' else y[:, :, :1, :1]
        moved = y - shift
        mean = moved.mean(dim=axes)
        var = (moved.square_().mean(dim=axes) - mean.square()).clamp_(min=0)
        return pooled, mean + shift.flatten(1), var

    @staticmethod
    def moments_backward(grad: torch.Tensor, y: torch.Tensor, base: torch.Tensor,
                         slope: Optional[torch.Tensor], layout: str) -> torch.Tensor:
        """y's whole gradient: ``grad``, what y receives from the step, plus its gradient
        through its (B, C) moments, ``c0 + c1 ⊙ y`` with c0 ``base`` and c1 ``slope`` (B, C)
        (None: c0 alone, the variances not used)."""
        total = grad + broadcast_step(base, y, layout)
        return total if slope is None else total.addcmul_(y, broadcast_step(slope, y, layout))

    @staticmethod
    def step(shortcut: torch.Tensor, step: Optional[torch.Tensor], f: torch.Tensor, relu: bool,
             layout: str, norm: Optional[Affine] = None) -> torch.Tensor:
        """``act(shortcut + Δ ⊙ f)``; ``step`` (B, C) or None (Δ ≡ 1), act ReLU or identity;
        ``norm=(a, b)``: f is ``a ⊙ y + b`` of the ``f`` given."""
        if norm is not None:
            dtype = state_dtype(shortcut, f)
            scale, shift = _step_affine(step, norm, f, layout)
            out = torch.addcmul(shift, wide(f), scale).add_(shortcut).to(dtype)
            return out.relu_() if relu else out
        if step is None:
            out = shortcut + f
        else:
            step = as_state_dtype(step, shortcut, f)
            out = torch.addcmul(shortcut, broadcast_step(step, f, layout), f)
        return out.relu_() if relu else out

    @classmethod
    def measured_step(cls, shortcut: torch.Tensor, step: Optional[torch.Tensor], f: torch.Tensor,
                      relu: bool, layout: str, state_relu: bool,
                      norm: Optional[Affine] = None) -> Measured:
        """``(out, moved, state)``: :meth:`step`'s output and the (B, C) float32 sums over the
        pooled axes of ``(out - x_t)²`` and ``x_t²``, ``x_t = relu(shortcut)`` if
        ``state_relu``, else the shortcut."""
        out = cls.step(shortcut, step, f, relu, layout, norm)
        state = shortcut.float()
        if state_relu:
            state = state.relu()
        moved = out.float() - state
        axes = POOLED_AXES[layout]
        return out, moved.square_().sum(dim=axes), state.square().sum(dim=axes)

    @staticmethod
    def step_backward(grad: torch.Tensor, out: Optional[torch.Tensor], f: Optional[torch.Tensor],
                      step: Optional[torch.Tensor], relu: bool, layout: str, need_step_grad: bool,
                      norm: Optional[Affine] = None) -> StepGrads:
        """``(grad of shortcut, grad of f, grad of step or None)`` from the output's ``grad``;
        ``out`` is read only for the ReLU's mask. With ``norm=(a, b)``: the gradient of y (the
        ``f`` given) and, for ``need_step_grad``, ``(grad of step or None, parts)`` in place of
        the step's gradient, ``parts`` the (2, B, C) float32 stack of ``Δ ⊙ Σ g' ⊙ y`` and
        ``Δ ⊙ Σ g'``: summed over the batch, the gradients of a and b (:func:`folded_grads`)."""
        if relu:
            grad = torch.ops.aten.threshold_backward(grad, out, 0)
        if norm is not None:
            factor, _ = _step_affine(step, norm, f, layout)
            grad_y = (wide(grad) * factor).to(f.dtype)
            parts = None
            if need_step_grad:
                axes, g32 = POOLED_AXES[layout], wide(grad)
                grad_step, *per_sample = folded_grads(step, *norm, (g32 * wide(f)).sum(dim=axes),
                                                      g32.sum(dim=axes))
                parts = grad_step, torch.stack(per_sample)
            return grad, grad_y, parts
        grad_f = grad
        if step is not None:
            scale = step if step.dtype == grad.dtype else step.to(grad.dtype)
            grad_f = grad * broadcast_step(scale, f, layout)
        grad_step = None
        if need_step_grad:
            low = grad.dtype in (torch.float16, torch.bfloat16)
            grad_step = (grad * f).sum(dim=POOLED_AXES[layout],
                                       dtype=torch.float32 if low else None).to(step.dtype)
        return grad, grad_f, grad_step
