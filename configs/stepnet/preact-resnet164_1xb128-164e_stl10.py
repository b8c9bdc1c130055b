# Pre-activation ResNet-164 (bottleneck) on STL-10 (96x96, 5,000 labelled training images,
# 8,000 test images), trained "as CIFAR" (StepNet paper, Appendix F): batch 128, 164 epochs,
# SGD momentum 0.9, lr 0.1 divided by 10 at epochs 81 and 122, weight decay 1e-4; random crop
# with padding and horizontal flip. The padding is CIFAR's 4 pixels scaled to 96x96 (12).
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/models/preact-resnet164.py',
]

# the folder that contains stl10_binary/
data_root = 'data/stl10'

# STL-10 training-split pixel statistics (RGB, 0..255).
data_preprocessor = dict(num_classes=10, mean=[113.9, 112.1, 103.7], std=[66.4, 65.4, 69.2],
                         to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=96, padding=12),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128, num_workers=4, dataset=dict(type='mmstiff.STL10', data_root=data_root,
                                                split='train', pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=128, num_workers=4, dataset=dict(type='mmstiff.STL10', data_root=data_root,
                                                split='test', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4))
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[81, 122], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=164, val_interval=4)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=4, max_keep_ckpts=2, save_best='auto'))
