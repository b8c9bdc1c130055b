"""Hooks that write Euler steps into a block: ``x_{t+1} = x_t + Δ_t ⊙ f`` with Δ_t from an adaptor.

A step is written where its :class:`~mmstiff.analysis.step_specs.Step` says f is formed before
the block adds it (``branch``): that tensor is replaced by ``Δ_t ⊙ f``, Δ_t computed from x_t
(``state`` where the block has that submodule, else ``start``) and f. Where the block forms x_t
only after f (mmdet's ResNet projects its shortcut after the branch), f passes unchanged and the
shortcut becomes ``x_t + (Δ_t - 1) ⊙ f``: the same sum. Δ_t ≡ 1 (an adaptor's identity start)
multiplies by one, so the block computes exactly what it computed before.
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn

from mmstiff.analysis.spec_taps import first_tensor
from mmstiff.analysis.step_specs import Step, Tap, parse_branch, parse_tap


class WrittenStep(NamedTuple):
    """One written step: its spec step, where x_t and f are read, and its adaptor's name (a
    submodule path inside the block; None while the shapes are probed)."""
    step: Step
    state: Tap
    branch: Tap
    adaptor: Optional[str]


def state_tap(block: nn.Module, step: Step) -> Tap:
    """Where x_t is read for writing: the first of ``step.state``'s alternatives
    (``'output:downsample|input:conv1'``) whose submodule the block has (not None), else
    ``step.start``."""
    for text in (step.state or '').split('|'):
        if text and _has_submodule(block, parse_tap(text).path):
            return parse_tap(text)
    return parse_tap(step.start)


def _has_submodule(block: nn.Module, path: str) -> bool:
    """Whether ``block`` has the submodule ``path`` (dotted), a module and not None."""
    try:
        return isinstance(block.get_submodule(path), nn.Module)
    except AttributeError:
        return False


def _replace_first(value: Any, new: torch.Tensor) -> Any:
    """``value`` with its first tensor (itself, or the first item of a tuple) replaced."""
    if torch.is_tensor(value):
        return new
    return (new, ) + tuple(value[1:])


class StepWriter:
    """The forward hooks that write the chosen steps of one block.

    Args:
        block (nn.Module): the block.
        steps (list[WrittenStep]): its written steps.

    In probe mode (every ``adaptor`` None) the hooks record the shapes of x_t and f per step
    (:attr:`shapes`) and change nothing.
    """

    def __init__(self, block: nn.Module, steps: List[WrittenStep]):
        self.block = block
        self.steps = steps
        self.shapes: Dict[str, Tuple[torch.Size, torch.Size]] = {}
        #: whether a pass ran through the block (probe: a block called whose taps were not
        #: reached is not described by its spec)
        self.called = False
        self._states: Dict[str, torch.Tensor] = {}
        self._pending: Dict[str, torch.Tensor] = {}
        self._calls: Dict[str, int] = {}
        self._open = False  # between the block's pre-hook and its forward hook

    # -------------------------------------------------------------- registration
    def paths(self) -> List[str]:
        """The submodule paths whose hooks the steps need."""
        paths = []
        for written in self.steps:
            for tap in (written.state, written.branch):
                if tap.path and tap.path not in paths:
                    paths.append(tap.path)
        return paths

    def register(self) -> list:
        """Register the hooks on the block and its tapped submodules; returns the handles."""
        handles = [
            self.block.register_forward_pre_hook(self.enter, with_kwargs=True),
            self.block.register_forward_hook(self.leave)
        ]
        for path in self.paths():
            module = self.block.get_submodule(path)
            handles.append(
                module.register_forward_pre_hook(_SubHook(self, path, True), with_kwargs=True))
            handles.append(module.register_forward_hook(_SubHook(self, path, False)))
        return handles

    # -------------------------------------------------------------- the pass
    def enter(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """The block's forward pre-hook: a pass begins; forget the previous pass's states and
        calls, and keep the block input as x_t of the steps that read x_t there."""
        self.called = True
        self._open = True
        self._calls = {}
        self._pending = {}
        self._states = {}
        x = first_tensor(args)
        for written in self.steps:
            if written.state.kind == 'in' and x is not None:
                self._states[written.step.name] = x

    def leave(self, module: nn.Module, args: tuple, output: Any) -> None:
        """The block's forward hook: a pass ends. Raises RuntimeError where a written step formed f
        but never x_t (its step size would not be applied); forgets the pass's states."""
        unwritten = [name for name in self._pending if self._written(name)]
        if unwritten:  # f formed, x_t never: the step would silently stay Δ ≡ 1
            raise RuntimeError(f'{type(module).__name__}: the steps {unwritten} formed f but '
                               'not x_t in this pass, so their step sizes were not applied; '
                               'the block\'s spec does not describe this pass '
                               '(docs/methods.md §15)')
        # nothing of a pass outlives it: a checkpointed pass (with_cp) recomputed in the
        # backward reads its states again inside the recomputed function
        self._states = {}
        self._pending = {}
        self._calls = {}
        self._open = False

    def before(self, path: str, args: tuple, kwargs: dict) -> Optional[tuple]:
        """The forward pre-hook of the tapped submodule ``path``: keep x_t where a step reads it at
        this call's input, and where a step forms f there, replace it by ``Δ ⊙ f`` (x_t known) or
        keep it until x_t is formed. Returns the new ``(args, kwargs)``, or None where the input
        is unchanged."""
        call = self._calls[path] = self._calls.get(path, 0) + 1
        new_args = None
        for written in self.steps:
            tap = written.state
            if tap.path == path and tap.call == call and tap.kind in ('input', 'kwarg'):
                value = first_tensor(args) if tap.kind == 'input' else kwargs.get(tap.arg)
                if torch.is_tensor(value):
                    self._states[written.step.name] = value
            tap = written.branch
            if tap.path == path and tap.call == call and tap.kind == 'input':
                f = first_tensor(args if new_args is None else new_args)
                out = self._write(written, f)
                if out is not f:
                    new_args = (out, ) + tuple(args[1:])
        return None if new_args is None else (new_args, kwargs)

    def after(self, path: str, output: Any) -> Any:
        """The forward hook of the tapped submodule ``path``: keep x_t where a step reads it at this
        call's output (an f formed before it makes the output ``x_t + (Δ - 1) ⊙ f``), and write
        the step where a step forms f there, as :meth:`before` does. Returns the new output, or
        None where it is unchanged."""
        call = self._calls.get(path, 0)
        new = None
        for written in self.steps:
            tap = written.state
            if tap.path == path and tap.call == call and tap.kind == 'output':
                x_t = first_tensor(output if new is None else new)
                if torch.is_tensor(x_t):
                    self._states[written.step.name] = x_t
                    moved = self._resolve_pending(written, x_t)
                    if moved is not x_t:
                        new = _replace_first(output if new is None else new, moved)
            tap = written.branch
            if tap.path == path and tap.call == call and tap.kind == 'output':
                f = first_tensor(output if new is None else new)
                out = self._write(written, f)
                if out is not f:
                    new = _replace_first(output if new is None else new, out)
        return new

    def _written(self, name: str) -> bool:
        return any(w.step.name == name and w.adaptor is not None for w in self.steps)

    # -------------------------------------------------------------- the step
    def _write(self, written: WrittenStep, f: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """``Δ ⊙ f`` where x_t is known, else f (kept until x_t is formed)."""
        if not torch.is_tensor(f):
            return f
        name = written.step.name
        x_t = self._states.get(name)
        if not self._open and written.state.kind == 'in':
            raise RuntimeError(
                f'{type(self.block).__name__}: a checkpointed pass (with_cp=True) recomputes '
                f'step {name!r}, whose x_t the spec reads at the block input, outside the '
                'recomputed function; give the step a state tap inside it (e.g. the input of '
                'its first submodule) in block_types (docs/methods.md §15)')
        if written.adaptor is None:  # probe: record the shapes, write nothing
            if x_t is not None:
                self.shapes.setdefault(name, (x_t.shape, f.shape))
            else:
                self._pending[name] = f
            return f
        if x_t is None:
            self._pending[name] = f
            return f
        delta = self.block.get_submodule(written.adaptor)(x_t, f)
        return f * _as(delta, f)

    def _resolve_pending(self, written: WrittenStep, x_t: torch.Tensor) -> torch.Tensor:
        """x_t formed after f: ``x_t + (Δ - 1) ⊙ f`` (the block then adds f itself)."""
        f = self._pending.pop(written.step.name, None)
        if f is None:
            return x_t
        if written.adaptor is None:
            self.shapes.setdefault(written.step.name, (x_t.shape, f.shape))
            return x_t
        delta = self.block.get_submodule(written.adaptor)(x_t, f)
        # the block adds x_t into f in place: the product keeps its own copy of f
        if not torch.is_tensor(delta):
            return x_t if delta == 1.0 else x_t + (delta - 1.0) * f.clone()
        return torch.addcmul(x_t, _as(delta, f) - 1.0, f.clone())


def _as(delta: Any, f: torch.Tensor) -> Any:
    """Δ in f's dtype (a step size computed in float32 under autocast keeps a half-precision
    residual stream in half precision)."""
    if torch.is_tensor(delta) and delta.dtype != f.dtype:
        return delta.to(f.dtype)
    return delta


class _SubHook:
    """A forward (pre-)hook of one tapped submodule, calling back into its writer."""

    def __init__(self, writer: StepWriter, path: str, before: bool):
        self.writer = writer
        self.path = path
        self.before = before

    def __call__(self, module: nn.Module, args: tuple, *rest: Any) -> Any:
        if self.before:
            return self.writer.before(self.path, args, rest[0])
        return self.writer.after(self.path, rest[0])


def written_steps(block: nn.Module, steps: List[Step],
                  adaptors: Optional[Dict[str, str]] = None) -> List[WrittenStep]:
    """The :class:`WrittenStep` of each of ``steps`` of ``block`` (``adaptors``: step name ->
    the adaptor's path in the block; None: probe)."""
    adaptors = adaptors or {}
    return [
        WrittenStep(step, state_tap(block, step), parse_branch(step.branch),
                    adaptors.get(step.name)) for step in steps
    ]


__all__ = ['StepWriter', 'WrittenStep', 'state_tap', 'written_steps']
