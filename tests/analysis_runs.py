"""Tiny checkpoints of an MNIST classifier trained here, and the analysis tools run on them as a
user runs them (a fresh process, the checkout's mmstiff first): what the tests of
tools/analysis/ share (tests/tools/, tests/cuda/)."""
import os
import os.path as osp
import subprocess
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

COMMON = '''
_base_ = ['mmpretrain::_base_/default_runtime.py']
data_root = {data_root!r}
model = dict(
    type='ImageClassifier',
    backbone={backbone},
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels={channels},
              loss=dict(type='CrossEntropyLoss')))
data_preprocessor = dict(num_classes=10, mean=[33.3], std=[78.6], to_rgb=False)
pipeline = [dict(type='PackInputs')]
train_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                        dataset=dict(type='MNIST', data_root=data_root, split='train',
                                     pipeline=pipeline),
                        sampler=dict(type='DefaultSampler', shuffle=False))
test_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                       dataset=dict(type='MNIST', data_root=data_root, split='test',
                                    pipeline=pipeline),
                       sampler=dict(type='DefaultSampler', shuffle=False))
val_dataloader = None
val_cfg = None
val_evaluator = None
test_evaluator = dict(type='Accuracy', topk=(1, ))
test_cfg = dict()
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9))
train_cfg = dict(by_epoch=False, max_iters=4)
param_scheduler = []
default_hooks = dict(logger=dict(type='LoggerHook', interval=1),
                     checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=4))
custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=2),
                dict(type='mmstiff.FrequencyHook', interval=2)]
'''
CNN = ("dict(type='mmstiff.StepResNet_CIFAR', depth=18, in_channels=1, stem_channels=8, "
       "base_channels=8, adaptor=dict(type='mmstiff.StepNetAdaptor'))", 64)
VIT = ("dict(type='VisionTransformer', arch=dict(embed_dims=16, num_layers=2, num_heads=2, "
       "feedforward_channels=32), img_size=28, patch_size=7, in_channels=1, "
       "out_type='featmap')", 16)


def train_tiny(root, data_root, backbone):
    from mmengine.config import Config
    from mmengine.runner import Runner
    config = osp.join(root, 'config.py')
    with open(config, 'w') as f:
        f.write(COMMON.format(data_root=data_root, backbone=backbone[0], channels=backbone[1]))
    cfg = Config.fromfile(config)
    cfg.work_dir = osp.join(root, 'work_dir')
    runner = Runner.from_cfg(cfg)
    runner.train()
    return config, osp.join(cfg.work_dir, 'iter_4.pth'), cfg.work_dir, runner


def analysis_tool(name, *args):
    """Run a tool as a user would, in a fresh process."""
    path = [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'analysis', name), *args], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout
