"""The norm layer of a step-size adaptor, over pooled (B, C, 1, 1) values (docs/methods.md §3,
"The adaptor's normalisation").

A StepNet adaptor normalises ``z`` of shape (B, C, 1, 1), one value per sample and channel, with
the layer its ``norm_cfg`` names: BN / SyncBN (statistics over the batch, per channel; SyncBN
over the batches of every process, on the GPU and, through :class:`CPUSyncBatchNorm`, on the
CPU too), GN (per sample, over the channels of each group) or any norm layer the registry
builds. Layers that normalise each value alone on this input (IN, LN
over the last axis, GN with one channel per group) would make ``z`` constant and are refused.
"""
from typing import Optional, Union

import torch.nn as nn
from mmcv.cnn import build_norm_layer
from torch.nn.modules.instancenorm import _InstanceNorm

from mmstiff.models.layers.iebn import IEBN, SyncIEBN
from mmstiff.models.layers.sync_bn import CPUSyncBatchNorm, distributed

#: ``norm_cfg`` types an IEBN follows (IEBN is batch normalisation by definition)
IEBN_TYPES = {
    'BN': IEBN,
    'BN2d': IEBN,
    'IEBN': IEBN,
    'mmstiff.IEBN': IEBN,
    'SyncBN': SyncIEBN,
    'SyncIEBN': SyncIEBN,
    'mmstiff.SyncIEBN': SyncIEBN
}
#: the norm of an adaptor built without a ``norm_cfg`` (the paper's BN)
DEFAULT_NORM_CFG = dict(type='BN')
#: ``norm_cfg`` types that build torch's ``SyncBatchNorm``; an adaptor builds
#: :class:`CPUSyncBatchNorm` instead
SYNC_TYPES = ('SyncBN', nn.SyncBatchNorm)


def check_norm_cfg(norm_cfg: Optional[dict]) -> dict:
    """``norm_cfg`` as a dict with a ``type`` (None: :data:`DEFAULT_NORM_CFG`)."""
    if norm_cfg is None:
        return dict(DEFAULT_NORM_CFG)
    if not isinstance(norm_cfg, dict) or 'type' not in norm_cfg:
        raise ValueError(f'norm_cfg={norm_cfg!r} is not supported; expected a dict with a '
                         "'type', e.g. dict(type='BN'), dict(type='SyncBN') or "
                         "dict(type='GN', num_groups=32)")
    return dict(norm_cfg)


def _degenerate(layer, channels):
    if isinstance(layer, (_InstanceNorm, nn.LayerNorm)):
        return True
    return isinstance(layer, nn.GroupNorm) and layer.num_groups == channels


def build_pooled_norm(norm_cfg: Optional[dict], channels: int) -> nn.Module:
    """The norm layer ``norm_cfg`` builds for (B, ``channels``, 1, 1) values.

    Raises:
        ValueError: naming ``norm_cfg`` when the layer would normalise each value alone.
    """
    norm_cfg = check_norm_cfg(norm_cfg)
    if norm_cfg['type'] in SYNC_TYPES:
        norm_cfg['type'] = CPUSyncBatchNorm
    layer = build_norm_layer(norm_cfg, channels)[1]
    if _degenerate(layer, channels):
        raise ValueError(
            f'norm_cfg={norm_cfg!r} is not supported for a step-size adaptor: on its pooled '
            f'(B, {channels}, 1, 1) input the {type(layer).__name__} normalises each value '
            "alone and z would be constant; expected BN, SyncBN or GN with groups of several "
            "channels (LN over the channels of one sample is dict(type='GN', num_groups=1))")
    return layer


def build_pooled_iebn(norm_cfg: Optional[dict], channels: int,
                      **iebn_args) -> Union[IEBN, SyncIEBN]:
    """An :class:`IEBN` with the ``eps`` and ``momentum`` of ``norm_cfg``.

    ``norm_cfg=dict(type='SyncBN')`` builds a :class:`SyncIEBN` in a distributed run and an
    :class:`IEBN` on one process (where MMEngine's Runner would turn a ``SyncBatchNorm`` into
    a plain BN and lose the gate). Its γ, β always learn: they are the gate's scale and the
    step's shift, whatever ``requires_grad`` the backbone's BN has.
    """
    norm_cfg = check_norm_cfg(norm_cfg)
    kind = norm_cfg['type']
    cls = kind if kind in (IEBN, SyncIEBN) else IEBN_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"norm_cfg={norm_cfg!r} is not supported with norm='iebn', which is "
                         "batch normalisation; expected type 'BN' or 'SyncBN', or norm='bn_ie' "
                         'to normalise with this layer')
    if cls is SyncIEBN and not distributed():
        cls = IEBN
    extra = {key: norm_cfg[key] for key in ('eps', 'momentum') if key in norm_cfg}
    return cls(channels, **extra, **iebn_args)
