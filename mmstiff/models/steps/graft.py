"""Grafting adaptors onto a plain checkpoint (docs/methods.md §3): the start kept through a
backbone's initialisation, and the adaptors' BN statistics released under ``norm_eval``.

A backbone runs its upstream ``init_weights`` through :func:`init_keeping_starts`, and its
``train(True)`` calls :func:`release_adaptor_statistics` on the stages that are not frozen
(:func:`unfrozen_res_layers`); ``adaptor_norm`` (:data:`ADAPTOR_NORMS`) says which adaptors
learn their statistics (:func:`learns_statistics`).
"""
from typing import Callable, Iterable, List, Optional

import torch.nn as nn
from mmengine.logging import MMLogger
from torch.nn.modules.batchnorm import _BatchNorm

from .base import StepAdaptor

#: which adaptor BN statistics keep updating under a backbone's ``norm_eval=True``:
#: ``'auto'`` those a loaded checkpoint lacked (none when nothing was loaded), ``'follow'``
#: none (the backbone's rule), ``'train'`` all
ADAPTOR_NORMS = ('auto', 'follow', 'train')

#: why the adaptors named in the log line learn their statistics, per ``adaptor_norm``
RELEASE_REASONS = {
    'auto': "adaptor_norm='auto': the loaded checkpoint lacked their statistics",
    'train': "adaptor_norm='train'",
}


def check_adaptor_norm(adaptor_norm: str) -> str:
    """``adaptor_norm`` if it is one of :data:`ADAPTOR_NORMS`; ValueError naming it otherwise."""
    if not isinstance(adaptor_norm, str) or adaptor_norm not in ADAPTOR_NORMS:
        raise ValueError(f'adaptor_norm={adaptor_norm!r} is not supported; expected one of '
                         f'{ADAPTOR_NORMS}')
    return adaptor_norm


def learns_statistics(adaptor: StepAdaptor, adaptor_norm: str) -> bool:
    """Whether ``adaptor``'s BN keeps updating its statistics under ``norm_eval=True``.

    ``'train'``: always; ``'follow'``: never (as every BN of the backbone); ``'auto'``: when
    the first state dict loaded into the model lacked them. A model that loaded nothing keeps
    the ``norm_eval`` contract: its adaptors' statistics stay frozen with the backbone's.
    """
    if adaptor_norm == 'train':
        return True
    return adaptor_norm == 'auto' and adaptor.statistics_loaded is False


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

    Args:
        layers (Iterable[nn.Module]): the stages whose adaptors may learn their statistics.
        adaptor_norm (str): one of :data:`ADAPTOR_NORMS`.
        owner (nn.Module, optional): the backbone, for the log line.

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
