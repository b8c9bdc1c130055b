"""Instance Enhancement Batch Normalization (IEBN, Liang et al., AAAI 2020; docs/methods.md §2).

    a = sigmoid(w ⊙ GAP(x) + b)               # w init 0, b init -1, GAP of the pre-norm input
    y = BN_without_affine(x) ⊙ (γ ⊙ a) + β    # γ init 1, β init 0; all per-channel

The batch statistics of BN are noisy; the per-sample gate ``a`` lets each instance rescale its
own channels. :class:`IEBN` is a drop-in ``BatchNorm2d``: same running statistics, same
``weight`` (γ) and ``bias`` (β) names, ``_abbr_ = 'bn'`` so a backbone built with
``norm_cfg=dict(type='mmstiff.IEBN')`` keeps the parameter names of its BN version (``bn1``, ...)
and loads a BN checkpoint with only ``ie_weight`` / ``ie_bias`` missing. Being a ``_BatchNorm``,
it follows a backbone's ``norm_eval`` and ``init_cfg`` rules for BN layers.

``weight_init`` and ``bias_init`` set the initial γ and β (1 and 0, as BN); the StepNet adaptor's
``start='identity'`` builds it with γ = β = 0, so that its output is 0 whatever the input
(docs/methods.md §3, "Starting from a plain checkpoint").

:class:`SyncIEBN` is the same layer on ``nn.SyncBatchNorm``: its batch statistics are reduced
over the processes of a distributed run (CPU processes too). The conversions of torch and MMEngine
(``convert_sync_batchnorm``, ``sync_bn``) turn an :class:`IEBN` into a plain ``SyncBatchNorm``
and lose the gate; build :class:`SyncIEBN` directly (``norm_cfg=dict(type='SyncBN')`` for a
StepNet adaptor) instead.
"""
from typing import Optional

import torch
import torch.nn as nn
from torch.types import Device

from mmstiff.registry import MODELS
from mmstiff.utils.layout import pool_state
from .sync_bn import CPUSyncBatchNorm


def instance_enhancement(x: torch.Tensor, ie_weight: torch.Tensor,
                         ie_bias: torch.Tensor) -> torch.Tensor:
    """The IEBN gate ``a = sigmoid(w ⊙ GAP(x) + b)`` of shape (B, C, 1, 1), docs/methods.md §2."""
    pooled = pool_state(x, 'nchw')
    return torch.sigmoid(
        torch.addcmul(ie_bias.view(1, -1, 1, 1), ie_weight.view(1, -1, 1, 1), pooled))


class InstanceEnhancementMixin:
    """Batch normalisation whose affine scale is gated per sample (IEBN, docs/methods.md §2).

    Args:
        num_features (int): channels C of the (B, C, H, W) input.
        eps, momentum, track_running_stats: as in :class:`torch.nn.BatchNorm2d`.
        ie_weight_init (float): initial value of the gate weight ``w``. Default 0.0.
        ie_bias_init (float): initial value of the gate bias ``b``. Default -1.0.
        weight_init (float): initial value of the scale γ. Default 1.0.
        bias_init (float): initial value of the shift β. Default 0.0.

    The affine part is always on (γ, β are IEBN's own parameters).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1,
                 track_running_stats: bool = True, ie_weight_init: float = 0.0,
                 ie_bias_init: float = -1.0, weight_init: float = 1.0, bias_init: float = 0.0,
                 device: Device = None, dtype: Optional[torch.dtype] = None):
        self.ie_weight_init = float(ie_weight_init)
        self.ie_bias_init = float(ie_bias_init)
        self.weight_init = float(weight_init)
        self.bias_init = float(bias_init)
        super().__init__(num_features, eps=eps, momentum=momentum, affine=True,
                         track_running_stats=track_running_stats, device=device, dtype=dtype)
        factory = dict(device=device, dtype=dtype)
        self.ie_weight = nn.Parameter(torch.empty(num_features, **factory))
        self.ie_bias = nn.Parameter(torch.empty(num_features, **factory))
        self.reset_affine_parameters()

    def reset_ie_parameters(self) -> None:
        """The gate's ``w`` and ``b`` to their initial values ``ie_weight_init`` and
        ``ie_bias_init``."""
        nn.init.constant_(self.ie_weight, self.ie_weight_init)
        nn.init.constant_(self.ie_bias, self.ie_bias_init)

    def reset_affine_parameters(self) -> None:
        """γ, β, ``w`` and ``b`` to their initial values (the running statistics stay)."""
        nn.init.constant_(self.weight, self.weight_init)
        nn.init.constant_(self.bias, self.bias_init)
        self.reset_ie_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if hasattr(self, 'ie_weight'):
            self.reset_affine_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = instance_enhancement(x, self.ie_weight, self.ie_bias)
        # BatchNorm2d gives x̂ ⊙ γ + β; remove β, gate, put β back: x̂ ⊙ (γ ⊙ a) + β.
        beta = self.bias.view(1, -1, 1, 1)
        return torch.addcmul(beta, super().forward(x) - beta, gate)

    def extra_repr(self) -> str:
        text = (f'{super().extra_repr()}, ie_weight_init={self.ie_weight_init}, '
                f'ie_bias_init={self.ie_bias_init}')
        if (self.weight_init, self.bias_init) != (1.0, 0.0):
            text += f', weight_init={self.weight_init}, bias_init={self.bias_init}'
        return text


@MODELS.register_module()
class IEBN(InstanceEnhancementMixin, nn.BatchNorm2d):
    """IEBN on ``nn.BatchNorm2d``; see :class:`InstanceEnhancementMixin` for the arguments."""

    _abbr_ = 'bn'


@MODELS.register_module()
class SyncIEBN(InstanceEnhancementMixin, CPUSyncBatchNorm):
    """IEBN on ``nn.SyncBatchNorm`` (batch statistics over every process of a distributed run,
    on the GPU or the CPU: :class:`~mmstiff.models.layers.sync_bn.CPUSyncBatchNorm`; on one
    process, as :class:`IEBN`); see :class:`InstanceEnhancementMixin` for the arguments."""

    _abbr_ = 'bn'
