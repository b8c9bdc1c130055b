# DeiT-tiny (VisionTransformer arch 'deit-tiny': width 192, 12 layers, 3 heads) on 28x28 images
# with 4x4 patches (a 7x7 token grid and the class token, as the 4x stems of the other families
# give 7x7 maps), trained from scratch with the matched budget of the cross-architecture study
# (_base_/fashion-mnist-6400_1xb64-1e_adamw.py); DeiT's initialisation, no label smoothing,
# Mixup / CutMix or dropout, as for every family of the study.
_base_ = [
    'mmpretrain::_base_/models/vit-base-p16.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(
    backbone=dict(arch='deit-tiny', img_size=28, patch_size=4, drop_rate=0.0, init_cfg=None),
    head=dict(num_classes=10, in_channels=192, loss=dict(_delete_=True, type='CrossEntropyLoss'),
              topk=(1, )), init_cfg=[
                  dict(type='TruncNormal', layer='Linear', std=.02),
                  dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
              ])
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '.cls_token': dict(decay_mult=0.0),
        '.pos_embed': dict(decay_mult=0.0),
    }))
