"""The StepNet step-size adaptor (docs/methods.md §1; StepNet paper Eq. 10 and Appendix F).

    u = GAP(x_t);  v = GAP(x_t + f) = u + GAP(f)        # the state now and the next one
    z = W_IE ⊙ BN(GroupConv1x1(interleave(u, v))) + b_IE  # groups=C: channel c sees (u_c, v_c)
    Δ = sigmoid(z)            # the paper's start: W_IE = 0, b_IE = -1, so Δ ≡ 0.269

``start='identity'`` computes ``Δ = 2 sigmoid(z)`` with ``W_IE = b_IE = 0``: Δ ≡ 1, and a
network grafted onto a plain checkpoint starts as the plain one (docs/methods.md §3).
"""
from contextlib import contextmanager
from typing import Optional

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.layers.iebn import InstanceEnhancementMixin
from mmstiff.models.utils.types import InitConfig
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int
from .base import StepAdaptor, check_start
from .norm import build_pooled_iebn, build_pooled_norm, distributed

NORMS = ('bn_ie', 'iebn')
#: the paper's initial W_IE, b_IE
PAPER_IE_INIT = (0.0, -1.0)


def interleave_states(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B, C) and (B, C) -> (B, 2C) as ``u_0, v_0, u_1, v_1, ...`` (docs/methods.md §1)."""
    return torch.stack((u, v), dim=2).flatten(1)


def grouped_pointwise(u: torch.Tensor, v: torch.Tensor, weight: torch.Tensor,
                      groups: int) -> torch.Tensor:
    """``GroupConv1x1(interleave(u, v))`` for (B, C) states, as plain tensor algebra.

    ``weight`` is the (C, 2C / groups, 1, 1) weight of the ``nn.Conv2d(2C, C, 1, groups)``.
    Same result as the convolution, without its per-group loop (with ``groups=C`` a CPU
    convolution runs C tiny kernels): for ``groups=C``, ``z_c = w_c0 u_c + w_c1 v_c``.
    """
    channels = weight.shape[0]
    if groups == channels:
        w = weight.view(channels, 2)
        return torch.addcmul(u * w[:, 0], v, w[:, 1])
    pairs = interleave_states(u, v).view(u.shape[0], groups, -1)  # (B, g, 2C/g)
    w = weight.view(groups, channels // groups, -1)  # (g, C/g, 2C/g)
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

    With ``start='identity'``: Δ_t = 2 sigmoid(...), starting at Δ ≡ 1.

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
        start (str): ``'paper'`` (default): ``Δ = sigmoid(z)``, ``W_IE = 0``, ``b_IE = -1``,
            so Δ ≡ sigmoid(-1) at first. ``'identity'``: ``Δ = 2 sigmoid(z)`` in (0, 2) and the
            last affine map to z starts at zero (``W_IE = b_IE = 0`` for ``'bn_ie'``; the IEBN
            scale γ and shift β for ``'iebn'``), so Δ ≡ 1 exactly: a plain checkpoint loaded
            into the adapted backbone computes the plain network. ``init_weights()`` keeps
            that start (:meth:`reset_start`).
        ie_weight_init (float, optional): initial ``W_IE`` (for ``'iebn'``: the initial gate
            weight of the IEBN layer). None: 0.0.
        ie_bias_init (float, optional): initial ``b_IE`` (for ``'iebn'``: the gate bias).
            None: -1.0 (``'bn_ie'`` with ``start='identity'``: 0.0, and setting either is an
            error, since they would move Δ away from 1).
        norm_cfg (dict, optional): the norm layer of ``'bn_ie'`` (any layer mmcv's
            ``build_norm_layer`` builds: BN, SyncBN, GN, ...; see
            :mod:`mmstiff.models.steps.norm`), or for ``'iebn'`` whether its BN is synchronised
            (``type='SyncBN'``). None: ``dict(type='BN')``. A backbone fills it in with its own
            ``norm_cfg`` or its ``adaptor_norm_cfg``.
        init_cfg (dict, optional): MMEngine initialisation config.

    Normalisation modes (a documented choice, the paper does not say):

    * The norm is built from ``norm_cfg`` over the pooled (B, C, 1, 1) values: in a backbone
      the backbone's own ``norm_cfg`` (BN, SyncBN, GN, ...) unless ``adaptor_norm_cfg`` says
      otherwise (docs/methods.md §3, "The adaptor's normalisation"). A BN obeys the backbone's
      rules for BN: under ``norm_eval=True`` (mmdet's default) and in eval mode it normalises
      with its running statistics and does not update them, exactly like the backbone's other
      BN layers, unless the backbone's ``adaptor_norm`` lets it learn statistics that the
      loaded checkpoint lacked (docs/methods.md §3, "Starting from a plain checkpoint");
      ``frozen_stages`` freezes it too.
    * In train mode with a batch of ONE sample there are no batch statistics to compute (one
      value per channel); instead of failing, a BN normalises that sample with the running
      statistics and leaves them unchanged, as in eval mode (a SyncBN of several processes
      uses the samples of every process). The W_IE, b_IE and BN affine parameters still
      receive gradients.
    """

    takes_norm_cfg = True

    def __init__(self, channels: int, layout: str = 'nchw', groups: Optional[int] = None,
                 norm: str = 'bn_ie', start: str = 'paper', ie_weight_init: Optional[float] = None,
                 ie_bias_init: Optional[float] = None, norm_cfg: Optional[dict] = None,
                 init_cfg: InitConfig = None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        check_positive_int('channels', channels)
        groups = channels if groups is None else check_positive_int('groups', groups)
        if channels % groups:
            raise ValueError(f'groups={groups!r} is not supported for channels={channels}; '
                             'expected a positive int that divides channels')
        if norm not in NORMS:
            raise ValueError(f'norm={norm!r} is not supported; expected one of {NORMS}')
        self.start = check_start(start)
        identity = start == 'identity'
        if identity and norm == 'bn_ie' and (ie_weight_init, ie_bias_init) != (None, None):
            raise ValueError(f'ie_weight_init={ie_weight_init!r}, ie_bias_init={ie_bias_init!r} '
                             "are not supported with start='identity' and norm='bn_ie', which "
                             'sets W_IE = b_IE = 0 so that Δ ≡ 1; expected None for both')
        ie_init = (0.0, 0.0) if identity and norm == 'bn_ie' else PAPER_IE_INIT
        ie_weight_init = ie_init[0] if ie_weight_init is None else float(ie_weight_init)
        ie_bias_init = ie_init[1] if ie_bias_init is None else float(ie_bias_init)
        self.channels = channels
        self.groups = groups
        self.norm_type = norm
        #: Δ = step_scale · sigmoid(z): 2 for the identity start (Δ = 1 at z = 0)
        self.step_scale = 2.0 if identity else 1.0
        self.conv = nn.Conv2d(2 * channels, channels, kernel_size=1, groups=groups, bias=False)
        if norm == 'iebn':
            affine = dict(weight_init=0.0, bias_init=0.0) if identity else {}
            self.norm = build_pooled_iebn(norm_cfg, channels, ie_weight_init=ie_weight_init,
                                          ie_bias_init=ie_bias_init, **affine)
        else:
            self.norm = build_pooled_norm(norm_cfg, channels)
            self.ie_weight_init = ie_weight_init
            self.ie_bias_init = ie_bias_init
            self.ie_weight = nn.Parameter(torch.full((channels, ), ie_weight_init))
            self.ie_bias = nn.Parameter(torch.full((channels, ), ie_bias_init))

    @torch.no_grad()
    def reset_start(self) -> None:
        """The identity start again: ``W_IE = b_IE = 0`` (``'bn_ie'``) or the IEBN's γ = β = 0
        (``'iebn'``), so z ≡ 0 and Δ ≡ 1. The paper's start needs nothing: ``W_IE``, ``b_IE``
        belong to no layer an ``init_cfg`` initialises, and with ``W_IE = 0`` the layers before
        them do not change Δ."""
        if self.start != 'identity':
            return
        if self.norm_type == 'iebn':
            self.norm.reset_affine_parameters()
        else:
            self.ie_weight.fill_(self.ie_weight_init)
            self.ie_bias.fill_(self.ie_bias_init)

    def train(self, mode: bool = True) -> 'StepNetAdaptor':
        """``nn.Module.train``, refusing an IEBN that a BN conversion replaced (torch's and
        MMEngine's ``convert_sync_batchnorm`` build a plain ``SyncBatchNorm`` without the
        gate)."""
        if self.norm_type == 'iebn' and not isinstance(self.norm, InstanceEnhancementMixin):
            raise RuntimeError(
                f"a StepNet adaptor with norm='iebn' holds a {type(self.norm).__name__}: a "
                'conversion (convert_sync_batchnorm, the config\'s sync_bn) replaced its IEBN '
                "and lost the gate; expected the backbone's norm_cfg or adaptor_norm_cfg "
                "dict(type='SyncBN'), which builds a SyncIEBN, instead of the conversion")
        return super().train(mode)

    def _batch_of_one_frozen(self, z):
        """Whether a batch of one must be normalised with the running statistics: a BN in
        train mode that has no other sample (a SyncBN of several processes has theirs)."""
        if not (self.training and z.shape[0] == 1 and isinstance(self.norm, _BatchNorm)):
            return False
        return not (isinstance(self.norm, nn.SyncBatchNorm) and distributed())

    def _normalise(self, z):
        if self._batch_of_one_frozen(z):
            with _frozen_statistics(self.norm) as norm:
                return norm(z)
        return self.norm(z)

    from_pooled = True
    pools_state = True
    fused_arithmetic = 'stepnet'

    def step_from_pooled(self, state: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Δ_t from ``u = GAP(x_t)`` and ``GAP(f)``, both (B, C); ``v = u + GAP(f)``."""
        step = self._phi(state, residual)  # (B, C, 1, 1)
        return step.view(step.shape[0], 1, self.channels) if self.layout == 'nlc' else step

    def _phi(self, u, residual):
        """Δ (B, C, 1, 1) through the adaptor's modules."""
        v = u + residual  # GAP(x_t + f)
        z = grouped_pointwise(u, v, self.conv.weight, self.groups)
        z = z.view(z.shape[0], self.channels, 1, 1)  # a view: cheaper on the host than [..., None]
        z = self._normalise(z)  # (B, C, 1, 1)
        if self.norm_type == 'bn_ie':
            z = torch.addcmul(self.ie_bias.view(1, -1, 1, 1), self.ie_weight.view(1, -1, 1, 1), z)
        step = torch.sigmoid(z)
        return step * self.step_scale if self.step_scale != 1.0 else step

    def extra_repr(self) -> str:
        return (f'channels={self.channels}, groups={self.groups}, norm={self.norm_type!r}, '
                f'start={self.start!r}, layout={self.layout!r}')
