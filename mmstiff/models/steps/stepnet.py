"""The StepNet step-size adaptor (docs/methods.md §1; StepNet paper Eq. 10 and Appendix F).

The step size is computed from the current state AND the next one, a finer estimate of the local
stiffness than the residual ``f`` alone:

    u = GAP(x_t)                       # (B, C)
    v = GAP(x_t + f)                   # the next state, = u + GAP(f) (pooling is linear)
    z = GroupConv1x1(interleave(u, v)) # 2C -> C; groups=C: channel c sees only (u_c, v_c)
    z = BN(z)                          # the "BN" of IEBN
    z = W_IE ⊙ z + b_IE                # the "IE": per channel, W_IE init 0.0, b_IE init -1.0
    Δ = sigmoid(z)                     # so Δ ≡ sigmoid(-1) ≈ 0.269 at initialisation
"""
from contextlib import contextmanager

import torch
import torch.nn as nn

from mmstiff.analysis.layout import pool_state
from mmstiff.models.layers.iebn import IEBN
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .base import StepAdaptor

NORMS = ('bn_ie', 'iebn')


def interleave_states(u, v):
    """(B, C) and (B, C) -> (B, 2C) as ``u_0, v_0, u_1, v_1, ...`` (docs/methods.md §1)."""
    return torch.stack((u, v), dim=2).flatten(1)


def grouped_pointwise(u, v, weight, groups):
    """``GroupConv1x1(interleave(u, v))`` for (B, C) states, as plain tensor algebra.

    ``weight`` is the (C, 2C / groups, 1, 1) weight of the ``nn.Conv2d(2C, C, 1, groups)``.
    Same result as the convolution, without its per-group loop (with ``groups=C`` a CPU
    convolution runs C tiny kernels): for ``groups=C``, ``z_c = w_c0 u_c + w_c1 v_c``.
    """
    channels = weight.shape[0]
    if groups == channels:
        w = weight.view(channels, 2)
        return torch.addcmul(u * w[:, 0], v, w[:, 1])
    pairs = interleave_states(u, v).view(u.shape[0], groups, -1)          # (B, g, 2C/g)
    w = weight.view(groups, channels // groups, -1)                        # (g, C/g, 2C/g)
    return torch.einsum('bgi,goi->bgo', pairs, w).reshape(u.shape[0], channels)


@contextmanager
def _frozen_statistics(norm):
    """Run ``norm`` with its running statistics and without updating them."""
    was_training = norm.training
    norm.train(False)
    try:
        yield norm
    finally:
        norm.train(was_training)


@MODELS.register_module()
class StepNetAdaptor(StepAdaptor):
    """Δ_t = sigmoid(IE(BN(GroupConv(interleave(GAP(x_t), GAP(x_t + f)))))) (docs/methods.md §1).

    Args:
        channels (int): channels C of ``x_t`` and ``f``.
        layout (str): ``'nchw'`` (feature maps, Δ of shape (B, C, 1, 1)) or ``'nlc'`` (tokens
            (B, N, C) pooled over the tokens, Δ of shape (B, 1, C)).
        groups (int, optional): groups of the 1x1 convolution 2C -> C; must divide C.
            ``None`` (default) means C: each channel's step depends only on its own
            ``(u_c, v_c)``. ``groups=1`` mixes every channel.
        norm (str): ``'bn_ie'`` (default) is BN followed by the per-channel IE affine
            ``W_IE ⊙ z + b_IE``; ``'iebn'`` uses the literal IEBN layer of docs/methods.md §2
            (:class:`mmstiff.models.layers.IEBN`) instead, whose output then goes through the
            sigmoid directly.
        ie_weight_init (float): initial ``W_IE``. Default 0.0.
        ie_bias_init (float): initial ``b_IE``. Default -1.0.
        init_cfg (dict, optional): MMEngine initialisation config.

    Normalisation modes (a documented choice, the paper does not say):

    * The BN is an ordinary ``nn.BatchNorm2d`` (or :class:`IEBN`) over the pooled (B, C, 1, 1)
      statistics, so it obeys the backbone's rules for BN: under ``norm_eval=True`` (mmdet's
      default) and in eval mode it normalises with its running statistics and does not update
      them, exactly like the backbone's other BN layers; ``frozen_stages`` freezes it too.
    * In train mode with a batch of ONE sample there are no batch statistics to compute (one
      value per channel); instead of failing, the adaptor normalises that sample with the
      running statistics and leaves them unchanged, as in eval mode. The W_IE, b_IE and
      BN affine parameters still receive gradients.
    """

    def __init__(self, channels, layout='nchw', groups=None, norm='bn_ie',
                 ie_weight_init=0.0, ie_bias_init=-1.0, init_cfg=None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        check_positive_int('channels', channels)
        groups = channels if groups is None else check_positive_int('groups', groups)
        if channels % groups:
            raise ValueError(f'groups={groups!r} is not supported for channels={channels}; '
                             'expected a positive int that divides channels')
        if norm not in NORMS:
            raise ValueError(f'norm={norm!r} is not supported; expected one of {NORMS}')
        self.channels = channels
        self.groups = groups
        self.norm_type = norm
        self.conv = nn.Conv2d(2 * channels, channels, kernel_size=1, groups=groups, bias=False)
        if norm == 'iebn':
            self.norm = IEBN(channels, ie_weight_init=ie_weight_init, ie_bias_init=ie_bias_init)
        else:
            self.norm = nn.BatchNorm2d(channels)
            self.ie_weight = nn.Parameter(torch.full((channels, ), float(ie_weight_init)))
            self.ie_bias = nn.Parameter(torch.full((channels, ), float(ie_bias_init)))

    def _normalise(self, z):
        if self.training and z.shape[0] == 1:
            with _frozen_statistics(self.norm) as norm:
                return norm(z)
        return self.norm(z)

    def forward(self, x_t, f):
        u = pool_state(x_t, self.layout, keepdim=False)      # (B, C)
        v = u + pool_state(f, self.layout, keepdim=False)    # GAP(x_t + f)
        z = grouped_pointwise(u, v, self.conv.weight, self.groups)[:, :, None, None]
        z = self._normalise(z)                               # (B, C, 1, 1)
        if self.norm_type == 'bn_ie':
            z = torch.addcmul(self.ie_bias.view(1, -1, 1, 1), self.ie_weight.view(1, -1, 1, 1),
                              z)
        step = torch.sigmoid(z)
        if self.layout == 'nlc':
            return step.view(step.shape[0], 1, self.channels)
        return step

    def extra_repr(self):
        return (f'channels={self.channels}, groups={self.groups}, norm={self.norm_type!r}, '
                f'layout={self.layout!r}')
