"""The step-size adaptor abstraction ``(x_t, f) -> Δ_t`` (docs/methods.md §0), and the helpers
that let a backbone graft adaptors onto a plain checkpoint (docs/methods.md §3).

The contract every adaptor keeps is in docs/design.md, "The step-size adaptor contract".
"""
from typing import Callable, Iterable, List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.utils.types import InitConfig
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_config
from mmstiff.utils.layout import check_layout, pool_state
from .starts import check_saved_start, mismatched_entries, record_start

#: keys of an adaptor config that the backbone fills in for each block.
BUILD_KEYS = ('channels', 'layout')
#: how a fresh adaptor starts: ``'paper'`` (the paper's initialisation) or ``'identity'``
#: (Δ ≡ 1 exactly, the plain block: for grafting onto a plain checkpoint)
STARTS = ('paper', 'identity')
#: which adaptor BN statistics keep updating under a backbone's ``norm_eval=True``:
#: ``'auto'`` those a loaded checkpoint lacked (none when nothing was loaded), ``'follow'``
#: none (the backbone's rule), ``'train'`` all
ADAPTOR_NORMS = ('auto', 'follow', 'train')

#: a step size Δ_t: a tensor broadcastable against f, or a Python scalar (:class:`ConstantStep`)
StepSize = Union[torch.Tensor, float]
#: the pooled means an adaptor reads, ``(mean x_t or None, mean f)``, each (B, C)
Pooled = Tuple[Optional[torch.Tensor], torch.Tensor]


def check_start(start: str) -> str:
    """``start`` if it is one of :data:`STARTS`; ValueError naming it otherwise."""
    if not isinstance(start, str) or start not in STARTS:
        raise ValueError(f'start={start!r} is not supported; expected one of {STARTS} '
                         "('identity': Δ ≡ 1 at the start, for a plain checkpoint)")
    return start


def check_adaptor_norm(adaptor_norm: str) -> str:
    """``adaptor_norm`` if it is one of :data:`ADAPTOR_NORMS`; ValueError naming it otherwise."""
    if not isinstance(adaptor_norm, str) or adaptor_norm not in ADAPTOR_NORMS:
        raise ValueError(f'adaptor_norm={adaptor_norm!r} is not supported; expected one of '
                         f'{ADAPTOR_NORMS}')
    return adaptor_norm


