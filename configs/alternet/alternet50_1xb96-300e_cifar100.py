# AlterNet-50 on CIFAR-100 (docs/alternet.md, docs/methods.md §10): pre-activation ResNet-50
# with blocks (3, 4, 6, 4) and no stem down-sampling (a 3x3 stride-1 stem conv), whose stages
# end in local MSA blocks (0, 1, 3, 2), heads (3, 6, 12, 24) x 64, window 4 on the 32/16/8/4
# maps (Appendix E). 34.1M parameters.
# Recipe of the paper (Appendix A) and of the authors' released CIFAR-100 config: 300 epochs,
# batch 96, AdamW lr 1.25e-4, weight decay 0.05, 5 linear warm-up epochs then cosine to 0,
# gradient-norm clipping at 5, label smoothing 0.1, Mixup (alpha 1.0) / CutMix (alpha 0.8),
# random crop (padding 4) and flip, RandAugment (2 ops, magnitude 9, std 1.0), random erasing
# (p 0.25), stochastic depth 0.1.
# Paper: Park & Kim, "How Do Vision Transformers Work?", ICLR 2022, arXiv:2202.06709.
_base_ = ['mmpretrain::_base_/default_runtime.py']

# the folder that contains cifar-100-python/
data_root = 'data/cifar100'

model = dict(
    type='ImageClassifier', backbone=dict(type='mmstiff.AlterNet', depth=50, stem='cifar',
                                          window_size=4, drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=100, in_channels=2048,
              loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                        mode='original'), cal_acc=False),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=1.0),
                             dict(type='CutMix', alpha=0.8)]))

# CIFAR-100 pixel statistics (RGB, 0-255); CIFAR images are RGB already
mean = [129.304, 124.070, 112.434]
std = [68.170, 65.392, 70.418]
data_preprocessor = dict(num_classes=100, mean=mean, std=std, to_rgb=False)
rgb_mean = [round(x) for x in mean]

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='RandAugment', policies='timm_increasing', num_policies=2, total_level=10,
         magnitude_level=9, magnitude_std=1.0, hparams=dict(pad_val=rgb_mean,
                                                            interpolation='bicubic')),
    # erased patches are the mean colour, i.e. zero after normalisation
    dict(type='RandomErasing', erase_prob=0.25, mode='const', min_area_ratio=0.02,
         max_area_ratio=1 / 3, fill_color=rgb_mean),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=96, num_workers=4,
    dataset=dict(type='mmstiff.CIFAR100', data_root=data_root, split='train', download=False,
                 pipeline=train_pipeline), sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=256, num_workers=4,
    dataset=dict(type='mmstiff.CIFAR100', data_root=data_root, split='test', download=False,
                 pipeline=test_pipeline), sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

# weight decay on every parameter, as the authors' training code applies it
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1.25e-4, weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8),
    clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=5,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=0.0, by_epoch=True, begin=5, end=300,
         convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=5)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=96)

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=5, max_keep_ckpts=2, save_best='auto'))
