"""Which modules of a network are Euler steps, and how to read their states (docs/methods.md §0).

Blocks are found by class (a class attribute ``residual_kind``, the
:class:`~mmstiff.analysis.step_specs.BlockSpec` tables of :mod:`mmstiff.analysis.zoo`, the
upstream ResNet blocks and Swin layers among them, :func:`register_block_type`, a hook's
``block_types``) or by a predicate; step sizes are the outputs of the modules whose class sets
``step_source`` (the adaptors), of the SE gates, and what a spec names (layer scale). Nothing
here imports a model. The kinds of block and their states are in docs/diagnostics.md, "Which
modules are steps".
"""
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Type, Union

import torch.nn as nn

from .step_specs import BlockSpec, Step, check_spec

BLOCK_KINDS = ('conv', 'preact', 'transformer')
#: names of a conv block's projection shortcut, tried in order.
SHORTCUT_NAMES = ('downsample', 'shortcut')
#: names of a transformer layer's second pre-norm (the input of the MLP branch), tried in order.
SECOND_NORM_NAMES = ('ln2', 'norm2')
#: the class attribute by which a block class declares its kind (one of :data:`BLOCK_KINDS`).
RESIDUAL_KIND_ATTR = 'residual_kind'
#: the instance attribute holding the spec of a block whose steps the writer placed adaptors on
#: (:mod:`mmstiff.models.written`): it is read by that spec, its adaptors' Δ included.
WRITTEN_SPEC_ATTR = 'written_spec'
#: the class attribute (True) by which a module class declares its output a step size Δ_t.
STEP_SOURCE_ATTR = 'step_source'
#: mmstiff's own block classes that extend an upstream class the zoo reads by a spec, but are
#: read by their kind (their adaptors are their step sizes), by full name -> kind.
MMSTIFF_BLOCKS = {
    'mmstiff.models.backbones.step_vit.StepTransformerEncoderLayer': 'transformer',
}
#: upstream SE layers, by full name -> the name of their gate submodule (output = Δ_t).
UPSTREAM_GATES = {'mmpretrain.models.utils.se_layer.SELayer': 'conv2'}

_BLOCK_TYPES = {}  # class -> kind
_BLOCK_NAMES = dict(MMSTIFF_BLOCKS)  # 'module.QualName' -> kind
_STEP_TYPES = []  # classes whose forward output is a step size
_GATE_TYPES = {}  # class -> name of its submodule whose output is a step size (SE gates)
_GATE_NAMES = dict(UPSTREAM_GATES)  # 'module.QualName' -> gate name

#: a block's kind: one of :data:`BLOCK_KINDS`, or the ``BlockSpec`` of its steps
_Kind = Union[str, BlockSpec]
#: a config's ``block_types``: ``{class name: kind | BlockSpec | dict}`` or a list of names
_BlockTypes = Union[dict, Sequence[str]]


class ResidualBlock(NamedTuple):
    """A residual block found in a network: its module name, the module, its kind and, for a
    block read by its taps, its :class:`~mmstiff.analysis.step_specs.BlockSpec`."""
    name: str
    module: nn.Module
    kind: str
    spec: Optional[BlockSpec] = None


def _check_module_class(cls):
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise ValueError(f'cls={cls!r} is not supported; expected an nn.Module subclass')
    return cls


def register_block_type(cls: Union[Type[nn.Module], str],
                        kind: _Kind = 'conv') -> Union[Type[nn.Module], str]:
    """Declare ``cls`` (and its subclasses) a residual block of ``kind`` (``'conv'``,
    ``'preact'`` or ``'transformer'``, or a :class:`~mmstiff.analysis.step_specs.BlockSpec`
    of its steps); see the module docstring for what each kind reads.

    For block classes that declare nothing themselves (:data:`RESIDUAL_KIND_ATTR`); returns
    ``cls``. ``cls`` may also be given by its full name (``'package.module.Block'``), for a
    class of a package the caller does not import.
    """
    kind = check_block_kind(kind, f'register_block_type({cls!r})')
    if isinstance(cls, str) and '.' in cls:
        _BLOCK_NAMES[cls] = kind
    else:
        _BLOCK_TYPES[_check_module_class(cls)] = kind
    return cls


def check_block_kind(kind: Any, where: str = 'kind') -> Any:
    """``kind`` if it is one of :data:`BLOCK_KINDS` or a valid ``BlockSpec``, else
    ``ValueError`` naming ``where`` and the value."""
    if isinstance(kind, BlockSpec):
        return check_spec(kind)
    if kind not in BLOCK_KINDS:
        raise ValueError(f'{where}: kind={kind!r} is not supported; expected one of '
                         f'{BLOCK_KINDS} or a BlockSpec')
    return kind


def register_step_type(cls: Type[nn.Module]) -> Type[nn.Module]:
    """Declare ``cls`` (and its subclasses) a step-size source: the output of its forward is
    the step size Δ_t of the block it sits in (for classes without :data:`STEP_SOURCE_ATTR`).
    Returns ``cls``."""
    if _check_module_class(cls) not in _STEP_TYPES:
        _STEP_TYPES.append(cls)
    return cls


def register_step_gate(cls: Type[nn.Module], gate: str) -> Type[nn.Module]:
    """Declare the submodule ``gate`` of every ``cls`` module a step-size source (the sigmoid
    gate of an SE layer, read with ``read_se_gates``). Returns ``cls``."""
    _check_module_class(cls)
    if not isinstance(gate, str) or not gate:
        raise ValueError(f'gate={gate!r} is not supported; expected the name of a submodule')
    _GATE_TYPES[cls] = gate
    return cls


def _full_name(cls):
    return f'{cls.__module__}.{cls.__qualname__}'


def _declared(module, declared=None):
    """What ``module``'s class is declared as: a kind, a ``BlockSpec`` or None. Walks the MRO,
    the nearest class first; at each class ``declared`` (``{class name or full name: kind}``,
    a config's ``block_types``) comes first, then :func:`register_block_type`, the zoo's specs,
    the upstream names and the class's own :data:`RESIDUAL_KIND_ATTR`."""
    from .zoo import zoo_specs  # the tables import nothing heavy, but only when asked
    specs = zoo_specs()
    for cls in type(module).__mro__:
        full = _full_name(cls)
        if declared:
            kind = declared.get(full) or declared.get(cls.__name__)
            if kind:
                return kind
        kind = (
            _BLOCK_TYPES.get(cls) or _BLOCK_NAMES.get(full) or specs.get(full)
            or cls.__dict__.get(RESIDUAL_KIND_ATTR))
        if kind:
            return kind
    return None


def _residual_here(module, spec):
    """Whether this instance of a spec's class makes its residual addition."""
    if spec.residual is None:
        return True
    if callable(spec.residual):
        return bool(spec.residual(module))
    return bool(getattr(module, spec.residual, False))


def block_reading(module: nn.Module,
                  declared: Optional[dict] = None) -> Tuple[Optional[str], Optional[BlockSpec]]:
    """``(kind, spec)`` of ``module``: its kind (:data:`BLOCK_KINDS`) and the ``BlockSpec`` it
    is read by (None for the three built-in readings), or ``(None, None)`` if it is no
    residual block (an inverted residual whose shapes change is none). ``declared``: a
    config's ``block_types`` (``{class name: kind | BlockSpec}``), searched first."""
    kind = getattr(module, WRITTEN_SPEC_ATTR, None) or _declared(module, declared)
    if not isinstance(kind, BlockSpec):
        return kind or None, None
    if not _residual_here(module, kind):
        return None, None
    if kind.kind is not None:  # read by a built-in kind; its steps say how to write it
        return kind.kind, None
    return ('conv' if len(kind.steps) == 1 else 'transformer'), kind


def block_spec(module: nn.Module, declared: Optional[dict] = None) -> Optional[BlockSpec]:
    """The :class:`~mmstiff.analysis.step_specs.BlockSpec` that describes ``module``'s steps
    (a spec of a block read by a built-in kind included), or None: the description the
    writer (:mod:`mmstiff.models.written`) places step sizes by. An instance's own
    ``written_spec`` attribute (set by the writer) comes first."""
    own = getattr(module, WRITTEN_SPEC_ATTR, None)
    if isinstance(own, BlockSpec):
        return own
    kind = _declared(module, declared)
    return kind if isinstance(kind, BlockSpec) else None


def block_kind(module: nn.Module) -> Optional[str]:
    """``'conv'``, ``'preact'``, ``'transformer'`` or None (not a registered residual block)."""
    return block_reading(module)[0]


def is_residual_block(module: nn.Module) -> bool:
    """Whether ``module`` is a residual block of a registered kind (registry-free predicate)."""
    return block_kind(module) is not None


