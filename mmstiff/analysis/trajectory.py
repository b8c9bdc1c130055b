"""Record the trajectory x_0, x_1, ..., x_L of a residual network with forward hooks.

Each selected block's ``(x_t, x_{t+1}, Δ_t)`` goes to a ``reduce`` callable on the fly,
detached and under ``torch.no_grad()`` (docs/diagnostics.md, "TrajectoryRecorder"). With
``adjoint=True`` the recorder also hooks the live states of the forward graph, so that the
backward pass that follows leaves the per-sample norm of ``∂L/∂x`` at each step's two ends
(:class:`AdjointNorm`; docs/methods.md §16).

Example:
    >>> from mmstiff.analysis import TrajectoryRecorder, neural_stiffness_index
    >>> nsi = lambda r: neural_stiffness_index(r.x_t, r.x_next, r.step)
    >>> with TrajectoryRecorder(backbone, reduce=nsi) as recorder:
    ...     backbone(images)
    >>> recorder.outputs['layer1.0'][0]  # (B,) NSI of block layer1.0 on this batch
"""
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from mmstiff.utils.checks import check_patterns, check_positive_int, matches_any
from mmstiff.utils.step_sums import StepSums, close_step_sums, is_step_block, open_step_sums
from .blocks import activation_of, find_blocks, second_norm_of, shortcut_of, step_sources
from .spec_taps import SpecReader, SpecStep, first_tensor
from .unknown_model import no_block_message

LEVELS = ('block', 'branch', 'both')
#: names of the two Euler steps of a transformer layer, in order.
BRANCH_NAMES = ('msa', 'mlp')


class AdjointNorm:
    """The per-sample norm of the adjoint ``a = ∂L/∂x`` of one recorded state, left by the
    backward pass (docs/methods.md §16).

    A gradient hook (``Tensor.register_hook``) on the live state of the forward graph: the
    backward pass calls it with ``∂L/∂x`` once that gradient is complete, and it keeps only the
    ``(B,)`` float32 norms of the first ``samples`` samples (None: all), not the gradient; the
    gradient passes on unchanged. It holds no reference to the state, so it keeps no activation
    alive.

    Attributes:
        norm (Tensor | None): ``(B,)`` ``‖∂L/∂x‖`` per sample, on the state's device; None until
            a backward pass reached the state (none ran, or the state is not on the loss's path).
    """

    __slots__ = ('norm', 'samples')

    def __init__(self, samples: Optional[int] = None):
        self.norm = None
        self.samples = samples

    def __call__(self, grad: torch.Tensor) -> None:
        """Keep the ``(B,)`` float32 norms of ``grad`` (of its first ``samples`` samples) in
        :attr:`norm`; returns None, so the gradient passes on unchanged."""
        g = grad.detach()
        if self.samples is not None:
            g = g[:self.samples]
        # float32 accumulation: a float16 gradient scaled by AMP's loss scale would overflow;
        # a gradient laid out channels-last is reduced where it lies, not copied first
        dims = 1 if g.is_contiguous() or g.dim() < 3 else tuple(range(1, g.dim()))
        g = g.reshape(g.shape[0], -1) if dims == 1 else g
        self.norm = torch.linalg.vector_norm(g, dim=dims, dtype=torch.float32)


class AdjointEnds(NamedTuple):
    """The adjoints at the two ends of one recorded step: ``start`` at ``x_t``, ``end`` at
    ``x_{t+1}`` (:class:`AdjointNorm`, or None where the state is not a tensor of the forward
    graph that requires a gradient)."""
    start: Optional[AdjointNorm]
    end: Optional[AdjointNorm]


