"""The step-size adaptor ``(x_t, f) -> Δ_t`` (docs/methods.md §0): the base class every adaptor
derives from, and the constant step of a plain block.

The contract every adaptor keeps is in docs/design.md, "The step-size adaptor contract". How a
backbone builds adaptors from its config is in :mod:`.build`, how it grafts them onto a plain
checkpoint in :mod:`.graft`, and the Euler update that reads Δ_t in :mod:`.update`.
"""
from typing import Callable, List, Optional

import torch
from mmengine.model import BaseModule
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.utils.types import InitConfig
from mmstiff.registry import MODELS
from mmstiff.utils.layout import check_layout, pool_state
from .starts import check_saved_start, mismatched_entries, record_start
from .update import StepSize

#: how a fresh adaptor starts: ``'paper'`` (the paper's initialisation) or ``'identity'``
#: (Δ ≡ 1 exactly, the plain block: for grafting onto a plain checkpoint)
STARTS = ('paper', 'identity')

#: the fused step's computation of Δ_t (B, C) from the (B, C) means ``(adaptor, mean x_t or
#: None, mean f)``; it returns None where its passes do not apply (:func:`step_from_means`)
TakeOver = Callable[['StepAdaptor', Optional[torch.Tensor], torch.Tensor], Optional[torch.Tensor]]


def check_start(start: str) -> str:
    """``start`` if it is one of :data:`STARTS`; ValueError naming it otherwise."""
    if not isinstance(start, str) or start not in STARTS:
        raise ValueError(f'start={start!r} is not supported; expected one of {STARTS} '
                         "('identity': Δ ≡ 1 at the start, for a plain checkpoint)")
    return start


