# The demo: a small CIFAR-style residual network on the real Fashion-MNIST (28x28 grey,
# 60k train / 10k test), trained on CPU in a few minutes through tools/train.py.
#
#   make demo        # or: python tools/demo.py --config configs/demo/fashion_mnist_stepnet.py
#
# Swap the backbone dict to compare step-size adaptors on the same data.
_base_ = ['mmpretrain::_base_/default_runtime.py']

data_root = 'data/fashion_mnist'

backbone = dict(
    type='ResNet_CIFAR', depth=18, in_channels=1, stem_channels=16, base_channels=16)
model = dict(
    type='ImageClassifier',
    backbone=backbone,
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss'),
        topk=(1, )))

# Fashion-MNIST pixel statistics (0.2860, 0.3530 on [0, 1]).
data_preprocessor = dict(num_classes=10, mean=[72.93], std=[90.02], to_rgb=False)
train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=2),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128,
    num_workers=2,
    dataset=dict(type='FashionMNIST', data_root=data_root, split='train', download=False,
                 pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=256,
    num_workers=2,
    dataset=dict(type='FashionMNIST', data_root=data_root, split='test', test_mode=True,
                 download=False,
                 pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=2, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=2, val_interval=2)
val_cfg = dict()
test_cfg = dict()

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=2))
