"""The Squeeze-and-Excitation step-size adaptor (docs/methods.md §3; Hu et al., SENet).

    Δ = sigmoid(W2 · relu(W1 · GAP(f)))        # reduction ratio 16 by default

A per-channel step size from the residual f alone (StepNet paper Eq. 7). The layers mirror
mmpretrain's ``SELayer`` (``conv1.conv``, ``conv2.conv``), so its weights copy over by name.
``start='identity'`` computes ``Δ = 2 sigmoid(W2 relu(W1 GAP(f)) + b2)`` from ``W2 = 0``,
``b2 = 0``: Δ ≡ 1, and a network grafted onto a plain checkpoint starts as the plain one.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmpretrain.models.utils import make_divisible

from mmstiff.models.utils.types import InitConfig
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .base import StepAdaptor, check_start
from .hooked import hooked


@MODELS.register_module()
class SEAdaptor(StepAdaptor):
    """Δ_t = sigmoid(W2 relu(W1 GAP(f))), a step size from the residual alone (docs/methods.md §3).

    Args:
        channels (int): channels C of ``f``.
        layout (str): ``'nchw'`` (Δ of shape (B, C, 1, 1)) or ``'nlc'`` (tokens (B, N, C)
            pooled over the tokens, Δ of shape (B, 1, C)).
        ratio (int): squeeze ratio. Default 16.
        divisor (int): the squeeze width is ``make_divisible(channels // ratio, divisor)``, as
            in mmpretrain's ``SELayer`` (``SEResNet``). Default 8; ``divisor=1`` gives the
            original paper's ``channels // ratio``.
        squeeze_channels (int, optional): set the squeeze width directly, overriding ``ratio``
            and ``divisor``.
        start (str): ``'paper'`` (default): random ``W1``, ``W2`` as initialised. ``'identity'``:
            ``Δ = 2 sigmoid(·)`` in (0, 2) with ``W2 = 0``, ``b2 = 0``, so Δ ≡ 1 exactly and a
            plain checkpoint loaded into the adapted backbone computes the plain network;
            ``init_weights()`` keeps that start (:meth:`reset_start`).
        init_cfg (dict, optional): MMEngine initialisation config.
    """

    def __init__(self, channels: int, layout: str = 'nchw', ratio: int = 16, divisor: int = 8,
                 squeeze_channels: Optional[int] = None, start: str = 'paper',
                 init_cfg: InitConfig = None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        self.start = check_start(start)
        check_positive_int('channels', channels)
        if squeeze_channels is None:
            squeeze_channels = make_divisible(channels // check_positive_int('ratio', ratio),
                                              divisor)
        check_positive_int('squeeze_channels', squeeze_channels)
        self.channels = channels
        self.squeeze_channels = squeeze_channels
        self.conv1 = ConvModule(channels, squeeze_channels, kernel_size=1,
                                act_cfg=dict(type='ReLU'))
        self.conv2 = ConvModule(squeeze_channels, channels, kernel_size=1,
                                act_cfg=dict(type='Sigmoid'))
        #: Δ = step_scale · sigmoid(·): 2 for the identity start (Δ = 1 at W2 = 0, b2 = 0)
        self.step_scale = 2.0 if start == 'identity' else 1.0
        self.reset_start()

    @torch.no_grad()
    def reset_start(self) -> None:
        """The identity start again: ``W2 = 0``, ``b2 = 0`` (the excitation convolution, which
        Kaiming initialisers of a backbone's ``init_cfg`` reach); nothing for the paper's."""
        if self.start == 'identity':
            self.conv2.conv.weight.zero_()
            self.conv2.conv.bias.zero_()

    from_pooled = True
    fused_arithmetic = 'se'

    def step_from_pooled(self, state: Optional[torch.Tensor],
                         residual: torch.Tensor) -> torch.Tensor:
        """Δ_t from ``GAP(f)`` (B, C); ``state`` (the pooled x_t) is not read.

        Plain, unhooked units compute as two matrix products (:func:`se_excitation`), other
        units through their modules.
        """
        if plain_units(self):
            step = se_excitation(residual, *unit_weights(self), self.step_scale)
        else:
            step = self.conv2(self.conv1(residual[:, :, None, None]))  # (B, C, 1, 1)
            step = step * self.step_scale if self.step_scale != 1.0 else step
        return self.broadcast(step)

    def extra_repr(self) -> str:
        return (f'channels={self.channels}, squeeze_channels={self.squeeze_channels}, '
                f'start={self.start!r}, layout={self.layout!r}')


def _plain_unit(unit: nn.Module, act: type) -> bool:
    """Whether ``unit`` is a ConvModule of a biased 1×1 convolution followed by ``act`` only."""
    conv = getattr(unit, 'conv', None)
    return (type(unit) is ConvModule and type(conv) is nn.Conv2d and conv.bias is not None
            and conv.groups == 1 and conv.kernel_size == (1, 1) and unit.norm_name is None
            and not unit.with_spectral_norm and unit.order == ('conv', 'norm', 'act')
            and type(unit.activate) is act)


def plain_units(adaptor: SEAdaptor) -> bool:
    """Whether ``adaptor``'s two units are a biased 1×1 convolution with ReLU, then Sigmoid,
    and nothing else, with no hook on them (their hooks see what the modules compute): then
    its Δ may be computed from their weights without calling them."""
    units = (adaptor.conv1, adaptor.conv2)
    if not (_plain_unit(adaptor.conv1, nn.ReLU) and _plain_unit(adaptor.conv2, nn.Sigmoid)):
        return False
    return not hooked(*units, *(m for unit in units for m in unit.children()))


def unit_weights(adaptor: SEAdaptor) -> Tuple[torch.Tensor, ...]:
    """``(W1, b1, W2, b2)`` of ``adaptor``'s units, the weights as (S, C) and (C, S) views."""
    conv1, conv2 = adaptor.conv1.conv, adaptor.conv2.conv
    return (conv1.weight.view(conv1.weight.shape[:2]), conv1.bias,
            conv2.weight.view(conv2.weight.shape[:2]), conv2.bias)


def se_excitation(p: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                  b2: torch.Tensor, scale: float) -> torch.Tensor:
    """``Δ = scale · σ(W2 · relu(W1 · p + b1) + b2)`` (B, C) of ``p = GAP(f)`` (B, C) as two
    matrix products: what the units compute on ``p`` as a (B, C, 1, 1) map, with autograd's
    backward, without a convolution's overhead on a 1×1 map (docs/benchmarks.md, "SE's
    excitation as matrix products")."""
    step = torch.sigmoid(F.linear(F.linear(p, w1, b1).relu_(), w2, b2))
    return step * scale if scale != 1.0 else step
