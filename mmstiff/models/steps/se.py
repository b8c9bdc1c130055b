"""The Squeeze-and-Excitation step-size adaptor (docs/methods.md §3; Hu et al., SENet).

    Δ = sigmoid(W2 · relu(W1 · GAP(f)))        # reduction ratio 16 by default
    out = act(x_t + Δ ⊙ f)

Channel attention on the residual branch is an adaptive, per-channel step size computed from
the residual ``f`` alone (StepNet paper Eq. 7). The layers mirror mmpretrain's ``SELayer``
(``conv1.conv``, ``conv2.conv``, the same squeeze width), so its weights copy over by name and
:class:`mmstiff.models.backbones.StepResNet` with this adaptor reproduces ``SEResNet``.
"""
from mmcv.cnn import ConvModule
from mmpretrain.models.utils import SELayer, make_divisible

from mmstiff.analysis.blocks import register_step_gate
from mmstiff.analysis.layout import pool_state
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .base import StepAdaptor

# mmpretrain's SE layer computes the same step size: its sigmoid gate is read as one
register_step_gate(SELayer, 'conv2')


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
        init_cfg (dict, optional): MMEngine initialisation config.
    """

    def __init__(self, channels, layout='nchw', ratio=16, divisor=8, squeeze_channels=None,
                 init_cfg=None):
        super().__init__(layout=layout, init_cfg=init_cfg)
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

    def forward(self, x_t, f):
        pooled = pool_state(f, self.layout)
        if self.layout == 'nlc':
            step = self.conv2(self.conv1(pooled.transpose(1, 2).unsqueeze(-1)))
            return step.squeeze(-1).transpose(1, 2)
        return self.conv2(self.conv1(pooled))

    def extra_repr(self):
        return (f'channels={self.channels}, squeeze_channels={self.squeeze_channels}, '
                f'layout={self.layout!r}')