class StepAdaptor(BaseModule):
    """Base class of step-size adaptors ``(x_t, f) -> Δ_t``.

    An adaptor class that builds a norm layer from a ``norm_cfg`` argument sets
    :attr:`takes_norm_cfg`; a backbone then fills that argument in with its own normalisation
    (:func:`~.build.adaptor_with_norm`).

    Args:
        layout (str): ``'nchw'`` (maps, pooled over H, W) or ``'nlc'`` (tokens, pooled over
            the tokens).
        init_cfg (dict, optional): MMEngine initialisation config.

    Attributes:
        state_loaded (bool): whether the last state dict loaded into the model held the
            adaptor's keys, each of the adaptor's shape (set by ``load_state_dict``;
            :func:`~.graft.init_keeping_starts` reads it).
        load_mismatch (list): the entries of that state dict whose shape differed from the
            adaptor's, ``[(key, checkpoint shape, adaptor shape)]``.
        statistics_loaded (bool | None): whether the FIRST state dict loaded into the model held
            the running statistics of every BN of the adaptor; None while nothing was loaded
            (a fresh model) or where the adaptor has no BN. Later loads (resuming a run,
            ``load_from`` after an ``init_cfg`` checkpoint) leave it as it is, so that a
            resumed run keeps its rule for them (see :data:`~.graft.ADAPTOR_NORMS`).
    """

    #: the output of forward is the step size Δ_t of the block (read by the recorders)
    step_source = True
    #: whether the constructor takes a ``norm_cfg`` that a backbone fills in
    takes_norm_cfg = False

    def __init__(self, layout: str = 'nchw', init_cfg: InitConfig = None):
        super().__init__(init_cfg=init_cfg)
        self.layout = check_layout(layout)
        self.state_loaded = False
        self.load_mismatch = []
        self.statistics_loaded = None
        # every saved state dict records the start (mmstiff.models.steps.starts)
        self._register_state_dict_hook(record_start)

    #: whether Δ_t depends on the states only through their means over the pooled axes
    #: (:meth:`step_from_pooled`): ``forward`` then also takes those means, (B, C), as x_t and f
    from_pooled = False
    #: whether :meth:`step_from_pooled` reads the pooled x_t (False: only the pooled f)
    pools_state = False
    #: the (B, C) arithmetic of Δ_t from the means that the fused step may compute in its own
    #: passes instead of the adaptor's modules, by name (``'stepnet'``, ``'se'``; the fused
    #: package holds the passes of each); None: the modules always compute
    fused_arithmetic: Optional[str] = None
    #: within :func:`step_from_means`, the fused step's computation of Δ_t; None elsewhere
    _take_over: Optional[TakeOver] = None

    def forward(self, x_t: Optional[torch.Tensor], f: torch.Tensor) -> StepSize:
        """Δ_t from the state x_t and the branch output f.

        An adaptor with :attr:`from_pooled` reads them only through :func:`pooled_mean`: given
        their (B, C) means instead, it reads those (x_t may be None where :attr:`pools_state`
        is False).

        Args:
            x_t (Tensor | None): the state, ``(B, C, H, W)`` or ``(B, N, C)``, or its means.
            f (Tensor): the branch output, of x_t's shape, or its means.

        Returns:
            Tensor | float: Δ_t, broadcastable against f (``(B, C, 1, 1)``, ``(B, 1, C)``).
        """
        if not self.from_pooled:  # pragma: no cover - abstract
            raise NotImplementedError
        state = pooled_mean(x_t, self.layout) if self.pools_state else None
        residual = pooled_mean(f, self.layout)
        take_over = self._take_over
        step = None if take_over is None else take_over(self, state, residual)
        if step is None:
            return self.step_from_pooled(state, residual)
        return self.broadcast(step)

    def step_from_pooled(self, state: Optional[torch.Tensor],
                         residual: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """Δ_t (broadcastable against ``f``) from the (B, C) means of x_t (None where
        :attr:`pools_state` is False) and of f over the pooled axes, through the adaptor's
        modules."""
        raise NotImplementedError

    def broadcast(self, step: torch.Tensor) -> torch.Tensor:
        """A (B, C) step size (or one of B·C values per sample) as ``(B, C, 1, 1)`` for
        ``'nchw'`` and ``(B, 1, C)`` for ``'nlc'`` (a view)."""
        batch, channels = step.shape[0], step.shape[1]
        if self.layout == 'nlc':
            return step.view(batch, 1, channels)
        return step.view(batch, channels, 1, 1)

    def reset_start(self) -> None:
        """Give the parameters that fix the starting Δ their start values again (the
        ``'identity'`` start of an adaptor); a no-op for the paper's initialisation."""

    def init_weights(self) -> None:
        """MMEngine's initialisation, then :meth:`reset_start` (the initialisers of a parent's
        ``init_cfg``, e.g. Kaiming on every ``Conv2d``, must not undo an identity start)."""
        first = not self._is_init
        super().init_weights()
        if first:
            self.reset_start()

    def statistics_keys(self, prefix: str = '') -> List[str]:
        """State-dict keys of the running means of the adaptor's BN layers."""
        return [
            f'{prefix}{name}.running_mean' for name, m in self.named_modules()
            if isinstance(m, _BatchNorm) and m.track_running_stats
        ]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        names = [name for name, _ in self.named_parameters()]
        names += [name for name, _ in self.named_buffers()]
        held = any(prefix + name in state_dict for name in names)
        if held:
            check_saved_start(self, local_metadata, prefix)
        self.load_mismatch = mismatched_entries(self, state_dict, prefix)
        self.state_loaded = held and not self.load_mismatch
        keys = self.statistics_keys(prefix)
        if self.statistics_loaded is None and keys:
            self.statistics_loaded = all(key in state_dict for key in keys) \
                and not self.load_mismatch
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


@MODELS.register_module()
class ConstantStep(StepAdaptor):
    """The plain residual step, Δ ≡ ``step`` (1.0: a standard ResNet block). No parameters.

    Args:
        step (float): the constant step size. Default 1.0.
        channels (int, optional): accepted for a uniform adaptor interface; unused.
        layout (str): ``'nchw'`` or ``'nlc'``.
    """

    def __init__(self, step: float = 1.0, channels: Optional[int] = None, layout: str = 'nchw',
                 init_cfg: InitConfig = None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        self.step = float(step)

    def forward(self, x_t: torch.Tensor, f: torch.Tensor) -> float:
        return self.step

    def extra_repr(self) -> str:
        return f'step={self.step}, layout={self.layout!r}'


def pooled_mean(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The (B, C) means of a state over its pooled axes (:func:`~mmstiff.utils.layout.pool_state`);
    a (B, C) tensor is taken as those means already."""
    return x if x.dim() == 2 else pool_state(x, layout, keepdim=False)


def step_from_means(adaptor: StepAdaptor, state: Optional[torch.Tensor], residual: torch.Tensor,
                    take_over: Optional[TakeOver] = None) -> StepSize:
    """Δ_t of an adaptor with :attr:`~StepAdaptor.from_pooled` from the (B, C) means of x_t
    (None where it does not read them) and of f, through its module call, so that its hooks
    see Δ_t.

    Args:
        adaptor (StepAdaptor): the adaptor.
        state (Tensor | None): the means of x_t.
        residual (Tensor): the means of f.
        take_over (callable, optional): the fused step's computation of Δ_t, which the call
            asks first (:attr:`~StepAdaptor.fused_arithmetic`); where it returns None, or
            without it, the adaptor's modules compute.

    Returns:
        Tensor: Δ_t in the adaptor's shape.
    """
    if take_over is None:
        return adaptor(state, residual)
    adaptor.__dict__['_take_over'] = take_over  # for this call only, not a module attribute
    try:
        return adaptor(state, residual)
    finally:
        del adaptor.__dict__['_take_over']
