"""Which modules of a network are Euler steps, and how to read their states (docs/methods.md §0).

Blocks are found by class (a class attribute ``residual_kind``, the upstream classes listed
here by name, or :func:`register_block_type`) or by a predicate; step sizes are the outputs of
the modules whose class sets ``step_source`` (the adaptors) and of the SE gates. Nothing here
imports a model. The three kinds of block and their states are in docs/diagnostics.md, "Which
modules are steps".
"""
from typing import NamedTuple

import torch.nn as nn

BLOCK_KINDS = ('conv', 'preact', 'transformer')
#: names of a conv block's projection shortcut, tried in order.
SHORTCUT_NAMES = ('downsample', 'shortcut')
#: names of a transformer layer's second pre-norm (the input of the MLP branch), tried in order.
SECOND_NORM_NAMES = ('ln2', 'norm2')
#: the class attribute by which a block class declares its kind (one of :data:`BLOCK_KINDS`).
RESIDUAL_KIND_ATTR = 'residual_kind'
#: the class attribute (True) by which a module class declares its output a step size Δ_t.
STEP_SOURCE_ATTR = 'step_source'
#: upstream block classes, by full name (their packages are not imported here) -> kind.
UPSTREAM_BLOCKS = {
    'mmpretrain.models.backbones.resnet.BasicBlock': 'conv',
    'mmpretrain.models.backbones.resnet.Bottleneck': 'conv',
    'mmdet.models.backbones.resnet.BasicBlock': 'conv',
    'mmdet.models.backbones.resnet.Bottleneck': 'conv',
    'mmpretrain.models.backbones.vision_transformer.TransformerEncoderLayer': 'transformer',
    'mmpretrain.models.backbones.swin_transformer.SwinBlock': 'transformer',
    'mmdet.models.backbones.swin.SwinBlock': 'transformer',
}
#: upstream SE layers, by full name -> the name of their gate submodule (output = Δ_t).
UPSTREAM_GATES = {'mmpretrain.models.utils.se_layer.SELayer': 'conv2'}

_BLOCK_TYPES = {}  # class -> kind
_BLOCK_NAMES = dict(UPSTREAM_BLOCKS)  # 'module.QualName' -> kind
_STEP_TYPES = []  # classes whose forward output is a step size
_GATE_TYPES = {}  # class -> name of its submodule whose output is a step size (SE gates)
_GATE_NAMES = dict(UPSTREAM_GATES)  # 'module.QualName' -> gate name


class ResidualBlock(NamedTuple):
    """A residual block found in a network: its module name, the module and its kind."""
    name: str
    module: nn.Module
    kind: str


def _check_module_class(cls):
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise ValueError(f'cls={cls!r} is not supported; expected an nn.Module subclass')
    return cls


def register_block_type(cls, kind='conv'):
    """Declare ``cls`` (and its subclasses) a residual block of ``kind`` (``'conv'``,
    ``'preact'`` or ``'transformer'``); see the module docstring for what each kind reads.

    For block classes that declare nothing themselves (:data:`RESIDUAL_KIND_ATTR`); returns
    ``cls``. ``cls`` may also be given by its full name (``'package.module.Block'``), for a
    class of a package the caller does not import.
    """
    if kind not in BLOCK_KINDS:
        raise ValueError(f'kind={kind!r} is not supported; expected one of {BLOCK_KINDS}')
    if isinstance(cls, str) and '.' in cls:
        _BLOCK_NAMES[cls] = kind
    else:
        _BLOCK_TYPES[_check_module_class(cls)] = kind
    return cls


def register_step_type(cls):
    """Declare ``cls`` (and its subclasses) a step-size source: the output of its forward is
    the step size Δ_t of the block it sits in (for classes without :data:`STEP_SOURCE_ATTR`).
    Returns ``cls``."""
    if _check_module_class(cls) not in _STEP_TYPES:
        _STEP_TYPES.append(cls)
    return cls


def register_step_gate(cls, gate):
    """Declare the submodule ``gate`` of every ``cls`` module a step-size source (the sigmoid
    gate of an SE layer, read with ``read_se_gates``). Returns ``cls``."""
    _check_module_class(cls)
    if not isinstance(gate, str) or not gate:
        raise ValueError(f'gate={gate!r} is not supported; expected the name of a submodule')
    _GATE_TYPES[cls] = gate
    return cls


def _full_name(cls):
    return f'{cls.__module__}.{cls.__qualname__}'


def block_kind(module):
    """``'conv'``, ``'preact'``, ``'transformer'`` or None (not a registered residual block)."""
    for cls in type(module).__mro__:
        kind = (
            _BLOCK_TYPES.get(cls) or _BLOCK_NAMES.get(_full_name(cls))
            or cls.__dict__.get(RESIDUAL_KIND_ATTR))
        if kind:
            return kind
    return None


def is_residual_block(module):
    """Whether ``module`` is a residual block of a registered kind (registry-free predicate)."""
    return block_kind(module) is not None


def _first_submodule(module, names):
    """The first of the attributes ``names`` of ``module`` that is a module, or None."""
    for name in names:
        sub = getattr(module, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


def shortcut_of(block):
    """The projection shortcut submodule of a conv block, or None (identity shortcut)."""
    return _first_submodule(block, SHORTCUT_NAMES)


def activation_of(block):
    """The activation module applied after the add of a post-activation block, or None."""
    return _first_submodule(block, ('relu', ))


def second_norm_of(layer):
    """The pre-norm of a transformer layer's MLP branch, or None if it has none we know."""
    return _first_submodule(layer, SECOND_NORM_NAMES)


def find_blocks(model, is_block=None):
    """:class:`ResidualBlock` ``(name, module, kind)`` records of the residual blocks of
    ``model``, outermost first.

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
            found.append(ResidualBlock(name, module, kind))
            inside.append(name)
    return found


def _se_gate_modules(block):
    """The gate submodules (output = Δ) of the SE layers (declared gates) inside ``block``."""
    gates = []
    for module in block.modules():
        gate = getattr(module, _gate_name(type(module)) or '', None)
        if isinstance(gate, nn.Module):
            gates.append(gate)
    return gates


def _gate_name(cls):
    """The gate submodule's name of a declared SE layer class (or a subclass), or None."""
    for base in cls.__mro__:
        name = _GATE_TYPES.get(base) or _GATE_NAMES.get(_full_name(base))
        if name:
            return name
    return None


def _is_step_source(module):
    return bool(getattr(type(module), STEP_SOURCE_ATTR, False)) or isinstance(
        module, tuple(_STEP_TYPES))


def step_sources(block, read_se_gates=True):
    """Submodules of ``block`` whose forward output is a step size Δ_t, in registration order.

    These are the step-size adaptors (outermost ones), plus (with ``read_se_gates``) the sigmoid
    gate of each SE layer (mmpretrain's ``SELayer``).
    """
    sources, names = [], []
    for name, module in block.named_modules():
        if _is_step_source(module) and not any(name.startswith(outer + '.') for outer in names):
            sources.append(module)
            names.append(name)
    if read_se_gates:
        sources.extend(_se_gate_modules(block))
    return sources
