"""Both diagnostics hooks through a real Runner on the model zoo: every recognised backbone of
the registry walk, mmpretrain's own ConvNeXt, EfficientNet and DeiT3 configs, and zoo backbones
inside a Faster R-CNN. Each logs finite per-block NSI and high-frequency ratios."""
import glob
import math
import os.path as osp
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip('mmpretrain')

from diagnostics_toy import read_json_lines  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.model import BaseModel  # noqa: E402
from mmengine.runner import Runner  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tests', 'analysis'))  # the registry walk's tables
from zoo_walk import build_backbone, load_cases, registry_backbones  # noqa: E402

from mmstiff.analysis.zoo import non_residual  # noqa: E402

CASES, _ = load_cases()
HOOKS = [
    dict(type='mmstiff.StiffnessHook', interval=1),
    dict(type='mmstiff.FrequencyHook', interval=1)
]
NUM_CLASSES = 3


def _pooled(out):
    out = out[-1] if isinstance(out, (tuple, list)) else out
    if isinstance(out, (tuple, list)):  # e.g. (patch tokens, class token)
        out = out[0]
    return out.flatten(2).mean(-1) if out.dim() > 2 else out


class ZooClassifier(BaseModel):
    """Any backbone, its last output pooled, and a linear head sized by a first forward."""

    def __init__(self, backbone, example):
        super().__init__()
        self.backbone = backbone
        with torch.no_grad():
            width = _pooled(backbone(example)).shape[1]
        self.head = nn.Linear(width, NUM_CLASSES)

    def forward(self, inputs, labels=None, mode='tensor'):
        # TridentNet trains its branches as one batch (branches x samples): the first branch's
        logits = self.head(_pooled(self.backbone(inputs)))[:inputs.shape[0]]
        if mode == 'loss':
            return dict(loss=F.cross_entropy(logits, labels))
        return logits


def _scalars(work_dir):
    (path, ) = glob.glob(osp.join(str(work_dir), '*', 'vis_data', 'scalars.json'))
    merged = {}
    for line in read_json_lines(path):
        merged.update(line)
    return merged


def _assert_per_block(scalars, what):
    for prefix in ('stiffness/nsi/', 'freq/hf_ratio/'):
        keys = {k: v for k, v in scalars.items() if k.startswith(prefix)}
        assert keys, f'{what}: no {prefix}<block> key was logged'
        bad = {k: v for k, v in keys.items() if not math.isfinite(v)}
        assert not bad, f'{what}: non-finite {bad}'
    return scalars


def _recognised():
    for key in registry_backbones():
        if key in non_residual():
            continue
        marks = [pytest.mark.det] if key.startswith('mmdet.') else []
        yield pytest.param(key, marks=marks, id=key)


@pytest.mark.slow
@pytest.mark.parametrize('key', list(_recognised()))
def test_hooks_through_a_runner_on_every_recognised_backbone(key, tmp_path):
    case = CASES.get(key)
    if case is None or case.get('skip'):
        pytest.skip((case or {}).get('skip', 'no case'))
    if case.get('setup') is not None:
        pytest.skip('a sparse encoder trains only inside masked pretraining, which sets its mask '
                    'per batch; the registry walk checks its steps in eval mode')
    if key.startswith('mmdet.'):
        pytest.importorskip('mmdet')
    backbone = build_backbone(key, case)
    backbone.train()
    shape = case['input']
    images = torch.randn(4, *shape[1:], generator=torch.Generator().manual_seed(0))
    labels = torch.arange(4) % NUM_CLASSES
    runner = Runner(
        model=ZooClassifier(backbone, images[:2]), work_dir=str(tmp_path),
        train_dataloader=DataLoader(TensorDataset(images, labels),
                                    batch_size=2), train_cfg=dict(by_epoch=False, max_iters=2),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)), custom_hooks=HOOKS,
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1), checkpoint=None),
        randomness=dict(seed=0), default_scope='mmengine', experiment_name=key.replace('.', '_'))
    runner.train()
    _assert_per_block(_scalars(tmp_path), key)


# ---------------------------------------------------------------- mmpretrain's own configs
UPSTREAM_CONFIGS = [
    'mmpretrain::convnext/convnext-tiny_32xb128_in1k.py',
    'mmpretrain::efficientnet/efficientnet-b0_8xb32_in1k.py',
    'mmpretrain::deit3/deit3-small-p16_64xb64_in1k.py',
]


@pytest.mark.slow
@pytest.mark.parametrize('base', UPSTREAM_CONFIGS, ids=lambda b: b.split('/')[-1])
def test_upstream_zoo_configs_train_two_iterations_with_both_hooks(base, tiny_data, tmp_path):
    from test_configs import drop_downloads, point_data_at, shorten

    import mmstiff  # noqa: F401
    config = tmp_path / 'config.py'
    config.write_text(f'_base_ = {base!r}\ncustom_hooks = {HOOKS!r}\n')
    cfg = Config.fromfile(str(config))
    point_data_at(cfg, tiny_data)
    drop_downloads(cfg)
    shorten(cfg, tmp_path / 'work')
    cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    cfg.train_cfg.pop('val_interval', None)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 2
    _assert_per_block(_scalars(tmp_path / 'work'), base)


# ---------------------------------------------------------------- detection
DET_BACKBONES = {
    'mmpretrain-convnext':
    ("dict(_delete_=True, type='mmpretrain.ConvNeXt', arch='atto', out_indices=(0, 1, 2, 3), "
     'gap_before_final_norm=False)', [40, 80, 160, 320]),
    'mmdet-pvtv2': ("dict(_delete_=True, type='mmdet.PyramidVisionTransformerV2', embed_dims=32, "
                    'num_layers=[1, 1, 1, 1])', [32, 64, 160, 256]),
}


@pytest.mark.slow
@pytest.mark.det
@pytest.mark.parametrize('backbone', sorted(DET_BACKBONES))
def test_faster_rcnn_with_zoo_backbones_logs_per_block_keys(backbone, tiny_data, run_tool,
                                                            tmp_path):
    pytest.importorskip('mmdet')
    root = tiny_data('coco') + '/'
    spec, channels = DET_BACKBONES[backbone]
    base = osp.join(REPO, 'tests/data/configs/faster_rcnn_r50_fpn_tiny.py')
    config = tmp_path / 'det_config.py'
    config.write_text(f'_base_ = {base!r}\n'
                      f'model = dict(backbone={spec}, neck=dict(in_channels={channels}))\n'
                      f'custom_hooks = {HOOKS!r}\n'
                      'default_hooks = dict(checkpoint=None)\n')
    work = tmp_path / 'work'
    run_tool('tools/train.py', str(config), '--work-dir', str(work), '--cfg-options',
             f'train_dataloader.dataset.data_root={root}',
             f'val_dataloader.dataset.data_root={root}',
             f'test_dataloader.dataset.data_root={root}',
             f'val_evaluator.ann_file={root}annotations/instances_val2017.json',
             f'test_evaluator.ann_file={root}annotations/instances_val2017.json')
    _assert_per_block(_scalars(work), backbone)
