"""The residual step ``x_{t+1} = act(x_t + Δ_t ⊙ f)`` and how a block holds it (docs/design.md).

A step block (:class:`StepBlock`) computes its branch f and calls ``self.take_step``:
:func:`~.update.reference_step`, or the fused step of :mod:`.fused` (imported only for a
block with ``fused=True``). The choice is made when ``fused`` is set and when the block moves
to a device, never per call; what a recorder or a tool needs from a step is an attribute of
the block (``step_sums_request``) or an argument.
"""
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
import torch.nn as nn

from mmstiff.utils.step_sums import is_step_block
from .update import reference_step

#: values of a backbone's ``fused`` argument
FUSED = ('auto', True, False)


def check_fused(fused: object) -> object:
    """``fused`` if it is one of :data:`FUSED`; ValueError naming it otherwise."""
    if fused is not True and fused is not False and not (isinstance(fused, str)
                                                         and fused == 'auto'):
        raise ValueError(f'fused={fused!r} is not supported; expected one of {FUSED} '
                         "('auto': the reference step, True: the fused step, False: the "
                         'reference step)')
    return fused


def choose_step(fused: object, device: torch.device, kernels: object = None,
                layout: str = 'nchw') -> Callable:
    """The step a block with ``fused`` takes on ``device``.

    ``fused=True``: the fused step, on Triton's kernels for CUDA tensors (with Triton
    installed) and on PyTorch's passes elsewhere; ``'auto'`` and False: :func:`reference_step`.
    ``'auto'`` is the reference step until a GPU measurement shows the fused step faster
    (docs/benchmarks.md, "The fused residual step"). ``kernels``
    forces the fused step on that kernel set for any ``fused`` but False
    (:func:`forced_step_kernels`). ``layout``: the block's states, ``'nchw'`` or ``'nlc'``.
    """
    if fused is False or (fused is not True and kernels is None):
        return reference_step
    from .fused import FusedStep  # the fused path is imported only where it is taken
    return FusedStep.on(device, kernels, compiled=fused is True, layout=layout)


def _device(module: nn.Module) -> torch.device:
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device('cpu')


class StepBlock:
    """Mixin of a residual block that takes its Euler steps through ``self.take_step``.

    Attributes:
        fused: ``'auto'``, True or False (:data:`FUSED`); setting it chooses ``take_step``.
        take_step (callable): :func:`reference_step` or a fused step, with its signature.
        step_sums_request: the recorder's :class:`~mmstiff.utils.step_sums.StepSumsRequest`
            while it records the block (set and cleared by ``open_step_sums`` /
            ``close_step_sums``), else None.
    """

    take_step = staticmethod(reference_step)
    step_sums_request = None
    #: the layout of the block's states, ``'nchw'`` or ``'nlc'``
    step_layout = 'nchw'
    _fused = 'auto'

    @property
    def fused(self) -> object:
        """``'auto'``, True or False (:data:`FUSED`): which step the block takes."""
        return self._fused

    @fused.setter
    def fused(self, fused: object) -> None:
        """Check ``fused`` (:func:`check_fused`) and choose ``take_step`` for the block's device."""
        self._fused = check_fused(fused)
        self.take_step = choose_step(fused, _device(self), layout=self.step_layout)

    def _apply(self, fn, *args, **kwargs):
        """``nn.Module._apply`` (``to``, ``cuda``, ...), then the step for the new device."""
        module = super()._apply(fn, *args, **kwargs)
        if self._fused is True:
            self.take_step = choose_step(True, _device(self), layout=self.step_layout)
        return module


def set_fused(module: nn.Module, fused: object) -> nn.Module:
    """Give every step block of ``module`` the choice ``fused`` (checked by
    :func:`check_fused`), and every attention layer that can fold AttnScale and FeatScale
    into its projection (a ``fold_scales`` switch) the same."""
    check_fused(fused)
    for m in module.modules():
        if is_step_block(m):
            m.fused = fused
        if hasattr(m, 'fold_scales'):
            m.fold_scales = fused
    return module


@contextmanager
def forced_step_kernels(kernels: object, *modules: nn.Module) -> Iterator[object]:
    """Within the block, every step block of ``modules`` whose ``fused`` is not False
    (``'auto'`` included) takes the fused step on ``kernels``: e.g. the Triton kernels on CPU
    tensors in Triton's interpreter (tests), or stand-ins that count kernel launches
    (``tools/benchmark``). Blocks outside ``modules`` keep their step."""
    blocks = [m for module in modules for m in module.modules() if is_step_block(m)]
    saved = [m.__dict__.get('take_step') for m in blocks]
    try:
        for m in blocks:
            if m.fused is not False:
                m.take_step = choose_step(m.fused, _device(m), kernels, m.step_layout)
        yield kernels
    finally:
        for m, step in zip(blocks, saved):
            if step is None:
                m.__dict__.pop('take_step', None)
            else:
                m.take_step = step
