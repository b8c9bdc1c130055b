"""The Squeeze-and-Excitation step-size adaptor (docs/methods.md §3; Hu et al., SENet).

    Δ = sigmoid(W2 · relu(W1 · GAP(f)))        # reduction ratio 16 by default
    out = act(x_t + Δ ⊙ f)

Channel attention on the residual branch is an adaptive, per-channel step size computed from
the residual ``f`` alone (StepNet paper Eq. 7). The layers mirror mmpretrain's ``SELayer``
(``conv1.conv``, ``conv2.conv``, the same squeeze width), so its weights copy over by name and
:class:`mmstiff.models.backbones.StepResNet` with this adaptor reproduces ``SEResNet``.

That is the paper's start (``start='paper'``): at random weights Δ is near 0.5 everywhere, which
halves every residual branch of a plain pretrained backbone the adaptor is grafted onto.
``start='identity'`` computes ``Δ = 2 sigmoid(W2 relu(W1 GAP(f)) + b2)`` with ``W2 = 0``,
``b2 = 0``, so Δ ≡ 1 exactly and the adapted network starts as the plain one (docs/methods.md
§3, "Starting from a plain checkpoint").
"""
import torch
from mmcv.cnn import ConvModule
from mmpretrain.models.utils import make_divisible

from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .base import StepAdaptor, check_start
from .se_phi import SEPhi, plain_units, se_excitation, se_phi_mode, unit_weights


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

    def __init__(self, channels, layout='nchw', ratio=16, divisor=8, squeeze_channels=None,
                 start='paper', init_cfg=None):
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
    def reset_start(self):
        """The identity start again: ``W2 = 0``, ``b2 = 0`` (the excitation convolution, which
        Kaiming initialisers of a backbone's ``init_cfg`` reach); nothing for the paper's."""
        if self.start == 'identity':
            self.conv2.conv.weight.zero_()
            self.conv2.conv.bias.zero_()

    from_pooled = True

    def step_from_pooled(self, state, residual, phi=None):
        """Δ_t from ``GAP(f)`` (B, C); ``state`` (the pooled x_t) is not read.

        With ``phi``, kernels that have SE's (B, C) passes (the fused step's), one computation
        each way where :func:`~mmstiff.models.steps.se_phi.se_phi_mode` allows (docs/methods.md
        §0); elsewhere two matrix products where the units are plain and unhooked
        (:func:`~mmstiff.models.steps.se_phi.se_excitation`), else the units themselves.
        """
        if se_phi_mode(self, residual.shape[0], phi):
            step = SEPhi.apply(residual, *unit_weights(self), self.step_scale, phi)
        elif plain_units(self):
            step = se_excitation(residual, *unit_weights(self), self.step_scale)
        else:
            step = self.conv2(self.conv1(residual[:, :, None, None]))  # (B, C, 1, 1)
            step = step * self.step_scale if self.step_scale != 1.0 else step
        step = step.view(-1, self.channels, 1, 1)
        if self.layout == 'nlc':
            return step.view(step.shape[0], 1, self.channels)
        return step

    def extra_repr(self):
        return (f'channels={self.channels}, squeeze_channels={self.squeeze_channels}, '
                f'start={self.start!r}, layout={self.layout!r}')
