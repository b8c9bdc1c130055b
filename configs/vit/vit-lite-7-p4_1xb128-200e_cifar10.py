# A ViT trained from scratch on CIFAR-10, the plain baseline of the StepNet paper's Appendix G,
# Table 3 (89.08 top-1). The appendix does not give the architecture or the schedule; this is
# ViT-Lite-7/4 (Hassani et al., 2021), a standard from-scratch ViT for 32x32 images: patch 4
# (64 tokens + a class token), 7 layers, 256 channels, 4 heads, MLP 512; AdamW (lr 1e-3 for
# batch 128, weight decay 0.05), 200 epochs, 10 warm-up epochs then cosine, label smoothing 0.1,
# random crop (padding 4) and horizontal flip.
# StepNet paper: Huang et al., "Understanding Self-attention Mechanism via Dynamical System
# Perspective", ICCV 2023, arXiv:2308.09939.
_base_ = [
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    'mmpretrain::_base_/default_runtime.py',
]

# the folder that contains cifar-10-batches-py/
data_root = 'data/cifar10'

model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmstiff.StepViT', arch=dict(embed_dims=256, num_layers=7, num_heads=4,
                                                    feedforward_channels=512), img_size=32,
                  patch_size=4, drop_path_rate=0.1), neck=None,
    head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=256,
              loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')), init_cfg=[
                  dict(type='TruncNormal', layer='Linear', std=.02),
                  dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
              ])

train_dataloader = dict(
    batch_size=128, num_workers=4, dataset=dict(type='mmstiff.CIFAR10', data_root=data_root,
                                                split='train', download=False))
val_dataloader = dict(
    batch_size=256, num_workers=4, dataset=dict(type='mmstiff.CIFAR10', data_root=data_root,
                                                split='test', download=False))
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0, bias_decay_mult=0.0, flat_decay_mult=0.0, custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0)
        }), clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=10, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=10),
]
train_cfg = dict(by_epoch=True, max_epochs=200, val_interval=5)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=5, max_keep_ckpts=2, save_best='auto'))