class StepAdaptor(BaseModule):
    """Base class of step-size adaptors ``(x_t, f) -> Δ_t``.

    An adaptor class that builds a norm layer from a ``norm_cfg`` argument sets
    :attr:`takes_norm_cfg`; a backbone then fills that argument in with its own normalisation
    (:func:`adaptor_with_norm`).

    Args:
        layout (str): ``'nchw'`` or ``'nlc'``; see the module docstring.
        init_cfg (dict, optional): MMEngine initialisation config.

    Attributes:
        state_loaded (bool): whether the last state dict loaded into the model held the
            adaptor's keys, each of the adaptor's shape (set by ``load_state_dict``;
            :func:`init_keeping_starts` reads it).
        load_mismatch (list): the entries of that state dict whose shape differed from the
            adaptor's, ``[(key, checkpoint shape, adaptor shape)]``.
        statistics_loaded (bool | None): whether the FIRST state dict loaded into the model held
            the running statistics of every BN of the adaptor; None while nothing was loaded
            (a fresh model) or where the adaptor has no BN. Later loads (resuming a run,
            ``load_from`` after an ``init_cfg`` checkpoint) leave it as it is, so that a
            resumed run keeps its rule for them (see :data:`ADAPTOR_NORMS`).
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

    #: whether Δ_t is a function of the pooled states only (:meth:`step_from_pooled`)
    from_pooled = False
    #: whether :meth:`step_from_pooled` reads the pooled x_t (False: only the pooled f)
    pools_state = False

    def forward(self, x_t: torch.Tensor, f: Optional[torch.Tensor], pooled: Optional[Pooled] = None,
                phi: Optional[Callable] = None) -> StepSize:
        """Δ_t from ``(x_t, f)``; an adaptor with :attr:`from_pooled` takes the pooled means
        ``pooled=(mean x_t or None, mean f)``, each (B, C), instead of pooling them itself (f
        is then None where the fused step folded the branch's last BN and never formed f),
        and ``phi``, the fused step's ``phi(adaptor, state, residual)``, which computes Δ in its
        own passes where it can (None there, or no ``phi``: the adaptor's modules compute)."""
        if not self.from_pooled:  # pragma: no cover - abstract
            raise NotImplementedError
        if pooled is None:
            state = pool_state(x_t, self.layout, keepdim=False) if self.pools_state else None
            pooled = state, pool_state(f, self.layout, keepdim=False)
        if phi is None:
            return self.step_from_pooled(*pooled)
        return self.step_from_pooled(*pooled, phi=phi)

    def step_from_pooled(self, state: Optional[torch.Tensor], residual: torch.Tensor,
                         phi: Optional[Callable] = None) -> torch.Tensor:  # pragma: no cover
        """Δ_t (broadcastable against ``f``) from the (B, C) means of x_t (None where
        :attr:`pools_state` is False) and of f over the pooled axes; ``phi``: the fused step's
        computation of Δ, which an adaptor may ask first (:meth:`forward`)."""
        raise NotImplementedError

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


def resolve_adaptor(adaptor: Optional[dict], name: str = 'adaptor') -> Optional[dict]:
    """Check an adaptor config at build time; return it with ``type`` resolved to a class.

    The config is None (no adaptor) or a dict with a ``'type'`` that names a registered
    :class:`StepAdaptor` (or is one), without ``channels`` or ``layout``: the backbone fills
    those in for each block. Resolving the class here, in mmstiff's registry, makes the build
    independent of the runner's default scope (mmpretrain or mmdet), and makes an unknown type
    fail before any layer is built.

    Args:
        adaptor (dict | None): the config.
        name (str): the field, for the messages (``'adaptor'``, ``'msa_adaptor'``, ...).

    Raises:
        ValueError: naming the field, the bad value and what was expected.
    """
    adaptor = check_config(name, adaptor, reserved=BUILD_KEYS,
                           example="dict(type='mmstiff.StepNetAdaptor')")
    if adaptor is None:
        return None
    adaptor_type = adaptor['type']
    cls = adaptor_type if isinstance(adaptor_type, type) else MODELS.get(adaptor_type)
    if cls is None:
        raise ValueError(f'{name} type {adaptor_type!r} is not registered; expected a '
                         "step-size adaptor such as 'mmstiff.StepNetAdaptor', "
                         "'mmstiff.SEAdaptor' or 'mmstiff.ConstantStep'")
    if not (isinstance(cls, type) and issubclass(cls, StepAdaptor)):
        raise ValueError(f'{name} type {adaptor_type!r} builds {cls!r}, which is not a '
                         'StepAdaptor (a module (x_t, f) -> Δ_t)')
    adaptor['type'] = cls
    return adaptor


def adaptor_with_norm(adaptor: Optional[dict], norm_cfg: Optional[dict],
                      adaptor_norm_cfg: Optional[dict] = None) -> Optional[dict]:
    """The adaptor config a backbone builds: ``norm_cfg`` filled in for an adaptor type that
    takes one (:attr:`StepAdaptor.takes_norm_cfg`) and whose config does not set it.

    Args:
        adaptor (dict | None): a config checked by :func:`resolve_adaptor`.
        norm_cfg (dict): the backbone's ``norm_cfg``, the default.
        adaptor_norm_cfg (dict, optional): the backbone's explicit override for the adaptors.

    Raises:
        ValueError: when both the adaptor config and ``adaptor_norm_cfg`` set the norm.
    """
    if adaptor is None or not adaptor['type'].takes_norm_cfg:
        return adaptor
    if 'norm_cfg' in adaptor:
        if adaptor_norm_cfg is not None:
            raise ValueError(f"adaptor.norm_cfg={adaptor['norm_cfg']!r} and adaptor_norm_cfg="
                             f'{adaptor_norm_cfg!r} both set the adaptors\' norm; expected one')
        return adaptor
    chosen = norm_cfg if adaptor_norm_cfg is None else adaptor_norm_cfg
    return adaptor if chosen is None else dict(adaptor, norm_cfg=dict(chosen))


def build_adaptor(adaptor: Optional[dict], channels: int, layout: str) -> Optional[StepAdaptor]:
    """One adaptor module from a config checked by :func:`resolve_adaptor` (None: None)."""
    if adaptor is None:
        return None
    return MODELS.build(dict(adaptor, channels=channels, layout=layout))


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


def state_dtype(shortcut: torch.Tensor, f: torch.Tensor) -> torch.dtype:
    """The dtype of ``x_{t+1}``: that of ``shortcut + f``, whatever Δ's dtype (a step size
    computed in float32 under autocast does not promote a half-precision residual stream)."""
    if shortcut.dtype == f.dtype:  # no operator call in the common case
        return f.dtype
    return torch.promote_types(shortcut.dtype, f.dtype)


def as_state_dtype(step: torch.Tensor, shortcut: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``step`` in :func:`state_dtype` (itself, without an operator call, where it is already)."""
    dtype = state_dtype(shortcut, f)
    return step if step.dtype == dtype else step.to(dtype)


def apply_step(x_t: torch.Tensor, step: StepSize, f: torch.Tensor) -> torch.Tensor:
    """One Euler update ``x_t + Δ ⊙ f`` (no activation), skipping the multiply for Δ ≡ 1.

    The update keeps the states' precision: a tensor Δ is cast to the dtype of ``x_t + f``
    (:func:`state_dtype`), so that a step size computed in float32 (a norm
    layer's output under autocast) does not turn a half-precision residual stream into float32.
    """
    if isinstance(step, float) and step == 1.0:
        return x_t + f
    if torch.is_tensor(step):
        return torch.addcmul(x_t, as_state_dtype(step, x_t, f), f)
    return x_t + step * f


def learns_statistics(adaptor: StepAdaptor, adaptor_norm: str) -> bool:
    """Whether ``adaptor``'s BN keeps updating its statistics under ``norm_eval=True``.

    ``'train'``: always; ``'follow'``: never (as every BN of the backbone); ``'auto'``: when
    the first state dict loaded into the model lacked them. A model that loaded nothing keeps
    the ``norm_eval`` contract: its adaptors' statistics stay frozen with the backbone's.
    """
    if adaptor_norm == 'train':
        return True
    return adaptor_norm == 'auto' and adaptor.statistics_loaded is False


#: why the adaptors named in the log line learn their statistics, per ``adaptor_norm``
RELEASE_REASONS = {
    'auto': "adaptor_norm='auto': the loaded checkpoint lacked their statistics",
    'train': "adaptor_norm='train'",
}


def unfrozen_res_layers(backbone: nn.Module) -> List[nn.Module]:
    """The residual layers of a ResNet-style backbone outside its frozen stages
    (``backbone.res_layers`` names them, ``backbone.frozen_stages`` counts the frozen ones)."""
    return [
        getattr(backbone, name) for i, name in enumerate(backbone.res_layers, 1)
        if i > backbone.frozen_stages
    ]


def release_adaptor_statistics(layers: Iterable[nn.Module], adaptor_norm: str,
                               owner: Optional[nn.Module] = None) -> int:
    """Put back in train mode the BN of the adaptors in ``layers`` that learn their statistics.

    A backbone calls it from ``train(True)`` after its ``norm_eval`` has put every BN in eval
    mode, passing the stages that are not frozen and itself as ``owner``: the first release
    of an ``owner`` logs one line naming how many adaptors learn their statistics and why.

    Returns:
        int: how many adaptors learn their statistics.
    """
    released = 0
    for layer in layers:
        for adaptor in layer.modules():
            norms = [m for m in adaptor.modules() if isinstance(m, _BatchNorm)]
            if isinstance(adaptor, StepAdaptor) and norms \
                    and learns_statistics(adaptor, adaptor_norm):
                released += 1
                for m in norms:
                    m.train(True)
    if released and owner is not None and not getattr(owner, '_release_reported', False):
        owner._release_reported = True
        total = sum(isinstance(m, StepAdaptor) for m in owner.modules())
        MMLogger.get_current_instance().info(
            f'{type(owner).__name__}: norm_eval=True freezes the BN statistics, but {released} '
            f'of {total} step adaptors learn theirs ({RELEASE_REASONS[adaptor_norm]}); '
            "adaptor_norm='follow' freezes them too")
    return released


def init_keeping_starts(module: nn.Module, init: Callable[[], None]) -> None:
    """Run ``init()`` (a backbone's upstream ``init_weights``), then give every adaptor of
    ``module`` that it did not load from a checkpoint its start again.

    MMEngine applies a backbone's ``init_cfg`` initialisers to every submodule, adaptors
    included, and calls ``init_weights`` only of children that have one, which the blocks in an
    ``nn.Sequential`` stage are not; a ``Pretrained`` checkpoint is loaded last. So the adaptors'
    own :meth:`StepAdaptor.init_weights` may not run, or run before the checkpoint; this runs
    after both and spares the adaptors the checkpoint held.
    """
    adaptors = [(name, m) for name, m in module.named_modules() if isinstance(m, StepAdaptor)]
    for _, adaptor in adaptors:
        adaptor.state_loaded = False
        adaptor.load_mismatch = []
    init()
    for name, adaptor in adaptors:
        if adaptor.state_loaded:
            continue
        adaptor.reset_start()
        if adaptor.load_mismatch:
            key, saved, own = adaptor.load_mismatch[0]
            MMLogger.get_current_instance().warning(
                f'the checkpoint entry of adaptor {name!r} did not load: {key} has shape '
                f'{saved}, the adaptor {own} ({len(adaptor.load_mismatch)} entries differ); '
                f"it keeps its start={getattr(adaptor, 'start', None)!r}")
