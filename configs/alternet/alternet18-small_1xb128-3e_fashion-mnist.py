# A small AlterNet-18 on the real Fashion-MNIST (28x28 grey, 60k train / 10k test), trained on
# CPU in minutes through tools/train.py (about as fast per step as the pre-activation ResNet-20
# demo, configs/demo/): docs/alternet.md, docs/methods.md §10.
#
#   python tools/prepare_fashion_mnist.py --dst data/fashion_mnist
#   python tools/train.py configs/alternet/alternet18-small_1xb128-3e_fashion-mnist.py
#
# Blocks (2, 2, 2, 2), the last block of stages 2-4 a local MSA block; widths 16/32/64/128 and
# heads (1, 2, 4, 8) x 16, so each MSA is as wide as its stage. A 3x3 stride-1 stem and stride 2
# in every stage give 14/7/4/2 maps: window 7 is exactly the stage-2 map, and the stage-3 and -4
# maps, smaller than the window, are padded and masked, i.e. attend globally.
# The StiffnessHook logs the NSI and the FrequencyHook the high-frequency ratio and Δ log amplitude
# of every step, conv (layerI.convJ) and MSA (layerI.msaJ) alike.
# Paper: Park & Kim, "How Do Vision Transformers Work?", ICLR 2022, arXiv:2202.06709.
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/datasets/fashion-mnist_bs128.py',
]

model = dict(
    type='ImageClassifier', backbone=dict(type='mmstiff.AlterNet', depth=18, stem='cifar',
                                          in_channels=1, base_channels=16, strides=(2, 2, 2, 2),
                                          num_heads=(1, 2, 4, 8), head_dim=16, window_size=7),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=128,
              loss=dict(type='CrossEntropyLoss'), topk=(1, )))

# AdamW as in the paper's recipe, at a short-schedule learning rate
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05, betas=(0.9, 0.999)))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=3, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=3, val_interval=3)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50), checkpoint=dict(type='CheckpointHook', interval=1,
                                                                 max_keep_ckpts=2))

custom_hooks = [
    dict(type='mmstiff.StiffnessHook', interval=50),
    dict(type='mmstiff.FrequencyHook', interval=100),
]
