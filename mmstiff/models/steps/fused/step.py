"""The fused step's host side: which passes a call takes, on which kernel set (docs/methods.md
§0, "The fused step").

:mod:`.pool` pools x_t and f in one pass and the adaptor computes Δ_t from the (B, C) means in
its module call (:mod:`.stepnet_phi`, :mod:`.se_phi`: StepNet's and SE's arithmetic in one pass
each way on kernels that have it); :mod:`.update` writes ``act(shortcut + Δ ⊙ f)``; with the
branch's last BN given, :mod:`.fold` takes it over. Under export and scripting a call is the
reference step.
"""
from typing import Optional

import torch
import torch.nn as nn

from mmstiff.utils.reference_steps import exporting
from mmstiff.utils.step_sums import StepSums
from ..base import StepAdaptor
from ..update import reference_step
from .fold import foldable_norm, folded_step
from .pool import adaptive_step
from .se_phi import se_phi_step
from .stepnet_phi import stepnet_phi_step
from .torch_kernels import TorchStepKernels
from .triton_step import HAS_TRITON, TritonStepKernels
from .update import EulerUpdate

#: the passes that take over each arithmetic an adaptor declares
#: (:attr:`~mmstiff.models.steps.StepAdaptor.fused_arithmetic`): Δ (B, C) from the means on the
#: given kernels, or None where they do not apply
TAKE_OVER = {'stepnet': stepnet_phi_step, 'se': se_phi_step}


class FusedPhi:
    """The fused step's computation of Δ_t for an adaptor, ``phi(adaptor, state, residual)``:
    Δ (B, C) from the adaptor kernels ``kernels`` where the adaptor declares an arithmetic of
    :data:`TAKE_OVER` and its passes apply, else None (the adaptor's modules compute)."""

    def __init__(self, kernels: object):
        self.kernels = kernels

    def __call__(self, adaptor: StepAdaptor, state: Optional[torch.Tensor],
                 residual: torch.Tensor) -> Optional[torch.Tensor]:
        """Δ (B, C) for ``adaptor`` from the (B, C) means of x_t (``state``; None where the adaptor
        does not read them) and of f (``residual``), through the passes :data:`TAKE_OVER` names
        for the adaptor's arithmetic; None where it declares none or the passes do not apply (the
        adaptor's modules then compute)."""
        take_over = TAKE_OVER.get(adaptor.fused_arithmetic)
        return None if take_over is None else take_over(adaptor, state, residual, self.kernels)


def phi_of(kernels: object) -> Optional[FusedPhi]:
    """The :class:`FusedPhi` of a kernel set that has adaptor kernels (``kernels.phi``)."""
    phi = getattr(kernels, 'phi', None)
    return None if phi is None else FusedPhi(phi)


def _inactive(drop_path):
    """Whether ``drop_path`` (None, ``nn.Identity`` or mmcv's ``DropPath``) leaves f as it is."""
    return drop_path is None or isinstance(drop_path, nn.Identity) or not drop_path.training \
        or getattr(drop_path, 'drop_prob', None) == 0


class FusedStep:
    """The fused step on one kernel set, called as :func:`~..update.reference_step` is.

    Args:
        kernels: the kernel set (:class:`TorchStepKernels`, a :class:`TritonStepKernels`, or
            stand-ins).
        compiled: the kernels inside ``torch.compile``: PyTorch's passes for a block with
            ``fused=True`` (the compiler fuses them into its own kernels), None (the reference
            step) for one whose kernels were only forced.
        layout (str): the block's states, ``'nchw'`` or ``'nlc'``.
    """

    def __init__(self, kernels: object, compiled: object = None, layout: str = 'nchw'):
        self.kernels, self.compiled, self.layout = kernels, compiled, layout
        self.phi = phi_of(kernels)

    @classmethod
    def on(cls, device: torch.device, kernels: object = None, compiled: bool = True,
           layout: str = 'nchw') -> 'FusedStep':
        """The fused step for a block on ``device``: on ``kernels`` if given, else Triton's
        for CUDA (with Triton installed) and PyTorch's elsewhere."""
        if kernels is None:
            cuda = torch.device(device).type == 'cuda' and HAS_TRITON
            kernels = TritonStepKernels() if cuda else TorchStepKernels
        return cls(kernels, TorchStepKernels if compiled else None, layout)

    #: the step :func:`~mmstiff.utils.reference_steps.reference_steps` puts in its place
    reference = staticmethod(reference_step)

    def __deepcopy__(self, memo):
        return self  # holds no tensor: a copied block shares its kernels

    def __call__(self, x_t: torch.Tensor, f: torch.Tensor, adaptor: Optional[nn.Module] = None,
                 act: Optional[nn.Module] = None, drop_path: Optional[nn.Module] = None,
                 shortcut: Optional[torch.Tensor] = None, norm: Optional[nn.Module] = None,
                 request: object = None, measurable: bool = True) -> torch.Tensor:
        """:func:`~..update.reference_step`'s values through the fused passes; where the block is
        recorded (``request``) and the output is the state after a step from x_t
        (``measurable``), the step gives ``request`` its
        :class:`~mmstiff.utils.step_sums.StepSums` from its own pass."""
        kernels, phi = self.kernels, self.phi
        if exporting():
            kernels = None
        elif torch.compiler.is_compiling():
            kernels, phi = self.compiled, None
        poolable = adaptor is None or getattr(adaptor, 'from_pooled', False)
        if kernels is None or not poolable:
            return reference_step(x_t, f, adaptor, act, drop_path, shortcut, norm)
        layout, shortcut = self.layout, x_t if shortcut is None else shortcut
        folds = norm is not None and adaptor is not None and _inactive(drop_path) \
            and foldable_norm(norm, f)
        if norm is not None and not folds:
            f, norm = norm(f), None
        affine = None
        if folds:
            step, affine, f = folded_step(adaptor, x_t, f, norm, layout, kernels, phi)
        else:
            step = None if adaptor is None else adaptive_step(adaptor, x_t, f, layout, kernels, phi)
            if drop_path is not None:
                f = drop_path(f)
        relu = type(act) is nn.ReLU
        state_relu = None
        if request is not None and measurable and shortcut is x_t and (act is None or relu):
            state_relu = request.state_act
            if state_relu and not relu:
                state_relu = None  # x_t is the block's activation of the shortcut: not ours
        if state_relu is None:
            out = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels, None, affine)
        else:
            out, moved, state = EulerUpdate.apply(shortcut, step, f, relu, layout, kernels,
                                                  state_relu, affine)
            request.sums.append(StepSums(moved.detach(), state.detach(), layout))
        return act(out) if act is not None and not relu else out
