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
from typing import Any, Callable, List, NamedTuple, Optional, Sequence

import torch
import torch.nn as nn

from mmstiff.utils.checks import check_patterns, check_positive_int, matches_any
from .blocks import find_blocks
from .trajectory import RecorderBase, opaque_to_compiler


def attention_from_qkv(qkv: torch.Tensor, num_heads: int,
                       scale: Optional[float] = None) -> torch.Tensor:
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
    # the scale on q (B, heads, N, head_dim), not on the N x N logits: one pass fewer over them
    return torch.softmax((q * scale) @ k.transpose(-2, -1), dim=-1)


def softmax_column_cosine_similarity(attn: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """M_attn of attention maps with non-negative entries (softmax outputs), in O(N²) a map.

    The value of :func:`~mmstiff.analysis.attention_column_cosine_similarity` (anti-oversmoothing
    Eq. 75, averaged over heads) without the ``N × N`` matrix of column cosines: between
    non-negative columns every cosine is non-negative, so ``|cos| = cos`` and, with
    ``û_j = A[:, j] / max(||A[:, j]||, eps)``,

        Σ_{i≠j} cos(A[:, i], A[:, j]) = ||Σ_j û_j||² - Σ_j ||û_j||².

    ``Σ_j û_j`` is one product and one sum over each map. The maps are read in their own precision
    (float32); the sums over the columns are taken in float64. Maps with negative entries
    (AttnScale's ``Â`` may have them) need the general function.

    Args:
        attn (Tensor): ``(B, H, N, N)`` or ``(H, N, N)`` maps (rows: queries), entries >= 0.
        eps (float): the norm floor of ``torch.nn.functional.normalize``, as the general
            function uses.

    Returns:
        Tensor: ``(B,)`` (or 0-d) float64.
    """
    if not torch.is_tensor(attn) or attn.dim() not in (3, 4) or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f'attn has shape {tuple(getattr(attn, "shape", ()))}; expected '
                         '(B, H, N, N) or (H, N, N) square attention maps')
    n = attn.shape[-1]
    if n < 2:
        raise ValueError(f'{n} column(s) given; the pairwise cosine similarity needs at least 2')
    attn = attn if attn.dtype in (torch.float32, torch.float64) else attn.float()
    square = (attn * attn).sum(dim=-2)  # (..., N) squared norm of each column
    norm = square.sqrt().clamp_min(eps)
    # Σ_j û_j as a product and a sum over the rows, not as a batch of (N, N) x (N, 1) products
    # (one small matrix-vector call per map)
    total = (attn * (1.0 / norm).unsqueeze(-2)).sum(dim=-1).double()
    units = (square.double() / norm.double()**2).sum(dim=-1)  # Σ_j ||û_j||²
    pairs = (total * total).sum(dim=-1) - units
    return (pairs / (n * (n - 1))).mean(dim=-1)


class AttentionModule(NamedTuple):
    """The attention module of a transformer layer, under the layer's name; ``lenient`` for a
    zoo layer, whose maps are read only where its ``qkv`` gives ``(B, N, 3C)`` tokens (windowed
    or grid attention gives other shapes, and those maps are left out)."""
    name: str
    module: nn.Module
    lenient: bool = False


def attention_modules(model: nn.Module,
                      select: Optional[Sequence[str]] = None) -> List[AttentionModule]:
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
        attn = window if isinstance(window, nn.Module) else attn
        if block.spec is not None and not readable_attention(attn):
            continue  # a zoo layer whose attention computes its maps in a way not read here
        found.append(AttentionModule(block.name, attn, block.spec is not None))
    return found


def readable_attention(attn: nn.Module) -> bool:
    """Whether :class:`AttentionRecorder` can read the maps of ``attn``: it stores them, gives
    ``attention_map(x)``, has a softmax module, or a fused ``qkv`` projection with
    ``num_heads``."""
    return (hasattr(attn, 'keep_attn_map') and callable(getattr(attn, '_store_attn_map', None))
            or callable(getattr(attn, 'attention_map', None))
            or isinstance(getattr(attn, 'softmax', None), nn.Softmax)
            or isinstance(getattr(attn, 'qkv', None), nn.Module)
            and isinstance(getattr(attn, 'num_heads', None), int))


