# Pre-activation ResNet-164 (bottleneck, He et al. 2016) on CIFAR-10: the plain baseline of the
# StepNet paper, Appendix F, Table 2: batch 128, 164 epochs, SGD momentum 0.9, lr 0.1 divided by
# 10 at epochs 81 and 122, weight decay 1e-4; random 32x32 crop (padding 4) and horizontal flip.
# StepNet paper: Huang et al., "Understanding Self-attention Mechanism via Dynamical System
# Perspective", ICCV 2023, arXiv:2308.09939.
_base_ = [
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    'mmpretrain::_base_/schedules/cifar10_bs128.py',
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/models/preact-resnet164.py',
]

# the folder that contains cifar-10-batches-py/
data_root = 'data/cifar10'

train_dataloader = dict(
    batch_size=128, num_workers=4, dataset=dict(type='mmstiff.CIFAR10', data_root=data_root,
                                                split='train', download=False))
val_dataloader = dict(
    batch_size=256, num_workers=4, dataset=dict(type='mmstiff.CIFAR10', data_root=data_root,
                                                split='test', download=False))
test_dataloader = val_dataloader

# mmpretrain's CIFAR schedule is already SGD 0.9, lr 0.1, wd 1e-4, batch 128; the paper's
# ResNet-164 recipe is shorter: 164 epochs with steps at 81 and 122.
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[81, 122], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=164, val_interval=1)

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=2, save_best='auto'))