def _first_submodule(module, names):
    """The first of the attributes ``names`` of ``module`` that is a module, or None."""
    for name in names:
        sub = getattr(module, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


def shortcut_of(block: nn.Module) -> Optional[nn.Module]:
    """The projection shortcut submodule of a conv block, or None (identity shortcut)."""
    return _first_submodule(block, SHORTCUT_NAMES)


def activation_of(block: nn.Module) -> Optional[nn.Module]:
    """The activation module applied after the add of a post-activation block, or None."""
    return _first_submodule(block, ('relu', ))


def second_norm_of(layer: nn.Module) -> Optional[nn.Module]:
    """The pre-norm of a transformer layer's MLP branch, or None if it has none we know."""
    return _first_submodule(layer, SECOND_NORM_NAMES)


def find_blocks(model: nn.Module, is_block: Optional[Callable[[nn.Module], Any]] = None,
                block_types: Optional[_BlockTypes] = None) -> List[ResidualBlock]:
    """:class:`ResidualBlock` ``(name, module, kind, spec)`` records of the residual blocks of
    ``model``, outermost first.

    Blocks nested inside a found block are not listed again.

    Args:
        model (nn.Module): any network (a backbone, a classifier, a detector).
        is_block (callable, optional): ``module -> kind | BlockSpec | None`` (or a bool, read
            as ``'conv'``), replacing the class-based :func:`block_reading`.
        block_types (dict | Sequence[str], optional): ``{class name or full name: kind |
            BlockSpec}`` declared by a config (or a list of class names), searched before
            everything else (:func:`block_types_of`).
    """
    declared = block_types_of(block_types)
    found = []
    inside = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix + '.') for prefix in inside):
            continue
        if is_block is not None:
            kind = is_block(module)
            kind = 'conv' if kind is True else kind
            if kind and not isinstance(kind, BlockSpec) and kind not in BLOCK_KINDS:
                raise ValueError(f'is_block returned {kind!r} for {name!r}; expected one of '
                                 f'{BLOCK_KINDS}, a BlockSpec, True, or a false value')
            spec = None
            if isinstance(kind, BlockSpec):
                spec = check_spec(kind)
                kind = 'conv' if len(spec.steps) == 1 else 'transformer'
        else:
            kind, spec = block_reading(module, declared)
        if kind:
            found.append(ResidualBlock(name, module, kind, spec))
            inside.append(name)
    return found


def block_types_of(block_types: Optional[_BlockTypes]) -> Optional[Dict[str, _Kind]]:
    """The ``{class name: kind | BlockSpec}`` of a config's ``block_types``: a dict whose
    values are kinds, ``BlockSpec``s or dicts of a spec's fields (``steps`` as dicts of
    :class:`~mmstiff.analysis.step_specs.Step` fields), or a list of class names (each
    ``'conv'``). ``ValueError`` naming the entry otherwise."""
    if block_types is None:
        return None
    if isinstance(block_types, (list, tuple)):
        block_types = {name: 'conv' for name in block_types}
    if not isinstance(block_types, dict):
        raise ValueError(f'block_types={block_types!r} is not supported; expected a dict '
                         "{class name: kind}, e.g. dict(ConvNeXtBlock='conv')")
    declared = {}
    for name, kind in block_types.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f'block_types has the key {name!r}; expected a class name')
        try:
            if isinstance(kind, dict):
                kind = _spec_from_dict(name, kind)
            declared[name] = check_block_kind(kind, f'block_types[{name!r}]')
        except ValueError as error:
            where = f'block_types[{name!r}]'
            raise ValueError(error if str(error).startswith(where) else f'{where}: {error}') \
                from None
    return declared


def _spec_from_dict(name, fields):
    """A ``BlockSpec`` from a config dict ``dict(steps=[dict(name=, start=, end=, scale=,
    branch=, state=)], residual=...)``."""
    fields = dict(fields)
    unknown = set(fields) - {'steps', 'residual', 'family', 'note', 'unwritten'}
    if unknown:
        raise ValueError(f'block_types[{name!r}] has the keys {sorted(unknown)}; expected steps, '
                         'residual, family, note, unwritten')
    steps = []
    for step in fields.pop('steps', [{}]):
        try:
            steps.append(Step(**step))
        except TypeError:
            raise ValueError(f'block_types[{name!r}]: step {step!r} is not supported; expected '
                             'a dict of name, start, end, scale, branch, state') from None
    fields.setdefault('family', name.rpartition('.')[2])
    return BlockSpec(cls=name, steps=tuple(steps), **fields)


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


def step_sources(block: nn.Module, read_se_gates: bool = True) -> List[nn.Module]:
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
