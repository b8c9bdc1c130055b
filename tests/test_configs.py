"""Every config in configs/ builds and trains two iterations on tiny generated data, and its
file name tells its real batch and schedule.

Only data settings are overridden: where the data lives (``data_root``, annotation files), the
batch size and workers, the detection input scale (a data-pipeline setting, kept small so the
suite runs on 2 CPU cores), a pretrained checkpoint that cannot be downloaded here, the loop
length, and, without a GPU, mixed precision in the optimizer wrapper. A new config is covered
automatically; a config whose dataset type has no tiny writer yet fails here with a message
saying so.

Names follow OpenMMLab: ``{model}_{N}xb{B}[-{E}e]_{data}.py`` (mmpretrain: N processes of B
samples, E epochs) or ``{model}_..._{k}x_{data}.py`` (mmdet: k x 12 epochs).
"""
import glob
import os
import os.path as osp
import re

import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: folders that hold no training configs: shared bases (any ``_base_``), and the reproduction
#: studies of tools/reproduce.py
NOT_CONFIGS = ('_base_', 'studies')
CONFIGS = sorted(
    osp.relpath(p, REPO)
    for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
    if not set(osp.relpath(p, REPO).split(osp.sep)[1:-1]) & set(NOT_CONFIGS))

#: configs kept under an earlier documented name: each only inherits the config it names, so it
#: is checked to resolve to exactly that config and is not trained a second time
ALIASES = {
    'configs/faster_rcnn_r50_stepnet_coco.py':
    'configs/faster_rcnn/faster-rcnn_r50-stepnet_fpn_1x_coco.py',
}
TRAINED = [c for c in CONFIGS if c not in ALIASES]

#: ``8xb32`` or ``8xb32-120e`` (with other ``-`` tags allowed around the epochs)
MMPRETRAIN_TRAINING = re.compile(r'^(?P<gpus>\d+)xb(?P<batch>\d+)(?:-.*)?$')
EPOCHS_TAG = re.compile(r'(?:^|-)(?P<epochs>\d+)e(?:-|$)')
#: mmdet's schedules: ``1x`` = 12 epochs, ``2x`` = 24, ``ms-3x`` = 36, ...
MMDET_SCHEDULE = re.compile(r'(?:^|-)(?P<times>\d+)x$')

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
#: datasets computed from their config (no files): only their size is cut
GENERATED = ('StiffFlowDataset', )
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
            if kind_key in GENERATED:
                dataset.num_samples = 8
                continue
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
    backbone = model.get('backbone') or {}
    # a backbone wrapped by mmstiff.WithSteps holds the upstream backbone's config
    for part in (model, backbone, backbone.get('backbone') or {}):
        init = part.get('init_cfg')
        if isinstance(init, dict) and init.get('type') == 'Pretrained':
            part.init_cfg = None


def without_gpu_amp(cfg):
    """MMEngine's ``AmpOptimWrapper`` trains on a GPU only: on the CPU the config trains with
    the plain ``OptimWrapper`` (the same optimizer, constructor and parameter-wise settings)."""
    import torch
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') == 'AmpOptimWrapper' and not torch.cuda.is_available():
        wrapper.type = 'OptimWrapper'
        for key in ('loss_scale', 'dtype', 'use_fsdp_loss_scale'):
            wrapper.pop(key, None)


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


def name_claims(config):
    """What the file name of ``config`` states: a dict with any of ``gpus``, ``batch``
    (samples per process) and ``epochs``."""
    claims = {}
    for part in osp.splitext(osp.basename(config))[0].split('_')[1:]:
        training = MMPRETRAIN_TRAINING.match(part)
        if training:
            claims.update(gpus=int(training['gpus']), batch=int(training['batch']))
            epochs = EPOCHS_TAG.search(part[len(f"{training['gpus']}xb{training['batch']}"):])
            if epochs:
                claims['epochs'] = int(epochs['epochs'])
        schedule = MMDET_SCHEDULE.search(part)
        if schedule:
            claims['epochs'] = 12 * int(schedule['times'])
    return claims


