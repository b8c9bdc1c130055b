"""How the recorders read the Euler steps of a block class: taps, step sizes, specs.

A :class:`BlockSpec` describes one residual block class by its steps: each :class:`Step` says
where its state before (``start``) and after (``end``) is read and where its step size Δ_t is,
in a small tap language (docs/diagnostics.md, "Which modules are steps"):

* taps: ``'in'`` (the block's input), ``'out'`` (its output), ``'input:<sub>'`` (the first
  positional input of submodule ``<sub>`` at its first call in the block's pass;
  ``'input:<sub>#k'`` at its k-th call), ``'output:<sub>'`` (its output), ``'kwarg:<sub>:<name>'``
  (its keyword argument ``<name>``);
* step sizes: None (Δ = 1), ``'param:<path>:channels_first|channels_last'`` (a parameter of
  per-channel step sizes, e.g. ConvNeXt's ``gamma``), ``'layer_scale:<sub>'`` (a ``LayerScale``
  module: its ``weight``, laid out as its ``data_format`` says), ``'output:<sub>'`` (the output
  of ``<sub>`` is Δ, e.g. an SE gate), or a product of these joined by ``' * '`` (an adaptor's
  Δ times the block's layer scale).

The same description writes a step (:mod:`mmstiff.models.written`): ``branch`` is the tap where
f is formed before the block adds it (an ``input:`` or ``output:`` tap; the writer replaces that
tensor by Δ ⊙ f), ``state`` where x_t is formed when it is not ``start`` (a projected shortcut,
used where the block has that submodule). A spec with ``kind`` set is read by that built-in kind
(:data:`mmstiff.analysis.blocks.BLOCK_KINDS`) and its steps serve writing only.

Nothing here imports a model; the specs of upstream classes are in :mod:`mmstiff.analysis.zoo`.
"""
from typing import Callable, NamedTuple, Optional, Sequence, Tuple, Union

TAP_KINDS = ('in', 'out', 'input', 'output', 'kwarg')
SCALE_KINDS = ('param', 'layer_scale', 'output')
LAYOUTS = ('channels_first', 'channels_last')


class Step(NamedTuple):
    """One Euler step ``end = start + Δ ⊙ f`` inside a block.

    Attributes:
        name (str): the step's name in the records of a block of several steps
            (``<block>.<name>``; ``'msa'`` and ``'mlp'`` for a token mixer and its MLP).
        start (str): the tap of the state before the step.
        end (str): the tap of the state after the step.
        scale (str | None): where Δ_t is read; None for Δ_t = 1.
        branch (str | None): where f is formed before it is added (``input:<sub>[#k]`` or
            ``output:<sub>[#k]``), for writing; None: the step cannot be written.
        state (str | None): where x_t is formed for writing when it is not ``start``: taps
            joined by ``|``, the first whose submodule the block has (not None) is used (the
            output of a projection shortcut, else the input of the first submodule, which a
            checkpointed pass recomputes with the block).
    """
    name: str = 'block'
    start: str = 'in'
    end: str = 'out'
    scale: Optional[str] = None
    branch: Optional[str] = None
    state: Optional[str] = None


class BlockSpec(NamedTuple):
    """How to read one residual block class.

    Attributes:
        cls (str): the class's full name, ``'package.module.QualName'``.
        family (str): the backbone family it belongs to (for the docs and plots).
        steps (Sequence[Step]): its Euler steps in order.
        residual (str | callable | None): an attribute name (or ``module -> bool``) that says
            whether an instance adds its input at all (an inverted residual does only where its
            input and output shapes agree); None: every instance does.
        note (str): one line on how the block is read, for the docs.
        kind (str | None): a built-in kind (``'conv'``, ``'transformer'``) that reads the
            block; its steps then only say how to write it. None: read by the taps.
        unwritten (str): why the steps without a ``branch`` cannot be written ('' where
            every step has one).
    """
    cls: str
    family: str
    steps: Sequence[Step] = (Step(), )
    residual: Optional[Union[str, Callable]] = None
    note: str = ''
    kind: Optional[str] = None
    unwritten: str = ''


class Tap(NamedTuple):
    """A parsed tap: ``kind`` (:data:`TAP_KINDS`), ``path`` of the submodule, ``call`` (1-based
    call index) and ``arg`` (a keyword argument's name)."""
    kind: str
    path: str = ''
    call: int = 1
    arg: str = ''


