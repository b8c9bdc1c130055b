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
  of ``<sub>`` is Δ, e.g. an SE gate).

Nothing here imports a model; the specs of upstream classes are in :mod:`mmstiff.analysis.zoo`.
"""
from typing import Callable, NamedTuple, Optional, Sequence, Union

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
    """
    name: str = 'block'
    start: str = 'in'
    end: str = 'out'
    scale: Optional[str] = None


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
    """
    cls: str
    family: str
    steps: Sequence[Step] = (Step(), )
    residual: Optional[Union[str, Callable]] = None
    note: str = ''


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
            parse_tap(step.start), parse_tap(step.end), parse_scale(step.scale)
        except ValueError as error:
            raise ValueError(f'the spec of {spec.cls}, step {step.name!r}: {error}') from None
    return spec


def contiguous(steps: Sequence[Step]) -> bool:
    """Whether each step starts where the one before it ends (so that the block as a whole,
    from the first start to the last end, is one move along the trajectory)."""
    return all(a.end == b.start for a, b in zip(steps, steps[1:]))


__all__ = [
    'Step', 'BlockSpec', 'Tap', 'Scale', 'parse_tap', 'parse_scale', 'check_spec', 'contiguous',
    'TAP_KINDS', 'SCALE_KINDS', 'LAYOUTS'
]
