# mmpretrain's CIFAR-10 ResNet-18 recipe, cut to a few iterations on tiny generated CIFAR files.
_base_ = [
    'mmpretrain::_base_/models/resnet18_cifar.py',
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    'mmpretrain::_base_/schedules/cifar10_bs128.py',
    'mmpretrain::_base_/default_runtime.py',
]
data_root = 'data/cifar10'
# No random augmentation, so that a resumed run can be compared with an uninterrupted one.
pipeline = [dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(type='mmstiff.CIFAR10', data_root=data_root, pipeline=pipeline))
val_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                      dataset=dict(type='mmstiff.CIFAR10', data_root=data_root, pipeline=pipeline))
test_dataloader = val_dataloader
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=2, val_interval=1000)
param_scheduler = dict(_delete_=True, type='ConstantLR', factor=1.0, by_epoch=False)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1), checkpoint=dict(type='CheckpointHook',
                                                                by_epoch=False, interval=2))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
