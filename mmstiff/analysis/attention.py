"""Attention maps of transformer layers, for the over-smoothing diagnostics (docs/methods.md §8).

mmpretrain's ``MultiheadAttention`` runs the fused ``scaled_dot_product_attention`` kernel and
never materialises the attention map ``A = softmax(q kᵀ · scale)``. :class:`AttentionRecorder`
rebuilds it, only while recording, from the output of the module's ``qkv`` projection (a
forward hook, so nothing is computed twice except the ``q kᵀ`` product and the softmax).

An attention module that computes its map differently (e.g. AttnScale's ``Â``) hands it out
either through mmstiff's ``AttentionMapMixin`` protocol (``keep_attn_map`` and
``_store_attn_map``: the module takes its explicit-matrix path while recorded and stores the
matrix that multiplies ``V``), or through a method ``attention_map(x) -> (B, H, N, N)`` called
on the module's input. Both take precedence over rebuilding the map from ``qkv``.

Swin's window attention (mmpretrain's and mmdet's ``WindowMSA``, inside ``ShiftWindowMSA`` as
``w_msa``) applies an ``nn.Softmax`` module after adding the relative position bias and the
shift mask: its output *is* the map, ``(B · windows, H, n, n)``, and is read as such.
"""
from collections import OrderedDict
from typing import NamedTuple

import torch
import torch.nn as nn

from mmstiff.utils.checks import check_patterns, matches_any
from .blocks import find_blocks
from .trajectory import RecorderBase


def attention_from_qkv(qkv, num_heads, scale=None):
    """``softmax(q kᵀ · scale)`` from a fused ``qkv`` projection output ``(B, N, 3 C)``.

    Args:
        qkv (Tensor): ``(B, N, 3 * C)`` laid out as mmpretrain's ``MultiheadAttention`` does
            (``reshape(B, N, 3, heads, C // heads)``).
        num_heads (int): number of heads.
        scale (float, optional): the logit scale; ``head_dim ** -0.5`` when None.

    Returns:
        Tensor: ``(B, heads, N, N)`` attention maps, rows summing to 1.
    """
    if qkv.dim() != 3 or qkv.shape[-1] % (3 * num_heads):
        raise ValueError(f'qkv has shape {tuple(qkv.shape)}; expected (B, N, 3 * C) with C a '
                         f'multiple of num_heads={num_heads}')
    b, n, _ = qkv.shape
    qkv = qkv.reshape(b, n, 3, num_heads, -1).permute(2, 0, 3, 1, 4)
    q, k = qkv[0].float(), qkv[1].float()
    scale = q.shape[-1]**-0.5 if scale is None else scale
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)


class AttentionModule(NamedTuple):
    """The attention module of a transformer layer, under the layer's name."""
    name: str
    module: nn.Module


def attention_modules(model, select=None):
    """:class:`AttentionModule` ``(layer name, attention module)`` records of the transformer
    layers of ``model`` whose names match the ``fnmatch`` patterns ``select`` (None: all)."""
    patterns = check_patterns('select', select, what='layer names')
    found = []
    for block in find_blocks(model):
        if block.kind != 'transformer' or not matches_any(block.name, patterns):
            continue
        attn = getattr(block.module, 'attn', None)
        if not isinstance(attn, nn.Module):
            continue
        window = getattr(attn, 'w_msa', None)  # Swin: the window attention inside the shift
        found.append(AttentionModule(block.name, window if isinstance(window, nn.Module)
                                     else attn))
    return found


def _scale_of(attn):
    scale = getattr(attn, 'scale', None)
    return float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) \
        else None


class AttentionRecorder(RecorderBase):
    """Forward hooks that rebuild the attention maps of transformer layers.

    Args:
        model (nn.Module): a network with transformer layers (see
            :mod:`mmstiff.analysis.blocks`).
        reduce (callable, optional): ``(layer name, attn (B, H, N, N)) -> Any`` called under
            ``torch.no_grad()``; its results are kept in :attr:`outputs`. Default keeps the maps.
        select (Sequence[str], optional): fnmatch patterns of layer names; None: every layer.
    """

    def __init__(self, model, reduce=None, select=None):
        self.modules = attention_modules(model, select)
        if not self.modules:
            raise ValueError(f'{type(model).__name__} has no transformer layer with an `attn` '
                             f'module (select={select!r})')
        self.reduce = reduce or (lambda name, attn: attn)
        self.outputs = OrderedDict()
        self._handles = []
        self._restore = []

    @property
    def active(self):
        return bool(self._handles)

    def start(self):
        if self.active:
            return self
        for found in self.modules:
            self._hook(found.name, found.module)
        return self

    def stop(self):
        for handle in self._handles:
            handle.remove()
        for restore in self._restore:
            restore()
        self._handles = []
        self._restore = []
        return self

    def _keep(self, name, attn):
        with torch.no_grad():
            self.outputs.setdefault(name, []).append(self.reduce(name, attn.detach()))

    def _hook(self, name, attn):
        if hasattr(attn, 'keep_attn_map') and callable(getattr(attn, '_store_attn_map', None)):
            sink = {}

            def on_output(module, args, output):
                if name in sink:
                    self._keep(name, sink.pop(name))

            def restore(module=attn):
                module.keep_attn_map = False
                module._attn_map_sink = None

            attn.keep_attn_map = True
            attn._attn_map_sink = (sink, name)
            self._restore.append(restore)
            self._handles.append(attn.register_forward_hook(on_output))
            return
        if callable(getattr(attn, 'attention_map', None)):

            def on_input(module, args):
                with torch.no_grad():
                    self._keep(name, module.attention_map(args[0].detach()))

            self._handles.append(attn.register_forward_pre_hook(on_input))
            return
        softmax = getattr(attn, 'softmax', None)
        if isinstance(softmax, nn.Softmax):  # window attention: the map itself, bias and mask in

            def on_softmax(module, args, output):
                self._keep(name, output)

            self._handles.append(softmax.register_forward_hook(on_softmax))
            return
        qkv = getattr(attn, 'qkv', None)
        num_heads = getattr(attn, 'num_heads', None)
        if not isinstance(qkv, nn.Module) or not isinstance(num_heads, int):
            raise ValueError(f'attention module {name}.attn ({type(attn).__name__}) has neither '
                             'attention_map(x) nor a fused `qkv` projection with `num_heads`')
        scale = _scale_of(attn)

        def on_qkv(module, args, output):
            with torch.no_grad():
                self._keep(name, attention_from_qkv(output.detach(), num_heads, scale))

        self._handles.append(qkv.register_forward_hook(on_qkv))
