"""The batches an analysis tool reads: the dataloader of one split of the config, and its
first batches through the model's data preprocessor, with a progress bar."""
import sys
from typing import TYPE_CHECKING, Iterable, Iterator, Optional, Tuple

from .runtime import ConfigError, preflight_data

if TYPE_CHECKING:
    import torch
    from mmengine.config import Config
    from torch.utils.data import DataLoader


def build_loader(cfg: 'Config', split: str, batch_size: Optional[int] = None) -> 'DataLoader':
    """The ``{split}_dataloader`` of ``cfg`` (``batch_size`` overriding its own); a split the
    config lacks or one that yields no batch raises :class:`ConfigError`."""
    from mmengine.runner import Runner
    field = f'{split}_dataloader'
    loader_cfg = cfg.get(field)
    if not loader_cfg:
        raise ConfigError(f'the config has no {field}; pick another --split')
    preflight_data(cfg, (field, ))
    loader_cfg = loader_cfg.copy()
    if batch_size is not None:
        loader_cfg['batch_size'] = batch_size
    if loader_cfg.get('num_workers', 0) == 0:
        loader_cfg['persistent_workers'] = False
    loader = Runner.build_dataloader(loader_cfg)
    if len(loader) == 0:
        raise ConfigError(
            f'--split {split}: {field} yields no batch (its dataset has '
            f'{len(loader.dataset)} samples; batch_size={loader_cfg.get("batch_size")}); '
            'nothing to analyse. Check the dataset paths of the config or pick another --split')
    return loader


def preprocessed_batches(model: 'torch.nn.Module', loader: Iterable, num_batches: int,
                         training: bool) -> Iterator[dict]:
    """Yield the first ``num_batches`` batches of ``loader`` through the model's data
    preprocessor (``training=True`` applies its batch augments, e.g. Mixup / CutMix)."""
    from mmengine.utils import ProgressBar
    total = min(num_batches, len(loader))
    bar = ProgressBar(total)
    for i, data in enumerate(loader):
        if i >= total:
            break
        yield model.data_preprocessor(data, training)
        bar.update()
    sys.stdout.write('\n')


def iterate(model: 'torch.nn.Module', loader: Iterable,
            num_batches: int) -> Iterator[Tuple['torch.Tensor', Optional[list]]]:
    """Yield ``(inputs, data_samples)`` of the first ``num_batches`` batches, preprocessed
    without the training augments."""
    for data in preprocessed_batches(model, loader, num_batches, False):
        yield data['inputs'], data.get('data_samples')