class Scale(NamedTuple):
    """A parsed step-size source: ``kind`` (:data:`SCALE_KINDS`), ``path`` and ``layout``."""
    kind: str
    path: str
    layout: str = ''


def parse_tap(text: str) -> Tap:
    """The :class:`Tap` of a tap string; ``ValueError`` naming the string otherwise."""
    if text in ('in', 'out'):
        return Tap(text)
    kind, _, rest = str(text).partition(':')
    if kind == 'kwarg':
        path, _, arg = rest.rpartition(':')
        if path and arg:
            return Tap(kind, path, 1, arg)
    elif kind in ('input', 'output') and rest:
        path, _, call = rest.partition('#')
        if path and (not call or call.isdigit() and int(call) >= 1):
            return Tap(kind, path, int(call or 1))
    raise ValueError(f'tap={text!r} is not supported; expected in, out, input:<submodule>[#k], '
                     'output:<submodule> or kwarg:<submodule>:<name>')


def parse_scales(text: Optional[str]) -> Tuple[Scale, ...]:
    """The factors of a step-size string (``'a * b'``): a tuple of :class:`Scale` (empty for
    None); ``ValueError`` naming the string otherwise."""
    if text is None:
        return ()
    return tuple(parse_scale(part.strip()) for part in str(text).split(' * '))


def parse_branch(text: str) -> Tap:
    """The :class:`Tap` of a branch (where f is formed): an ``input:`` or ``output:`` tap."""
    tap = parse_tap(text)
    if tap.kind not in ('input', 'output'):
        raise ValueError(f'branch={text!r} is not supported; expected input:<submodule>[#k] or '
                         'output:<submodule>[#k], the tensor f before the block adds it')
    return tap


def parse_scale(text: Optional[str]) -> Optional[Scale]:
    """The :class:`Scale` of a step-size string (None for None); ``ValueError`` otherwise."""
    if text is None:
        return None
    kind, _, rest = str(text).partition(':')
    if kind == 'param':
        path, _, layout = rest.rpartition(':')
        if path and layout in LAYOUTS:
            return Scale(kind, path, layout)
    elif kind in ('layer_scale', 'output') and rest:
        return Scale(kind, rest)
    raise ValueError(f'scale={text!r} is not supported; expected None, '
                     'param:<path>:channels_first|channels_last, layer_scale:<submodule> or '
                     'output:<submodule>')


def check_spec(spec: BlockSpec) -> BlockSpec:
    """``spec`` if its steps parse, else ``ValueError`` naming the class and the step."""
    if not spec.steps:
        raise ValueError(f'the spec of {spec.cls} has no step')
    names = [step.name for step in spec.steps]
    if len(set(names)) != len(names):
        raise ValueError(f'the spec of {spec.cls} names its steps {names}: names must differ')
    for step in spec.steps:
        try:
            parse_tap(step.start), parse_tap(step.end), parse_scales(step.scale)
            if step.branch is not None:
                parse_branch(step.branch)
            for text in (step.state or '').split('|'):
                if text:
                    parse_tap(text)
        except ValueError as error:
            raise ValueError(f'the spec of {spec.cls}, step {step.name!r}: {error}') from None
    if spec.kind is not None and spec.kind not in ('conv', 'preact', 'transformer'):
        raise ValueError(f'the spec of {spec.cls} has kind={spec.kind!r}; expected None, conv, '
                         'preact or transformer')
    return spec


def write_refusal(spec: BlockSpec, steps: Optional[Sequence[Step]] = None) -> str:
    """Why ``steps`` of ``spec`` (default: all of them) cannot be written ('' where they can):
    a step without a branch, with the spec's ``unwritten`` reason where it gives one."""
    missing = [
        step.name for step in (spec.steps if steps is None else steps) if step.branch is None
    ]
    if not missing:
        return ''
    why = spec.unwritten or ('its spec names no branch (where f is formed before it is added)')
    return f'steps {missing}: {why}'


def contiguous(steps: Sequence[Step]) -> bool:
    """Whether each step starts where the one before it ends (so that the block as a whole,
    from the first start to the last end, is one move along the trajectory)."""
    return all(a.end == b.start for a, b in zip(steps, steps[1:]))


__all__ = [
    'Step', 'BlockSpec', 'Tap', 'Scale', 'parse_tap', 'parse_scale', 'parse_scales', 'parse_branch',
    'check_spec', 'contiguous', 'write_refusal', 'TAP_KINDS', 'SCALE_KINDS', 'LAYOUTS'
]