#: ``(layer name, attn (B, H, N, N)) -> Any``, what :class:`AttentionRecorder` keeps of a map
_Reduce = Callable[[str, torch.Tensor], Any]


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
        num_samples (int, optional): rebuild and keep the maps of the first ``num_samples``
            samples of the batch only (the maps cost O(N²) each); None: every sample. Window
            attention (Swin), whose maps are read per window, keeps every window.
    """

    def __init__(self, model: nn.Module, reduce: Optional[_Reduce] = None,
                 select: Optional[Sequence[str]] = None, num_samples: Optional[int] = None):
        self.modules = attention_modules(model, select)
        if not self.modules:
            raise ValueError(f'{type(model).__name__} has no transformer layer with an `attn` '
                             f'module (select={select!r})')
        self.reduce = reduce or (lambda name, attn: attn)
        self.num_samples = check_positive_int('num_samples', num_samples, optional=True)
        self.outputs = OrderedDict()
        #: names of the layers whose maps are read from a softmax (entries >= 0): rebuilt from
        #: ``qkv``, or the output of a window attention's softmax module
        self.softmax_layers = set()
        self._handles = []
        # made once, used at every start(): the (module, pre-hook?, hook) registrations, and
        # the modules that hand out their maps with the sink they write into. The same objects
        # at every recorded iteration keep a compiled model's guards and its side effects on
        # what the recorder reads (see TrajectoryRecorder._block_hooks).
        self._module_hooks = []
        self._map_sinks = []
        for found in self.modules:
            self._add_hooks(found.name, found.module, found.lenient)

    @property
    def active(self) -> bool:
        """Whether hooks are registered."""
        return bool(self._handles)

    def start(self) -> 'AttentionRecorder':
        """Register the hooks and switch on the map keeping of the layers that store their maps
        (idempotent); returns the recorder."""
        if self.active:
            return self
        for module, sink in self._map_sinks:
            module.keep_attn_map = True
            module._attn_map_sink = sink
        for module, before, hook in self._module_hooks:
            self._handles.append(
                module.register_forward_pre_hook(hook) if before else module.
                register_forward_hook(hook))
        return self

    def stop(self) -> 'AttentionRecorder':
        """Remove every hook this recorder registered and switch the layers' map keeping off,
        emptying what they held; keeps :attr:`outputs`. Returns the recorder."""
        for handle in self._handles:
            handle.remove()
        for module, sink in self._map_sinks:
            module.keep_attn_map = False
            module._attn_map_sink = None
            sink[0].clear()
        self._handles = []
        return self

    def _first(self, batch):
        """The first ``num_samples`` samples of a batch-first tensor."""
        return batch if self.num_samples is None else batch[:self.num_samples]

    def _keep(self, name, attn):
        with torch.no_grad():
            self.outputs.setdefault(name, []).append(self.reduce(name, attn.detach()))

    def _add_hooks(self, name, attn, lenient=False):
        """Make the hooks that read the maps of one attention module (``lenient``: skip a
        ``qkv`` output that is not ``(B, N, 3C)``)."""

        def add(module, before, hook):
            self._module_hooks.append((module, before, opaque_to_compiler(hook)))

        # window attention sees (batch · windows, ...): its maps are kept whole
        first = (lambda batch: batch) if hasattr(attn, 'window_size') else self._first

        if hasattr(attn, 'keep_attn_map') and callable(getattr(attn, '_store_attn_map', None)):
            sink = ({}, name)  # the module stores its map as sink[0][name]

            def on_output(module, args, output):
                if name in sink[0]:
                    self._keep(name, first(sink[0].pop(name)))

            self._map_sinks.append((attn, sink))
            add(attn, False, on_output)
            return
        if callable(getattr(attn, 'attention_map', None)):

            def on_input(module, args):
                with torch.no_grad():
                    self._keep(name, module.attention_map(first(args[0].detach())))

            add(attn, True, on_input)
            return
        softmax = getattr(attn, 'softmax', None)
        if isinstance(softmax, nn.Softmax):  # window attention: the map itself, bias and mask in
            self.softmax_layers.add(name)

            def on_softmax(module, args, output):
                self._keep(name, output)

            add(softmax, False, on_softmax)
            return
        qkv = getattr(attn, 'qkv', None)
        num_heads = getattr(attn, 'num_heads', None)
        if not isinstance(qkv, nn.Module) or not isinstance(num_heads, int):
            raise ValueError(f'attention module {name}.attn ({type(attn).__name__}) has neither '
                             'attention_map(x) nor a fused `qkv` projection with `num_heads`')
        scale = _scale_of(attn)
        self.softmax_layers.add(name)

        def on_qkv(module, args, output):
            if lenient and output.dim() != 3:
                return
            with torch.no_grad():
                self._keep(name, attention_from_qkv(first(output.detach()), num_heads, scale))

        add(qkv, False, on_qkv)
