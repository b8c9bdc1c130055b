# AlterNet-50 on ImageNet-1k (docs/alternet.md, docs/methods.md §10): pre-activation ResNet-50
# with blocks (3, 4, 6, 4), whose stages end in local MSA blocks (0, 1, 3, 2), heads
# (3, 6, 12, 24) x 64, window 7 on the 56/28/14/7 maps. 35.9M parameters.
# Recipe of the paper (Appendix A) and of the authors' released ImageNet config: 300 epochs,
# batch 128 (4 GPUs x 32), AdamW lr 1.25e-4, weight decay 0.05, 5 linear warm-up epochs then
# cosine to 0, label smoothing 0.1, Mixup (alpha 1.0) / CutMix (alpha 0.8), RandAugment (2 ops,
# magnitude 9, std 0.5), random erasing (p 0.25), stochastic depth 0.1.
# Paper: Park & Kim, "How Do Vision Transformers Work?", ICLR 2022, arXiv:2202.06709.
_base_ = ['mmpretrain::_base_/default_runtime.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(
    type='ImageClassifier', backbone=dict(type='mmstiff.AlterNet', depth=50, stem='imagenet',
                                          window_size=7, drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=2048,
              loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                        mode='original'), cal_acc=False),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=1.0),
                             dict(type='CutMix', alpha=0.8)]))

# RGB statistics on 0-255
mean = [123.675, 116.28, 103.53]
std = [58.395, 57.12, 57.375]
data_preprocessor = dict(num_classes=1000, mean=mean, std=std, to_rgb=True)
bgr_mean = [round(x) for x in mean[::-1]]  # images are decoded BGR before the preprocessor

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandAugment', policies='timm_increasing', num_policies=2, total_level=10,
         magnitude_level=9, magnitude_std=0.5, hparams=dict(pad_val=bgr_mean,
                                                            interpolation='bicubic')),
    # erased patches are the mean colour, i.e. zero after normalisation
    dict(type='RandomErasing', erase_prob=0.25, mode='const', min_area_ratio=0.02,
         max_area_ratio=1 / 3, fill_color=bgr_mean),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=32, num_workers=8, dataset=dict(type='ImageNet', data_root=data_root, split='train',
                                               pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=64, num_workers=8, dataset=dict(type='ImageNet', data_root=data_root, split='val',
                                               pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

# weight decay on every parameter, as the authors' training code applies it
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1.25e-4, weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=5,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=0.0, by_epoch=True, begin=5, end=300,
         convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
val_cfg = dict()
test_cfg = dict()
# lr 1.25e-4 is for 128 images per step; mmengine rescales it with --auto-scale-lr
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3))
