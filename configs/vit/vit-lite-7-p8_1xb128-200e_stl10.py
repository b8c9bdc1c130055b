# A ViT trained from scratch on STL-10 (96x96, 5,000 labelled training images), the plain
# baseline of the StepNet paper's Appendix G, Table 3 (62.58 top-1). Same ViT-Lite-7 and schedule
# as the CIFAR configs of this folder, with patch 8 (12x12 = 144 tokens + a class token); random
# crop (padding 12, CIFAR's 4 pixels scaled to 96x96) and horizontal flip.
_base_ = ['./vit-lite-7-p4_1xb128-200e_cifar10.py']

# the folder that contains stl10_binary/
data_root = 'data/stl10'

model = dict(backbone=dict(img_size=96, patch_size=8))

# STL-10 training-split pixel statistics (RGB, 0..255).
data_preprocessor = dict(num_classes=10, mean=[113.9, 112.1, 103.7], std=[66.4, 65.4, 69.2],
                         to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=96, padding=12),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    dataset=dict(_delete_=True, type='mmstiff.STL10', data_root=data_root, split='train',
                 pipeline=train_pipeline))
val_dataloader = dict(
    dataset=dict(_delete_=True, type='mmstiff.STL10', data_root=data_root, split='test',
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
