"""Forward hooks that read a block's steps by its :class:`~mmstiff.analysis.step_specs.BlockSpec`.

The taps of a spec are resolved to submodules once, when the recorder is built (a spec that
names a submodule the block does not have stops there, naming the block); each recorded pass
then keeps the tapped states of the block and hands out one ``(step, x_t, x_next, Δ_t)`` per
step when the block's forward ends. A tap that the pass did not reach, or a step whose two
states differ in shape, raises ``ValueError`` naming the block: such a block is not read as
its spec says, and its numbers would not mean what they seem to.
"""
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn

from .step_specs import BlockSpec, Scale, Step, Tap, contiguous, parse_scales, parse_tap


class SpecStep(NamedTuple):
    """One step as read in one pass: the step, its two states and its step size (or None)."""
    step: Step
    x_t: torch.Tensor
    x_next: torch.Tensor
    delta: Optional[torch.Tensor]


def _submodule(block_name, block, path, what):
    try:
        return block.get_submodule(path)
    except AttributeError:
        names = [name for name, _ in block.named_children()]
        raise ValueError(f'block {block_name} ({type(block).__name__}) has no submodule {path!r}, '
                         f'which its spec reads {what} from; its submodules are {names}. Declare '
                         'its steps in block_types (docs/diagnostics.md, "Which modules are '
                         'steps")') from None


def first_tensor(value: Any) -> Optional[torch.Tensor]:
    """``value`` if a tensor, else the first tensor of a (nested) tuple or list's first items
    (a block that takes its branches' states as a list, as TridentNet's does), else None."""
    while isinstance(value, (tuple, list)) and value:
        value = value[0]
    return value if torch.is_tensor(value) else None


def _channels(value, layout, dim):
    """A per-channel step size ``(C,)`` laid out against a ``dim``-dimensional state, with a
    leading batch axis of 1: ``(1, C, 1, 1)`` (channels first) or ``(1, 1, C)`` (last)."""
    value = value.detach().reshape(-1)
    if layout == 'channels_first':
        return value.reshape(1, -1, *([1] * (dim - 2)))
    return value.reshape(*([1] * (dim - 1)), -1)


