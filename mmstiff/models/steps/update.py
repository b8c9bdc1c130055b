"""The Euler update ``x_{t+1} = act(x_t + Δ_t ⊙ f)`` of a residual block (docs/methods.md §0).

:func:`apply_step` is the update itself and :func:`reference_step` the whole step a block takes
by default: the branch's last norm, the adaptor's Δ_t, drop-path, the update and the activation.
The fused step (:mod:`.fused`) computes the same values in its own passes and falls back to
:func:`reference_step`; both import it from here.
"""
from typing import Optional, Union

import torch
import torch.nn as nn

#: a step size Δ_t: a tensor broadcastable against f, or a Python scalar (a constant step)
StepSize = Union[torch.Tensor, float]


def state_dtype(shortcut: torch.Tensor, f: torch.Tensor) -> torch.dtype:
    """The dtype of ``x_{t+1}``: that of ``shortcut + f``, whatever Δ's dtype (a step size
    computed in float32 under autocast does not promote a half-precision residual stream)."""
    if shortcut.dtype == f.dtype:  # no operator call in the common case
        return f.dtype
    return torch.promote_types(shortcut.dtype, f.dtype)


def as_state_dtype(step: torch.Tensor, shortcut: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``step`` in :func:`state_dtype` (itself, without an operator call, where it is already)."""
    dtype = state_dtype(shortcut, f)
    return step if step.dtype == dtype else step.to(dtype)


def apply_step(x_t: torch.Tensor, step: StepSize, f: torch.Tensor) -> torch.Tensor:
    """One Euler update ``x_t + Δ ⊙ f`` (no activation), skipping the multiply for Δ ≡ 1.

    The update keeps the states' precision: a tensor Δ is cast to the dtype of ``x_t + f``
    (:func:`state_dtype`), so that a step size computed in float32 (a norm
    layer's output under autocast) does not turn a half-precision residual stream into float32.
    """
    if isinstance(step, float) and step == 1.0:
        return x_t + f
    if torch.is_tensor(step):
        return torch.addcmul(x_t, as_state_dtype(step, x_t, f), f)
    return x_t + step * f


def reference_step(x_t: torch.Tensor, f: torch.Tensor, adaptor: Optional[nn.Module] = None,
                   act: Optional[nn.Module] = None, drop_path: Optional[nn.Module] = None,
                   shortcut: Optional[torch.Tensor] = None, norm: Optional[nn.Module] = None,
                   request: object = None, measurable: bool = True) -> torch.Tensor:
    """``act(shortcut + Δ_t ⊙ drop_path(f))`` with ``Δ_t = adaptor(x_t, f)`` (1 without one).

    Args:
        x_t: the state the adaptor reads; also the shortcut unless ``shortcut`` is set.
        f: the residual branch output (with ``norm``: the input of its last norm layer).
        adaptor: the block's step-size adaptor, or None.
        act: the activation after the add, or None.
        drop_path: applied to f after the adaptor read it, or None.
        shortcut: the term f is added to, where it is not x_t.
        norm: the branch's last norm layer, applied to f first.
        request, measurable: what the fused step gives a recorder; the reference step gives
            nothing (the recorder reads the states).

    Returns:
        Tensor: ``x_{t+1}``.
    """
    if norm is not None:
        f = norm(f)
    step = 1.0 if adaptor is None else adaptor(x_t, f)
    if drop_path is not None:
        f = drop_path(f)
    out = apply_step(x_t if shortcut is None else shortcut, step, f)
    return out if act is None else act(out)
