# The matched budget of the cross-architecture study (configs/studies/zoo_tns_fashion_mnist.py):
# every family trains from scratch on the same fixed subset of Fashion-MNIST (the first 6,400
# training images), one epoch of 100 iterations at batch 64, with the same optimizer, schedule,
# loss and augmentation, and is tested on the same fixed subset of the test set (its first 2,000
# images). No validation during training: the test after it is the only evaluation.
#
# Input: the 28x28 grey image, normalised and repeated over three channels. The data
# preprocessor's mean and std hold three equal values, so (x - mean) / std broadcasts the one grey
# channel to three; every backbone then keeps the three-channel stem mmpretrain builds (the
# MobileNetV2 and EfficientNet stems take no other channel count), and all see the same tensor.
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../../_base_/datasets/fashion-mnist_bs128.py',
]

data_preprocessor = dict(num_classes=10, mean=[72.93] * 3, std=[90.02] * 3, to_rgb=False)
train_dataloader = dict(batch_size=64, num_workers=1, dataset=dict(indices=6400))
test_dataloader = dict(num_workers=1, dataset=dict(indices=2000))
val_dataloader = None
val_evaluator = None

# AdamW for every family (the optimizer of the ConvNeXt, DeiT and PoolFormer recipes), the
# same learning rate, a 10-iteration warm-up and a cosine decay to the end of the epoch
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999)),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0), clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=10),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=1, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=1)
val_cfg = None
test_cfg = dict()

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10), checkpoint=dict(type='CheckpointHook', interval=1,
                                                                 max_keep_ckpts=1))
