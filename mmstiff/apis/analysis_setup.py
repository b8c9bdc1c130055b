"""What an analysis tool has before it measures: the device, the config, the trained model,
the loader of its split and its output folder, from its parsed arguments
(:mod:`mmstiff.apis.cli`), each checked before the next is loaded (docs/diagnostics.md).

Bad input raises one of :data:`TOOL_ERRORS`, which the tools print as ``error: ...``.
"""
from typing import TYPE_CHECKING, Any, Tuple

from mmstiff.utils.checkpoint import CheckpointError
from .analysis_output import check_visualizer, out_dir_of
from .batches import build_loader
from .devices import check_device, resolve_device
from .runtime import ConfigError
from .trained_model import checkpoint_options, load_model, load_trained_config

if TYPE_CHECKING:
    import torch
    from mmengine.config import Config
    from torch.utils.data import DataLoader

#: the errors that name a bad input of an analysis tool (its config, checkpoint, split, device)
TOOL_ERRORS = (ConfigError, CheckpointError)


def _trained(args, device):
    options = checkpoint_options(args)
    cfg = load_trained_config(args.config, args.checkpoint, args.cfg_options, options['trust'])
    check_visualizer(args, cfg)
    return cfg, load_model(cfg, args.checkpoint, **options).to(device)


def setup(args: Any, tool: str) -> Tuple['Config', 'torch.nn.Module', 'DataLoader', str]:
    """``(cfg, model, loader, out_dir)`` of tns.py, spectrum.py and freq_noise.py: the model on
    ``args.device`` (the CPU by default)."""
    device = check_device(getattr(args, 'device', 'cpu'))
    cfg, model = _trained(args, device)
    loader = build_loader(cfg, args.split, args.batch_size)
    return cfg, model, loader, out_dir_of(args, tool)


def instrument_setup(
        args: Any,
        tool: str) -> Tuple['Config', 'torch.nn.Module', 'DataLoader', str, 'torch.device']:
    """``(cfg, model, loader, out_dir, device)`` of hessian.py, loss_landscape.py and
    feature_variance.py: the model on ``--device`` (CUDA where present) in eval mode, the loader
    of ``--split`` with the data order and augmentations seeded by ``--seed``."""
    from mmengine.runner import set_random_seed
    device = resolve_device(args.device)
    cfg, model = _trained(args, device)
    set_random_seed(args.seed)  # the sampler's shuffle seed and the augmentations follow it
    loader = build_loader(cfg, args.split, args.batch_size)
    return cfg, model, loader, out_dir_of(args, tool), device
