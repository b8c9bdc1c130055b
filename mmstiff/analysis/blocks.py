"""Which modules of a network are Euler steps, and how to read their states (METHODS.md §0).

A *residual block* is a module whose forward computes ``x_{t+1} = act(x_t + Δ_t ⊙ f(x_t))``.
The trajectory recorder needs, per block, the state before the step ``x_t`` and after it
``x_{t+1}`` (the block output). Three kinds of blocks cover mmpretrain, mmdet and mmstiff:

``'conv'``
    Post-activation ResNet blocks, ``x_{t+1} = act(x_t + Δ_t ⊙ f)``: ``x_t`` is the block input
    or, where the block changes shape, ``act(P x)`` with ``P`` its projection shortcut (the
    submodule named ``downsample`` or ``shortcut``) and ``act`` its activation module
    (``relu``). Taking the projected state through the activation keeps both ends of the step
    in the same post-activation space, as the input of every other block is; with the raw
    ``P x`` the NSI of each projection block would mostly measure how much of ``P x`` the final
    ReLU clips, not the step.
``'preact'``
    Pre-activation blocks, ``x_{t+1} = x_t + Δ_t ⊙ f`` with no activation after the add:
    ``x_t`` is the block input or its projection ``P(...)``, as is.
``'transformer'``
    Pre-norm transformer layers (ViT encoder layers, Swin blocks), two Euler steps: the MSA
    step from the layer input to the input of the second pre-norm (``ln2`` / ``norm2``), and
    the MLP step from there to the layer output.

Discovery is by class (:func:`register_block_type`, pre-filled with the upstream classes when
their packages import) or by any predicate (``is_block=`` of the recorder). Subclasses of a
registered class are blocks of the same kind (mmstiff's step blocks subclass the upstream ones).

A block's *step size* is the output of the :class:`~mmstiff.models.steps.StepAdaptor` inside
it. mmpretrain's ``SELayer`` is read as a step-size source too: its gate
``sigmoid(W2 relu(W1 GAP(f)))`` is the step size Δ_t of the SE block (METHODS.md §0, §3;
stepnet-appendix Appendix D measures NSI against exactly these attention values).
"""
import importlib

import torch.nn as nn

BLOCK_KINDS = ('conv', 'preact', 'transformer')
#: names of a conv block's projection shortcut, tried in order.
SHORTCUT_NAMES = ('downsample', 'shortcut')
#: names of a transformer layer's second pre-norm (the input of the MLP branch), tried in order.
SECOND_NORM_NAMES = ('ln2', 'norm2')

_BLOCK_TYPES = {}  # class -> kind

_UPSTREAM_BLOCKS = (
    ('mmpretrain.models.backbones.resnet', ('BasicBlock', 'Bottleneck'), 'conv'),
    ('mmpretrain.models.backbones.vision_transformer', ('TransformerEncoderLayer', ),
     'transformer'),
    ('mmpretrain.models.backbones.swin_transformer', ('SwinBlock', ), 'transformer'),
    ('mmdet.models.backbones.resnet', ('BasicBlock', 'Bottleneck'), 'conv'),
    ('mmdet.models.backbones.swin', ('SwinBlock', ), 'transformer'),
    ('mmstiff.models.backbones.preact_resnet', ('PreActBasicBlock', 'PreActBottleneck'),
     'preact'),
)
_upstream_loaded = False


def register_block_type(cls, kind='conv'):
    """Declare ``cls`` (and its subclasses) a residual block of ``kind`` (``'conv'``,
    ``'preact'`` or ``'transformer'``); see the module docstring for what each kind reads."""
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise ValueError(f'cls={cls!r} is not supported; expected an nn.Module subclass')
    if kind not in BLOCK_KINDS:
        raise ValueError(f'kind={kind!r} is not supported; expected one of {BLOCK_KINDS}')
    _BLOCK_TYPES[cls] = kind
    return cls


def _load_upstream():
    global _upstream_loaded
    if _upstream_loaded:
        return
    _upstream_loaded = True
    for module_name, names, kind in _UPSTREAM_BLOCKS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            cls = getattr(module, name, None)
            if cls is not None:
                register_block_type(cls, kind)


def block_kind(module):
    """``'conv'``, ``'preact'``, ``'transformer'`` or None (not a registered residual block)."""
    _load_upstream()
    for cls in type(module).__mro__:
        if cls in _BLOCK_TYPES:
            return _BLOCK_TYPES[cls]
    return None


def is_residual_block(module):
    """Whether ``module`` is a residual block of a registered kind (registry-free predicate)."""
    return block_kind(module) is not None


def shortcut_of(block):
    """The projection shortcut submodule of a conv block, or None (identity shortcut)."""
    for name in SHORTCUT_NAMES:
        sub = getattr(block, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


def activation_of(block):
    """The activation module applied after the add of a post-activation block, or None."""
    act = getattr(block, 'relu', None)
    return act if isinstance(act, nn.Module) else None


def second_norm_of(layer):
    """The pre-norm of a transformer layer's MLP branch, or None if it has none we know."""
    for name in SECOND_NORM_NAMES:
        sub = getattr(layer, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


def find_blocks(model, is_block=None):
    """``[(name, module, kind)]`` of the residual blocks of ``model``, outermost first.

    Blocks nested inside a found block are not listed again.

    Args:
        model (nn.Module): any network (a backbone, a classifier, a detector).
        is_block (callable, optional): ``module -> kind | None`` (or a bool, read as
            ``'conv'``), replacing the class-based :func:`block_kind`.
    """
    found = []
    inside = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix + '.') for prefix in inside):
            continue
        kind = is_block(module) if is_block is not None else block_kind(module)
        if kind is True:
            kind = 'conv'
        if kind:
            if kind not in BLOCK_KINDS:
                raise ValueError(f'is_block returned {kind!r} for {name!r}; expected one of '
                                 f'{BLOCK_KINDS}, True, or a false value')
            found.append((name, module, kind))
            inside.append(name)
    return found


def _step_source_types():
    types = []
    try:
        from mmstiff.models.steps.base import StepAdaptor
        types.append(StepAdaptor)
    except ImportError:  # pragma: no cover - the package always ships it
        pass
    return tuple(types)


def _se_gate_modules(block):
    """The gate submodules (output = Δ) of mmpretrain ``SELayer`` modules inside ``block``."""
    try:
        from mmpretrain.models.utils import SELayer
    except ImportError:
        return []
    gates = []
    for module in block.modules():
        if isinstance(module, SELayer) and isinstance(getattr(module, 'conv2', None), nn.Module):
            gates.append(module.conv2)
    return gates


def step_sources(block, read_se_gates=True):
    """Submodules of ``block`` whose forward output is a step size Δ_t, in registration order.

    These are the :class:`StepAdaptor` modules, plus (with ``read_se_gates``) the sigmoid gate
    of each mmpretrain ``SELayer``.
    """
    adaptor_types = _step_source_types()
    sources, names = [], []
    for name, module in block.named_modules():
        if adaptor_types and isinstance(module, adaptor_types) and not any(
                name.startswith(outer + '.') for outer in names):
            sources.append(module)
            names.append(name)
    if read_se_gates:
        sources.extend(_se_gate_modules(block))
    return sources