def test_every_config_of_every_family_is_collected():
    """CONFIGS, which the training test runs, holds every config of every family folder and no
    shared base or study, counted here by walking configs/ independently of its glob."""
    families = sorted(
        d for d in os.listdir(osp.join(REPO, 'configs'))
        if osp.isdir(osp.join(REPO, 'configs', d)) and d not in NOT_CONFIGS)
    walked = {
        osp.relpath(osp.join(REPO, 'configs', name), REPO)
        for name in os.listdir(osp.join(REPO, 'configs')) if name.endswith('.py')
    }
    for family in families:
        for folder, dirs, files in os.walk(osp.join(REPO, 'configs', family)):
            dirs[:] = [d for d in dirs if d not in NOT_CONFIGS]
            walked |= {osp.relpath(osp.join(folder, f), REPO) for f in files if f.endswith('.py')}
    assert set(CONFIGS) == walked
    assert len(CONFIGS) == len(walked)  # no config collected twice
    per_family = {f: [c for c in CONFIGS if c.split('/')[1] == f] for f in families}
    assert all(per_family.values()), f'a family folder holds no config: {per_family}'
    assert set(TRAINED) == set(CONFIGS) - set(ALIASES)


@pytest.mark.parametrize('name, claims', [
    ('configs/stepnet/preact-resnet164-stepnet_1xb128-164e_cifar10.py',
     dict(gpus=1, batch=128, epochs=164)),
    ('configs/stepnet/resnet50_8xb32-120e_in1k.py', dict(gpus=8, batch=32, epochs=120)),
    ('configs/vit/deit-small_4xb256_in1k.py', dict(gpus=4, batch=256)),
    ('configs/x/resnet50_8xb256-rsb-a1-600e_in1k.py', dict(gpus=8, batch=256, epochs=600)),
    ('configs/faster_rcnn/faster-rcnn_r50-stepnet_fpn_1x_coco.py', dict(epochs=12)),
    ('configs/x/faster-rcnn_r50_fpn_2x_coco.py', dict(epochs=24)),
    ('configs/x/faster-rcnn_r101_fpn_ms-3x_coco.py', dict(epochs=36)),
    ('configs/faster_rcnn_r50_stepnet_coco.py', dict()),
])
def test_name_claims_read_openmmlab_names(name, claims):
    assert name_claims(name) == claims


@pytest.mark.parametrize('config', CONFIGS)
def test_config_name_states_its_batch_and_schedule(config):
    """``8xb32-120e`` in the name: 32 samples per process, 256 in all for the learning-rate
    scaling, 120 epochs."""
    claims = name_claims(config)
    if not claims:
        pytest.skip(f'{config} states no batch or schedule in its name')
    cfg = Config.fromfile(osp.join(REPO, config))
    if 'batch' in claims:
        assert cfg.train_dataloader.batch_size == claims['batch'], (
            f'{config}: train_dataloader.batch_size is {cfg.train_dataloader.batch_size}, '
            f'the name says {claims["batch"]}')
        if cfg.get('auto_scale_lr'):
            total = claims['gpus'] * claims['batch']
            assert cfg.auto_scale_lr.base_batch_size == total, (
                f'{config}: auto_scale_lr.base_batch_size is {cfg.auto_scale_lr.base_batch_size}, '
                f'the name says {claims["gpus"]} x {claims["batch"]} = {total}')
    if 'epochs' in claims:
        assert cfg.train_cfg.max_epochs == claims['epochs'], (
            f'{config}: train_cfg.max_epochs is {cfg.train_cfg.max_epochs}, '
            f'the name says {claims["epochs"]}')


@pytest.mark.parametrize('alias, target', sorted(ALIASES.items()))
def test_alias_is_the_config_it_names(alias, target):
    assert Config.fromfile(osp.join(REPO, alias)).to_dict() == \
        Config.fromfile(osp.join(REPO, target)).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize('config', TRAINED)
def test_config_trains_two_iterations(config, tiny_data, tmp_path):
    from mmengine.runner import Runner

    import mmstiff  # noqa: F401

    cfg = Config.fromfile(osp.join(REPO, config))
    assert cfg.get('default_scope') in ('mmpretrain', 'mmdet'), cfg.get('default_scope')
    point_data_at(cfg, tiny_data)
    drop_downloads(cfg)
    without_gpu_amp(cfg)
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


@pytest.mark.parametrize('config', TRAINED)
def test_config_reads_its_data_through_the_checked_type(config):
    """Where mmstiff registers a checked dataset class of the same name as the upstream one
    (``mmstiff.CocoDataset``, ``mmstiff.CIFAR10``, ...), the project's configs use it: the
    checks of docs/reliability.md are the configs' default."""
    from mmstiff.registry import DATASETS
    DATASETS.import_from_location()
    cfg = Config.fromfile(osp.join(REPO, config))
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(field)
        for dataset in _datasets(loader.dataset) if loader else ():
            name = dataset['type'].split('.')[-1]
            if name in DATASETS.module_dict:
                assert dataset['type'] == f'mmstiff.{name}', (field, dataset['type'])
