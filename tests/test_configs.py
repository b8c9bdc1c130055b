"""Every config in configs/ builds and trains two iterations on tiny generated data.

Only data settings are overridden: where the data lives (``data_root``, annotation files), the
batch size and workers, the detection input scale (a data-pipeline setting, kept small so the
suite runs on 2 CPU cores), a pretrained checkpoint that cannot be downloaded here, and the
loop length. A new config is covered automatically; a config whose dataset type has no tiny
writer yet fails here with a message saying so.
"""
import glob
import os.path as osp

import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(
    osp.relpath(p, REPO) for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
    if f'{osp.sep}_base_{osp.sep}' not in p)

#: dataset type (with or without the mmstiff. scope) -> tiny-data kind of tests/conftest.py
DATASET_KINDS = {
    'CIFAR10': 'cifar10',
    'CIFAR100': 'cifar100',
    'ImageNet': 'imagenet',
    'CustomDataset': 'imagenet',
    'STL10': 'stl10',
    'MNIST': 'mnist',
    'FashionMNIST': 'mnist',
    'CocoDataset': 'coco',
}
WRAPPERS = ('RepeatDataset', 'ClassBalancedDataset', 'ConcatDataset', 'MultiImageMixDataset')
DET_SCALE = (160, 128)


def _datasets(dataset):
    """The leaf dataset dicts inside (possibly wrapped) dataset configs."""
    if dataset.get('type', '').split('.')[-1] in WRAPPERS:
        inner = dataset.get('datasets') or [dataset['dataset']]
        for d in inner:
            yield from _datasets(d)
    else:
        yield dataset


def point_data_at(cfg, tiny_data):
    """Override the data settings of ``cfg`` (in place) so it reads the tiny generated sets."""
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(field)
        if loader is None:
            continue
        loader.batch_size = 2
        loader.num_workers = 0
        loader.persistent_workers = False
        for dataset in _datasets(loader.dataset):
            kind_key = dataset['type'].split('.')[-1]
            if kind_key not in DATASET_KINDS:
                raise AssertionError(
                    f'dataset type {dataset["type"]!r} has no tiny-data writer; add it to '
                    f'DATASET_KINDS in {__file__} and a writer to tests/conftest.py')
            kind = DATASET_KINDS[kind_key]
            root = tiny_data(kind)
            dataset.data_root = root + ('/' if kind == 'coco' else '')
            if kind == 'coco':
                split = 'train' if field == 'train_dataloader' else 'val'
                dataset.ann_file = f'annotations/instances_{split}2017.json'
                dataset.data_prefix = dict(img=f'{split}2017/')
                for step in dataset.get('pipeline', []):
                    if step['type'] in ('Resize', 'RandomResize', 'RandomChoiceResize'):
                        step.pop('scales', None)
                        step.scale = DET_SCALE
                        step.type = 'Resize'
                        step.keep_ratio = True
    for field in ('val_evaluator', 'test_evaluator'):
        evaluators = cfg.get(field)
        for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
            if evaluator and 'ann_file' in evaluator:
                evaluator.ann_file = tiny_data('coco') + '/annotations/instances_val2017.json'


def drop_downloads(cfg):
    """Pretrained checkpoints cannot be fetched here; tests start from random weights."""
    cfg.load_from = None
    model = cfg.model
    for part in (model, model.get('backbone') or {}):
        init = part.get('init_cfg')
        if isinstance(init, dict) and init.get('type') == 'Pretrained':
            part.init_cfg = None


def shorten(cfg, work_dir):
    cfg.work_dir = str(work_dir)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=2, val_interval=2)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=2)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    cfg.log_processor = dict(by_epoch=False)
    cfg.param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
    cfg.pop('auto_scale_lr', None)
    for hook in cfg.get('custom_hooks', []):
        if 'interval' in hook:
            hook.interval = 1


def test_config_folder_is_not_empty():
    assert CONFIGS, 'configs/ holds no config'


@pytest.mark.slow
@pytest.mark.parametrize('config', CONFIGS)
def test_config_trains_two_iterations(config, tiny_data, tmp_path):
    import mmstiff  # noqa: F401
    from mmengine.runner import Runner

    cfg = Config.fromfile(osp.join(REPO, config))
    assert cfg.get('default_scope') in ('mmpretrain', 'mmdet'), cfg.get('default_scope')
    point_data_at(cfg, tiny_data)
    drop_downloads(cfg)
    shorten(cfg, tmp_path)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 2
    assert osp.isfile(osp.join(str(tmp_path), 'iter_2.pth'))
    losses = runner.message_hub.log_scalars
    loss_keys = [k for k in losses if k.startswith('train/') and 'loss' in k]
    assert loss_keys, f'no training loss was logged for {config}'
    for key in loss_keys:
        value = losses[key].current()
        assert value == value and abs(value) < 1e6, f'{key}={value} is not a finite loss'
