"""The training objective the loss instruments evaluate (hessian.py, loss_landscape.py;
docs/methods.md §12): the model's training loss and each parameter's weight decay in the
config's optimizer."""
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Union

from .runtime import ConfigError

if TYPE_CHECKING:
    import torch
    from mmengine.config import Config


def training_loss(model: 'torch.nn.Module', data: Union[dict, Sequence]) -> 'torch.Tensor':
    """The model's training loss on preprocessed ``data``: every ``loss`` term summed as the
    Runner does (``parse_losses``), a differentiable scalar."""
    if isinstance(data, dict):
        losses = model(**data, mode='loss')
    else:
        losses = model(*data, mode='loss')
    loss, _ = model.parse_losses(losses)
    return loss


def weight_decays(cfg: 'Config', model: 'torch.nn.Module', params: Sequence['torch.Tensor'],
                  override: Optional[float] = None) -> List[float]:
    """The ``ℓ2`` coefficient of each parameter: ``override`` for all of them, or each one's
    weight decay in the optimizer the config's ``optim_wrapper`` builds (its paramwise settings
    included); 0 where the config has no optimizer."""
    if override is not None:
        if override < 0:
            raise ConfigError(f'--weight-decay {override!r} is negative; expected a float >= 0')
        return [float(override)] * len(params)
    from mmengine.optim import build_optim_wrapper

    from mmstiff.analysis.landscape import param_weight_decays
    from mmstiff.engine.hooks.hessian_hook import optimizer_param_groups
    optim_cfg = cfg.get('optim_wrapper')
    if not optim_cfg:
        print('the config has no optim_wrapper: the l2 term is 0 (pass --weight-decay)')
        return [0.0] * len(params)
    optim_cfg = optim_cfg.copy()
    if optim_cfg.get('type') == 'AmpOptimWrapper':
        # only the parameter groups are read; AMP's wrapper refuses to build without a GPU
        optim_cfg['type'] = 'OptimWrapper'
        for key in ('loss_scale', 'dtype', 'use_fsdp'):
            optim_cfg.pop(key, None)
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    return param_weight_decays(params, optimizer_param_groups(optim_wrapper))


def decay_summary(decays: Iterable[float]) -> Dict[str, int]:
    """``{decay: number of parameters}`` for the JSON (the distinct coefficients used)."""
    summary = {}
    for d in decays:
        summary[repr(float(d))] = summary.get(repr(float(d)), 0) + 1
    return summary
