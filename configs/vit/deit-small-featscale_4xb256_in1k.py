# DeiT-S (12 layers) with FeatScale in every layer (anti-oversmoothing §3.2, docs/methods.md §7):
# X <- X_DC (1 + s) + X_HC (1 + t) on the MSA output, s, t initialised to 0. DeiT recipe of
# mmpretrain (300 epochs, AdamW, batch 1024); paper, Table 1: 80.9 top-1.
_base_ = ['mmpretrain::deit/deit-small_4xb256_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(backbone=dict(type='mmstiff.StepViT', feat_scale_layers='all'))

train_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
test_dataloader = val_dataloader

# the DeiT code excludes every 1-D parameter from weight decay; so do we for s and t
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '.dc_scale': dict(decay_mult=0.0),
        '.hc_scale': dict(decay_mult=0.0)
    }))