class SpecReader:
    """The hooks and the per-pass scratch of one block read by its spec.

    Args:
        name (str): the block's module name.
        block (nn.Module): the block.
        spec (BlockSpec): how it is read.
        cut (callable): ``tensor -> tensor`` applied to every kept state (detach, first
            samples).
    """

    def __init__(self, name: str, block: nn.Module, spec: BlockSpec, cut: Callable):
        self.name = name
        self.block = block
        self.spec = spec
        self.steps = tuple(spec.steps)
        self.contiguous = contiguous(self.steps)
        self._cut = cut
        self._taps: Dict[str, Tap] = {}
        for step in self.steps:
            for text in (step.start, step.end):
                self._taps[text] = parse_tap(text)
        # per step, the factors of its step size (an empty tuple: Δ = 1)
        self._scales: List[Tuple[Scale, ...]] = [parse_scales(step.scale) for step in self.steps]
        # path -> the submodule; every tapped or gated submodule gets a pre-hook (its calls
        # are counted) and, for output taps and gates, a forward hook
        self._subs: Dict[str, nn.Module] = {}
        for tap in self._taps.values():
            if tap.path:
                self._subs[tap.path] = _submodule(name, block, tap.path, f'the tap {tap.kind}')
        self._params = {}
        for i, factors in enumerate(self._scales):
            self._scales[i] = tuple(scale for scale in factors if self._resolve_scale(scale))
        self._values: Optional[Dict[str, torch.Tensor]] = None
        self._calls: Dict[str, int] = {}

    def _resolve_scale(self, scale: Scale) -> bool:
        """Resolve one step-size factor to its submodule or parameter; False where the block
        switched it off (None, or an nn.Identity in place of a layer scale: a factor of 1)."""
        name, block = self.name, self.block
        if scale.kind == 'output':
            self._subs[scale.path] = _submodule(name, block, scale.path, 'its step size')
            return True
        if scale.kind == 'layer_scale':
            owner = _submodule(name, block, scale.path, 'its layer scale')
            attr = 'weight'
            layout = getattr(owner, 'data_format', 'channels_last')
        else:
            owner_path, _, attr = scale.path.rpartition('.')
            owner = _submodule(name, block, owner_path, 'its step size') if owner_path else block
            layout = scale.layout
            if not hasattr(owner, attr):
                raise ValueError(f'block {name} ({type(block).__name__}) has no attribute '
                                 f'{scale.path!r}, which its spec reads its step size from')
        if not torch.is_tensor(getattr(owner, attr, None)):
            return False
        self._params[scale.path] = (owner, attr, layout)
        return True

    # ------------------------------------------------------------------ record names
    def record_names(self, level: str) -> List[str]:
        """The record names one pass gives at ``level`` (``'block'``, ``'branch'``, ``'both'``)."""
        if len(self.steps) == 1:
            return [self.name]
        names = []
        if level in ('branch', 'both') or not self.contiguous:
            names.extend(f'{self.name}.{step.name}' for step in self.steps)
        if level in ('block', 'both') and self.contiguous:
            names.append(self.name)
        return names

    # ------------------------------------------------------------------ hooks
    def hooks(self) -> List[Tuple[nn.Module, str, Callable]]:
        """``(module, kind, hook)`` registrations: kind ``'pre'`` (with kwargs), ``'post'``."""
        regs = [(self.block, 'pre', self._enter)]
        for path, module in self._subs.items():
            regs.append((module, 'pre', self._sub_enter(path)))
            if any(t.kind == 'output' and t.path == path
                   for t in self._taps.values()) or any(s.kind == 'output' and s.path == path
                                                        for f in self._scales for s in f):
                regs.append((module, 'post', self._sub_leave(path)))
        return regs

    def _keep(self, key, value):
        if self._values is not None and torch.is_tensor(value) and key not in self._values:
            self._values[key] = self._cut(value).clone()

    def _enter(self, module, args, kwargs):
        self._values = {}
        self._calls = {}
        self._keep('in', first_tensor(args))

    def _sub_enter(self, path):

        def enter(module, args, kwargs):
            if self._values is None:
                return
            call = self._calls[path] = self._calls.get(path, 0) + 1
            for text, tap in self._taps.items():
                if tap.path != path or tap.call != call:
                    continue
                if tap.kind == 'input':
                    value = first_tensor(args)
                    if value is None and kwargs:
                        value = next((v for v in kwargs.values() if torch.is_tensor(v)), None)
                    self._keep(text, value)
                elif tap.kind == 'kwarg':
                    self._keep(text, kwargs.get(tap.arg))

        return enter

    def _sub_leave(self, path):

        def leave(module, args, output):
            if self._values is None:
                return
            call = self._calls.get(path, 0)
            for text, tap in self._taps.items():
                if tap.kind == 'output' and tap.path == path and tap.call == call:
                    self._keep(text, first_tensor(output))
            if call == 1:
                gate = first_tensor(output)
                if gate is None and isinstance(output, float):  # a constant step size
                    self._values.setdefault(f'scale:{path}', output)
                self._keep(f'scale:{path}', gate)

        return leave

    def leave(self, output: Any) -> Optional[List[SpecStep]]:
        """The steps of the pass that just ended (``output``: the block's output), or None if
        no pass was open."""
        values, self._values = self._values, None
        if values is None:
            return None
        out = first_tensor(output)
        if out is not None:  # a copy: the next block may add into its input in place (TNT)
            values['out'] = self._cut(out).clone()
        steps = []
        for step, scale in zip(self.steps, self._scales):
            x_t, x_next = self._state(values, step, step.start), self._state(values, step, step.end)
            if x_t.shape != x_next.shape:
                raise ValueError(
                    f'block {self.name} ({type(self.block).__name__}), step {step.name!r}: its '
                    f'state before ({step.start}, {tuple(x_t.shape)}) and after ({step.end}, '
                    f'{tuple(x_next.shape)}) differ in shape, so it is not read as an Euler step; '
                    'its spec needs other taps (docs/diagnostics.md, "Which modules are steps")')
            steps.append(SpecStep(step, x_t, x_next, self._delta(values, scale, x_t)))
        return steps

    def _state(self, values, step, text):
        value = values.get(text)
        if value is None:
            raise ValueError(
                f'block {self.name} ({type(self.block).__name__}), step {step.name!r}: the tap '
                f'{text!r} was not reached in its forward pass (a submodule not called, or '
                'called fewer times), so the step cannot be read; its spec does not describe '
                'this block (docs/diagnostics.md, "Which modules are steps")')
        return value

    def _delta(self, values, factors, x_t):
        """Δ_t of one step: the product of its factors (None for none: Δ = 1)."""
        delta = None
        for scale in factors:
            if scale.kind == 'output':
                value = values.get(f'scale:{scale.path}')
                if value is None:
                    raise ValueError(f'block {self.name}: its step size {scale.path!r} was not '
                                     'computed in its forward pass')
            else:
                owner, attr, layout = self._params[scale.path]
                value = _channels(getattr(owner, attr), layout, x_t.dim())
            delta = value if delta is None else delta * value
        return delta


__all__ = ['SpecReader', 'SpecStep', 'first_tensor']
