# Pre-activation ResNet-164 (bottleneck) on CIFAR-100, the StepNet paper's CIFAR schedule
# (Appendix F, Table 2): batch 128, 164 epochs, SGD 0.9, lr 0.1 (x0.1 at 81, 122), wd 1e-4.
_base_ = [
    'mmpretrain::_base_/datasets/cifar100_bs16.py',
    'mmpretrain::_base_/schedules/cifar10_bs128.py',
    'mmpretrain::_base_/default_runtime.py',
]

# the folder that contains cifar-100-python/
data_root = 'data/cifar100'

model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmstiff.PreActStepResNet', depth=164),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=100,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5)))

train_dataloader = dict(
    batch_size=128,
    num_workers=4,
    dataset=dict(type='mmstiff.CIFAR100', data_root=data_root, split='train', download=False))
val_dataloader = dict(
    batch_size=256,
    num_workers=4,
    dataset=dict(type='mmstiff.CIFAR100', data_root=data_root, split='test', download=False))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator

# mmpretrain's CIFAR schedule is already SGD 0.9, lr 0.1, wd 1e-4, batch 128; the paper's
# ResNet-164 recipe is shorter: 164 epochs with steps at 81 and 122.
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[81, 122], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=164, val_interval=1)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=2,
                                     save_best='auto'))
