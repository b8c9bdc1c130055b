# CaiT-S24 (Touvron et al., "Going deeper with Image Transformers", ICCV 2021), the CaiT baseline
# of the anti-oversmoothing paper (Wang et al., ICLR 2022, Table 1: 82.7 reported, 82.6
# reproduced top-1 at 224 px; the paper trains CaiT with CaiT's own recipe). That recipe is
# DeiT's, for 400 epochs: AdamW, lr 5e-4 x 1024 / 512 = 1e-3, weight decay 0.05 (none on 1-D
# parameters, class token and position embedding), batch 1024 (here 16 x 64), 5 warm-up epochs
# then cosine to 1e-5, no gradient clipping, label smoothing 0.1, Mixup 0.8 / CutMix 1.0,
# RandAugment m9-mstd0.5, random erasing 0.25; drop path 0.1 uniform across depth, LayerScale
# init 1e-5 (the 's24' preset); evaluated at crop ratio 1.0 (short side resized to 224, centre
# crop 224). Data pipeline and optimiser come from mmpretrain's DeiT-S config, which uses no
# repeated augmentation (the DeiT code does); neither does this one.
_base_ = ['mmpretrain::deit/deit-small_4xb256_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(
    backbone=dict(
        _delete_=True,  # the base's VisionTransformer arguments do not apply
        type='mmstiff.CaiT',
        arch='s24',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1),
    head=dict(in_channels=384))

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=224, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=64, dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=400,
         convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=400, val_interval=1)
# mmpretrain's DeiT schedule clips gradients at norm 5; the DeiT and CaiT code do not
optim_wrapper = dict(clip_grad=None)

# base_batch_size = (16 GPUs) x (64 samples per GPU)
auto_scale_lr = dict(base_batch_size=1024)