class StepRecord(NamedTuple):
    """One observed Euler step ``x_next = x_t + Δ_t ⊙ f(x_t)`` (possibly after an activation).

    Attributes:
        name (str): ``block`` for a whole block, ``block.msa`` / ``block.mlp`` for the two steps
            of a transformer layer.
        block (str): the block's module name, relative to the recorded model.
        kind (str): ``'block'``, ``'msa'`` or ``'mlp'``.
        x_t (Tensor): the state before the step (where the block projects its shortcut, the
            projected state; see :mod:`mmstiff.analysis.blocks`).
        x_next (Tensor): the state after the step.
        step (Tensor | float | None): Δ_t from the block's step-size adaptor, or None (Δ_t = 1).
        sums (StepSums | None): the per-(sample, channel) sums of squares of ``x_next - x_t``
            and ``x_t`` the fused step wrote in its own pass, for a recorder made with
            ``step_sums=True`` (None where the step did not give them).
        adjoint (AdjointEnds | None): for a recorder made with ``adjoint=True``, the
            :class:`AdjointNorm` of each end, filled in by the backward pass after the forward
            pass that made the record (None otherwise). Where ``x_t`` is the projection of a
            block's input (``act(P x)`` or ``P x``, of another shape), ``start`` is the adjoint
            of the block's input ``x``: the gain is the whole block's, and the adjoints chain
            from one stage to the next.
    """
    name: str
    block: str
    kind: str
    x_t: torch.Tensor
    x_next: torch.Tensor
    step: Optional[Union[torch.Tensor, float]]
    sums: Optional[StepSums] = None
    adjoint: Optional[AdjointEnds] = None


class BlockTaps(NamedTuple):
    """The submodules of one block whose hooks read its states and step sizes.

    Attributes:
        shortcut (nn.Module | None): the projection shortcut of a conv block (its output is
            ``x_t``), None for an identity shortcut or a transformer layer.
        activation (nn.Module | None): the activation after the add of a post-activation
            block, through which the projected ``x_t`` is taken.
        second_norm (nn.Module | None): the pre-norm of a transformer layer's MLP branch (its
            input is the state between the MSA and the MLP step).
        step_sources (list[nn.Module]): the modules whose output is a step size.
    """
    shortcut: Optional[nn.Module]
    activation: Optional[nn.Module]
    second_norm: Optional[nn.Module]
    step_sources: Sequence[nn.Module]


def keep_record(record: 'StepRecord') -> 'StepRecord':
    """The default reducer: keep the record itself (detached tensors; memory grows per call)."""
    return record


def _detach(value):
    if torch.is_tensor(value):
        return value.detach()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


class _Frame:
    """Per-block scratch space for one forward pass of that block."""

    __slots__ = ('batch', 'x_in', 'shortcut', 'mid', 'phase', 'steps', 'request', 'block',
                 'adjoints')

    def __init__(self, batch, x_in, request=None, block=None, adjoint=None):
        self.block = block
        self.batch = batch
        self.x_in = x_in
        self.shortcut = None
        self.mid = None
        self.phase = 0
        self.steps = ([], [])
        self.request = request
        # AdjointNorm of the states kept: 'in', 'mid' (recorder with adjoint=True)
        self.adjoints = {'in': adjoint}


def _apply_out_of_place(act, x):
    """``act(x)`` without touching ``x``: ReLU out of place, any other activation on a copy
    (it may be in place)."""
    with torch.no_grad():
        if type(act) is torch.nn.ReLU:
            return torch.relu(x)
        return act(x.clone())


def _single(steps):
    return steps[0] if len(steps) == 1 else None


def _product(steps):
    """The step size of one step whose f several sources scale (an SE gate and an adaptor
    written onto its block): their product; None where it has none."""
    if not steps:
        return None
    product = steps[0]
    for step in steps[1:]:
        product = product * step
    return product


