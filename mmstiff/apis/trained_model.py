"""A trained model for the analysis tools: the config with its overrides, the model built in
the config's scope with the checkpoint loaded (docs/diagnostics.md).

The checkpoint loads weights-only (:mod:`mmstiff.utils.checkpoint`; ``trust`` unpickles it in
full) and strictly: keys or shapes that do not match the model are an error naming them
(``allow_partial`` loads the matching part, with a warning), and so are NaN or inf weights or
statistics (``allow_non_finite`` goes on anyway).
"""
import os.path as osp
from typing import TYPE_CHECKING, Any, Dict, Optional

from mmstiff.utils.checkpoint import install_checkpoint_loader, load_checkpoint_into
from .runtime import ConfigError, codebase_of, load_config

if TYPE_CHECKING:
    import torch
    from mmengine.config import Config


def checkpoint_options(args: Any) -> Dict[str, bool]:
    """``dict(trust, allow_partial, allow_non_finite)`` from a tool's parsed checkpoint flags
    (:func:`mmstiff.apis.cli.add_checkpoint_args`; False where a flag is absent)."""
    return dict(
        trust=getattr(args, 'trust_checkpoint',
                      False), allow_partial=getattr(args, 'allow_partial_load', False),
        allow_non_finite=getattr(args, 'allow_non_finite', False))


def load_trained_config(config: str, checkpoint: str, cfg_options: Optional[dict] = None,
                        trust: bool = False) -> 'Config':
    """The config file ``config`` with ``cfg_options`` merged, after checking that
    ``checkpoint`` exists; installs the checkpoint loader (weights-only unless ``trust``) for
    every other load MMEngine does. Bad input raises :class:`ConfigError` naming it."""
    cfg = load_config(config)
    if not osp.isfile(checkpoint):
        raise ConfigError(f'checkpoint {checkpoint!r} does not exist')
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
        codebase_of(cfg)
    install_checkpoint_loader(trust=trust)
    return cfg


def load_model(cfg: 'Config', checkpoint: str, trust: bool = False, allow_partial: bool = False,
               allow_non_finite: bool = False) -> 'torch.nn.Module':
    """Build ``cfg.model`` in the config's scope and load ``checkpoint`` on the CPU (eval mode);
    a refused or mismatched checkpoint raises
    :class:`~mmstiff.utils.checkpoint.CheckpointError` naming it."""
    from mmengine.registry import MODELS, init_default_scope
    init_default_scope(cfg.default_scope)
    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        # as the Runner does: mmpretrain configs keep the normalisation at top level
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = MODELS.build(model_cfg)
    load_checkpoint_into(model, checkpoint, strict=not allow_partial, trust=trust,
                         allow_non_finite=allow_non_finite)
    model.eval()
    return model


def backbone_of(model: 'torch.nn.Module') -> 'torch.nn.Module':
    """The ``backbone`` of ``model`` (a classifier, a detector), or ``model`` itself where it has
    none."""
    return getattr(model, 'backbone', model)
