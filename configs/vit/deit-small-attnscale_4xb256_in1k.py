# DeiT-S (12 layers) with AttnScale in every layer (anti-oversmoothing §3.1, docs/methods.md §6):
# Â = A_LP + (1 + ω) A_HP per layer and head, ω initialised to 0. DeiT recipe of mmpretrain
# (300 epochs, AdamW, batch 1024, Mixup/CutMix, RandAugment); paper, Table 1: 80.7 top-1.
# Anti-oversmoothing paper: Wang et al., "Anti-Oversmoothing in Deep Vision Transformers via
# the Fourier Domain Analysis: From Theory to Practice", ICLR 2022.
_base_ = ['mmpretrain::deit/deit-small_4xb256_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(backbone=dict(type='mmstiff.StepViT', attn_scale_layers='all'))

train_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
test_dataloader = val_dataloader

# the DeiT code excludes every 1-D parameter from weight decay; so do we for ω
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'.omega': dict(decay_mult=0.0)}))