class RecorderBase:
    """The protocol both recorders share: ``outputs``, ``clear()`` and use as a context manager
    (``start()`` on entry, ``stop()`` on exit)."""

    def clear(self) -> None:
        """Forget the recorded outputs."""
        self.outputs = OrderedDict()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class TrajectoryRecorder(RecorderBase):
    """Forward hooks that record ``(x_t, x_{t+1}, Δ_t)`` per residual block.

    Args:
        model (nn.Module): the network (a backbone, a classifier, a detector, ...). Record names
            are module names relative to it (pass ``model.backbone`` for ``layer1.0``).
        reduce (callable, optional): ``StepRecord -> Any``, called under ``torch.no_grad()`` for
            every recorded step; its results are kept in :attr:`outputs`. Default keeps the
            record (detached tensors).
        level (str): ``'block'`` (one record per block; a transformer layer as one two-step
            move from its input to its output), ``'branch'`` (the MSA and MLP steps of a
            transformer layer separately; conv blocks as blocks) or ``'both'``.
        select (Sequence[str] | callable, optional): which blocks to hook, as ``fnmatch``
            patterns of block names (``['layer1.*', 'layers.11']``) or a ``name -> bool``
            predicate. None hooks every block.
        is_block (callable, optional): ``module -> 'conv' | 'transformer' | None`` replacing the
            class-based block discovery of :func:`~mmstiff.analysis.blocks.block_kind`.
        read_se_gates (bool): read mmpretrain ``SELayer`` gates as step sizes. Default True.
        num_samples (int, optional): keep only the first ``num_samples`` samples of the batch
            in the records (states, and step sizes that have a batch axis), sliced as they are
            captured, so that everything the recorder and ``reduce`` do costs in proportion.
            None: the whole batch.
        on_pass_end (callable, optional): called with no argument when a forward pass of
            ``model`` ends while the recorder is started (e.g. to free what ``reduce`` held
            during the pass before the backward pass needs the memory).
        step_sums (bool): ask the fused residual steps for the sums of squares of
            ``x_{t+1} - x_t`` and ``x_t`` they compute in their own pass
            (:attr:`StepRecord.sums`; a reducer that needs only the NSI's norms reads them
            instead of the states). Default False.
        block_types (dict, optional): ``{class name: kind | BlockSpec | spec dict}``, block
            classes declared by a config, searched before the built-in tables
            (:func:`~mmstiff.analysis.blocks.block_types_of`).
        adjoint (bool): also hook every recorded state that is a tensor of the forward graph
            requiring a gradient with an :class:`AdjointNorm` (one per tensor, shared by the
            step it ends and the step it starts), handed to ``reduce`` as
            :attr:`StepRecord.adjoint`; the backward pass of the recorded forward pass fills
            them in. Default False.

    Raises:
        ValueError: a bad ``level`` or ``select``, a model with no block the recorder knows
            (the message names its most frequent module classes and the ``block_types`` line
            to add), a block whose spec names a submodule it lacks, or a selection that
            matches no block.
    """

    def __init__(self, model: nn.Module, reduce: Optional[Callable[[StepRecord], Any]] = None,
                 level: str = 'block', select: Optional[Union[str, Sequence[str],
                                                              Callable[[str], bool]]] = None,
                 is_block: Optional[Callable[[nn.Module], Optional[str]]] = None,
                 read_se_gates: bool = True, num_samples: Optional[int] = None,
                 on_pass_end: Optional[Callable[[], None]] = None, step_sums: bool = False,
                 block_types: Optional[Union[dict, Sequence[str]]] = None, adjoint: bool = False):
        self.num_samples = check_positive_int('num_samples', num_samples, optional=True)
        if on_pass_end is not None and not callable(on_pass_end):
            raise ValueError(f'on_pass_end={on_pass_end!r} is not supported; expected a '
                             'callable with no argument, or None')
        if level not in LEVELS:
            raise ValueError(f'level={level!r} is not supported; expected one of {LEVELS}')
        if reduce is not None and not callable(reduce):
            raise ValueError(f'reduce={reduce!r} is not supported; expected a callable '
                             'StepRecord -> Any, or None')
        self.model = model
        self.reduce = reduce or keep_record
        self.level = level
        self.read_se_gates = read_se_gates
        self.step_sums = bool(step_sums)
        self.adjoint = bool(adjoint)
        # id(live state) -> (weak reference to it, its AdjointNorm): one gradient hook per
        # tensor while the recorder is started, however many records end or start at it
        self._adjoint_slots: Dict[int, Tuple[weakref.ref, AdjointNorm]] = {}
        selected = select if callable(select) else _pattern_predicate(select)
        blocks = find_blocks(model, is_block, block_types)
        if not blocks:
            raise ValueError(no_block_message(model))
        self.blocks = [block for block in blocks if selected(block.name)]
        if not self.blocks:
            raise ValueError(f'select={select!r} matches none of the blocks '
                             f'{[block.name for block in blocks]}')
        n = self.num_samples

        def cut(x):
            return x.detach() if n is None else x.detach()[:n]

        # the blocks read by their spec: their taps resolved once, here
        reader = _AdjointSpecReader if self.adjoint else SpecReader
        self._readers = {
            block.name: reader(block.name, block.module, block.spec, cut)
            for block in self.blocks if block.spec is not None
        }
        if self.adjoint:
            for spec_reader in self._readers.values():
                spec_reader.adjoint_of = self.adjoint_of
        # the submodules each block's hooks go on, looked up once (start() runs per iteration)
        self._taps = [self._block_taps(block.module, block.kind) for block in self.blocks]
        self.outputs = OrderedDict()
        self._handles = []
        self._frames = {}
        # (module, pre-hook?, hook) of every block, made once: start() registers the same
        # functions at every recorded iteration
        self._module_hooks = [
            hook for block, taps in zip(self.blocks, self._taps)
            for hook in self._block_hooks(block.name, block.module, block.kind, taps)
        ]
        if on_pass_end is not None:
            self._module_hooks.append(
                (model, False, opaque_to_compiler(lambda module, args, output: on_pass_end())))

    # ------------------------------------------------------------------ lifecycle
    @property
    def active(self) -> bool:
        """Whether hooks are registered."""
        return bool(self._handles)

    @property
    def record_names(self) -> List[str]:
        """Names of the records one forward pass produces, in trajectory order."""
        names = []
        for block in self.blocks:
            if block.name in self._readers:
                names.extend(self._readers[block.name].record_names(self.level))
                continue
            if block.kind == 'transformer' and self.level in ('branch', 'both'):
                names.extend(f'{block.name}.{branch}' for branch in BRANCH_NAMES)
            if block.kind != 'transformer' or self.level in ('block', 'both'):
                names.append(block.name)
        return names

    def start(self) -> 'TrajectoryRecorder':
        """Register the hooks (idempotent)."""
        if self.active:
            return self
        for module, before, hook in self._module_hooks:
            if before == 'kwargs':
                handle = module.register_forward_pre_hook(hook, with_kwargs=True)
            elif before:
                handle = module.register_forward_pre_hook(hook)
            else:
                handle = module.register_forward_hook(hook)
            self._handles.append(handle)
        return self

    def stop(self) -> 'TrajectoryRecorder':
        """Remove every hook this recorder registered; keeps :attr:`outputs`."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for frame in self._frames.values():
            if frame is not None and frame.request is not None:
                close_step_sums(frame.request, frame.block)
        self._frames.clear()
        # the hooks already on the graph stay there and fill their AdjointNorm in the backward
        # pass; the recorder only forgets which tensors they are on
        self._adjoint_slots.clear()
        return self

    def adjoint_of(self, x: Optional[torch.Tensor]) -> Optional[AdjointNorm]:
        """The :class:`AdjointNorm` of the live state ``x``, registering its gradient hook at
        the first call for this tensor; None when the recorder has ``adjoint=False`` or ``x``
        is no tensor of a graph that requires a gradient (no backward pass will reach it)."""
        if (not self.adjoint or not torch.is_tensor(x) or not x.requires_grad
                or not torch.is_grad_enabled()):
            return None
        key = id(x)
        known = self._adjoint_slots.get(key)
        if known is not None and known[0]() is x:
            return known[1]
        slot = AdjointNorm(self.num_samples)
        x.register_hook(slot)
        self._adjoint_slots[key] = (weakref.ref(x), slot)
        return slot

    # ------------------------------------------------------------------ hooks
    def _block_taps(self, block, kind):
        """The :class:`BlockTaps` of one block."""
        shortcut = act = norm = None
        if kind in ('conv', 'preact'):
            shortcut = shortcut_of(block)
            act = activation_of(block) if kind == 'conv' else None
        else:
            norm = second_norm_of(block)
        return BlockTaps(shortcut, act, norm, step_sources(block, self.read_se_gates))

    def _block_hooks(self, name, block, kind, taps):
        """The ``(module, pre-hook?, hook)`` registrations that record one block.

        Every hook is opaque to ``torch.compile`` (:func:`torch.compiler.disable`): a compiled
        model calls it as it is, at every recorded iteration, instead of tracing it once into
        a graph whose recorded side effects would go to the outputs of that first iteration.
        """
        frames = self._frames
        hooks = []

        def add(module, before, hook):
            hooks.append((module, before, opaque_to_compiler(hook)))

        if name in self._readers:
            self._spec_hooks(self._readers[name], add)
            return hooks

        shortcut, act, norm = taps.shortcut, taps.activation, taps.second_norm
        n = self.num_samples

        def cut(x):
            x = x.detach()
            return x if n is None else x[:n]

        sums_steps, state_act = self._sums_request(block, kind, taps)
        if shortcut is None and norm is None and not taps.step_sources and not sums_steps:
            # a plain block: its forward hook sees the input too, no per-call scratch space
            # (and one module hook fewer for the forward pass to dispatch)

            def leave_plain(module, args, output):
                x, out = first_tensor(args), first_tensor(output)
                if x is not None and out is not None:
                    ends = AdjointEnds(self.adjoint_of(x),
                                       self.adjoint_of(out)) if self.adjoint else None
                    self._keep(StepRecord(name, name, 'block', cut(x), cut(out), None, None, ends))

            add(block, False, leave_plain)
            return hooks

        def enter(module, args):
            x = first_tensor(args)
            stale = frames.get(name)
            if stale is not None and stale.request is not None:
                close_step_sums(stale.request, module)
            request = open_step_sums(state_act, module) if sums_steps and x is not None else None
            frames[name] = None if x is None else _Frame(x.shape[0], cut(x), request, module,
                                                         self.adjoint_of(x))

        def leave(module, args, output):
            frame = frames.pop(name, None)
            sums = None
            if frame is not None and frame.request is not None:
                close_step_sums(frame.request, module)
                sums = frame.request.complete(sums_steps)
                sums = sums and [s.first(n) for s in sums]
            out = first_tensor(output)
            if frame is None or out is None:
                return
            self._emit(name, kind, frame, cut(out), sums, self.adjoint_of(out))

        add(block, True, enter)
        add(block, False, leave)

        if shortcut is not None:

            def on_shortcut(module, args, output):
                frame = frames.get(name)
                out = first_tensor(output)
                if frame is not None and out is not None:
                    # into the post-activation space of x_{t+1}, out of place: the block
                    # still needs its shortcut
                    frame.shortcut = cut(out) if act is None else _apply_out_of_place(act, cut(out))

            add(shortcut, False, on_shortcut)
        if norm is not None:

            def on_mid(module, args):
                frame = frames.get(name)
                x = first_tensor(args)
                if frame is not None and x is not None and frame.mid is None:
                    frame.mid = cut(x)
                    frame.adjoints['mid'] = self.adjoint_of(x)
                    frame.phase = 1

            add(norm, True, on_mid)

        for source in taps.step_sources:

            def on_step(module, args, output):
                frame = frames.get(name)
                if frame is not None:
                    step = _detach(output)
                    if (n is not None and torch.is_tensor(step) and step.dim() == frame.x_in.dim()
                            and step.shape[0] == frame.batch):
                        step = step[:n]  # per sample: keep the recorded samples' steps
                    if step is not None:
                        frame.steps[frame.phase].append(step)

            add(source, False, on_step)
        return hooks

    def _spec_hooks(self, reader, add):
        """Add (``add(module, before, hook)``) the hooks that record a block by its spec
        (:mod:`.spec_taps`)."""
        for module, kind, hook in reader.hooks():
            add(module, 'kwargs' if kind == 'pre' else False, hook)

        def leave(module, args, output):
            if self.adjoint:
                read = reader.leave_with_adjoints(output)
                steps, ends = (None, None) if read is None else read
            else:
                steps = reader.leave(output)
                ends = None
            if steps is None:
                return
            ends = ends or [None] * len(steps)
            name = reader.name
            if len(steps) == 1:
                only = steps[0]
                self._keep(
                    StepRecord(name, name, 'block', only.x_t, only.x_next, only.delta, None,
                               ends[0]))
                return
            names = set(reader.record_names(self.level))
            for step, end in zip(steps, ends):
                record = f'{name}.{step.step.name}'
                if record in names:
                    self._keep(
                        StepRecord(record, name, step.step.name, step.x_t, step.x_next, step.delta,
                                   None, end))
            if name in names:
                whole = None if ends[0] is None else AdjointEnds(ends[0].start, ends[-1].end)
                self._keep(
                    StepRecord(name, name, 'block', steps[0].x_t, steps[-1].x_next, None, None,
                               whole))

        add(reader.block, False, leave)

    def _sums_request(self, block, kind, taps):
        """``(steps, state_act)``: how many fused steps of a block give the sums of its
        records (0: none asked for) and whether its ``x_t`` is the ReLU of the shortcut. Only
        mmstiff's step blocks run a fused step: an upstream block is recorded without a
        request, one module hook fewer where it has no shortcut."""
        if not self.step_sums or not is_step_block(block):
            return 0, False
        if kind == 'transformer':
            return (2 if self.level in ('branch', 'both') else 0), False
        state_act = taps.shortcut is not None and taps.activation is not None
        if state_act and type(taps.activation) is not nn.ReLU:
            return 0, False  # only a ReLU of the shortcut is taken in the step's pass
        return 1, state_act

    def _emit(self, name, kind, frame, out, sums=None, out_adjoint=None):
        sums = sums or (None, None)  # the sums of the block's first and second step
        adjoint = self.adjoint
        start, mid = frame.adjoints.get('in'), frame.adjoints.get('mid')
        if kind in ('conv', 'preact'):
            x_t = frame.shortcut if frame.shortcut is not None else frame.x_in
            # behind a projection shortcut too, the adjoint starts at the block's input: the
            # step's gain is then that of the whole block, and the gains chain across stages
            ends = AdjointEnds(start, out_adjoint) if adjoint else None
            self._keep(
                StepRecord(name, name, 'block', x_t, out, _product(frame.steps[0]), sums[0], ends))
            return
        if self.level in ('branch', 'both') and frame.mid is not None:
            self._keep(
                StepRecord(f'{name}.msa', name, 'msa', frame.x_in, frame.mid,
                           _product(frame.steps[0]), sums[0],
                           AdjointEnds(start, mid) if adjoint else None))
            self._keep(
                StepRecord(f'{name}.mlp', name, 'mlp', frame.mid, out, _product(frame.steps[1]),
                           sums[1],
                           AdjointEnds(mid, out_adjoint) if adjoint else None))
        if self.level in ('block', 'both') or frame.mid is None:
            steps = frame.steps[0] + frame.steps[1]
            self._keep(
                StepRecord(name, name, 'block', frame.x_in, out, _single(steps), None,
                           AdjointEnds(start, out_adjoint) if adjoint else None))

    def _keep(self, record):
        """Reduce one record and keep the result under its name."""
        if record.x_t.shape != record.x_next.shape:
            return  # not an Euler step we can read (unknown shortcut)
        with torch.no_grad():
            value = self.reduce(record)
        outputs = self.outputs.get(record.name)
        if outputs is None:
            self.outputs[record.name] = [value]
        else:
            outputs.append(value)


class _AdjointSpecReader(SpecReader):
    """A :class:`~mmstiff.analysis.spec_taps.SpecReader` that also hooks the live state of
    every tap it keeps with an :class:`AdjointNorm` (through the recorder's ``adjoint_of``)
    and hands out, with the steps of a pass, their :class:`AdjointEnds`."""

    adjoint_of = staticmethod(lambda x: None)  # set by the recorder

    def _enter(self, module, args, kwargs):
        self._adjoints = {}
        super()._enter(module, args, kwargs)

    def _keep(self, key, value):
        fresh = self._values is not None and torch.is_tensor(value) and key not in self._values
        super()._keep(key, value)
        if fresh:
            self._adjoints[key] = self.adjoint_of(value)

    def leave_with_adjoints(self, output) -> Optional[Tuple[List[SpecStep], List[AdjointEnds]]]:
        """``(steps, ends)``: :meth:`leave`'s steps and each one's adjoints; None if no pass
        was open."""
        if self._values is None:
            return None
        adjoints = getattr(self, '_adjoints', {})
        adjoints['out'] = self.adjoint_of(first_tensor(output))
        steps = self.leave(output)
        if steps is None:
            return None
        ends = [AdjointEnds(adjoints.get(s.step.start), adjoints.get(s.step.end)) for s in steps]
        return steps, ends


def opaque_to_compiler(hook: Callable[..., Any]) -> Callable[..., Any]:
    """``hook`` as :func:`torch.compiler.disable` makes it for a model being compiled (a graph
    break: the compiled code calls it as it is), and called directly otherwise, without the
    wrapper ``disable`` makes, which a recorder's few hooks per block would call at every
    recorded pass."""
    disabled = torch.compiler.disable(hook)

    def call(*args):
        if torch.compiler.is_compiling():
            return disabled(*args)
        return hook(*args)

    return call


def _pattern_predicate(select):
    """``name -> bool`` of the ``fnmatch`` patterns ``select`` (None: every name)."""
    patterns = check_patterns('select', select)
    return lambda name: matches_any(name, patterns)


def stage_of(name: str) -> str:
    """The stage of a block name: everything before its last dot (``'layer1.0'`` -> ``'layer1'``,
    ``'layers.3.msa'`` -> ``'layers'``); ``''`` for a top-level block. A step's name after its
    block's (``msa``, ``mlp`` or another lowercase word after an index) is dropped first."""
    block, _, last = name.rpartition('.')
    if last in BRANCH_NAMES or (last.isalpha() and last.islower()
                                and block.rpartition('.')[2].isdigit()):
        name = block
    return name.rpartition('.')[0]


def record_states(model: nn.Module, inputs: torch.Tensor,
                  **kwargs: Any) -> 'OrderedDict[str, StepRecord]':
    """Run ``model(inputs)`` once and return ``{record name: StepRecord}`` (detached tensors).

    A convenience for analysis scripts; ``kwargs`` go to :class:`TrajectoryRecorder`.
    """
    recorder = TrajectoryRecorder(model, **kwargs)
    with torch.no_grad(), recorder:
        model(inputs)
    return OrderedDict((name, values[-1]) for name, values in recorder.outputs.items())


__all__ = [
    'StepRecord', 'BlockTaps', 'TrajectoryRecorder', 'keep_record', 'record_states', 'stage_of',
    'LEVELS', 'BRANCH_NAMES', 'AdjointNorm', 'AdjointEnds'
]
