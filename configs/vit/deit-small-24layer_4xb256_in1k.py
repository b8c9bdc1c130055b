# 24-layer DeiT-S, the deep baseline of the anti-oversmoothing paper (Table 1: 80.5 top-1):
# DeiT-S widths (384 channels, 6 heads, MLP 1536) with twice the depth, drop path 0.2
# (paper §5.1), DeiT recipe of mmpretrain otherwise.
# Anti-oversmoothing paper: Wang et al., "Anti-Oversmoothing in Deep Vision Transformers via
# the Fourier Domain Analysis: From Theory to Practice", ICLR 2022.
_base_ = ['mmpretrain::deit/deit-small_4xb256_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(
    backbone=dict(
        type='mmstiff.StepViT',
        arch=dict(
            _delete_=True,  # replaces the base's arch='deit-small'
            embed_dims=384,
            num_layers=24,
            num_heads=6,
            feedforward_channels=1536),
        drop_path_rate=0.2))

train_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
test_dataloader = val_dataloader
