# ConvNeXt at its smallest width, 'atto' (40-320 channels, 2-2-6-2 blocks, layer scale 1e-6 as in
# ConvNeXt V1), trained from scratch with the matched budget of the cross-architecture study
# (_base_/fashion-mnist-6400_1xb64-1e_adamw.py). The stem patchifies 2x2 instead of 4x4: its
# unpadded 2x2 downsampling layers take 28 / 4 = 7 to 3, 1 and 0, so the 4x stem leaves the last
# stage no pixel; with the 2x stem the stages see 14x14, 7x7, 3x3 and 1x1. The ImageNet recipe's
# label smoothing, Mixup / CutMix and drop path are left out, as for every family of the study.
_base_ = [
    'mmpretrain::_base_/models/convnext/convnext-tiny.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(
    backbone=dict(arch='atto', stem_patch_size=2, drop_path_rate=0.0),
    head=dict(num_classes=10, in_channels=320, loss=dict(_delete_=True, type='CrossEntropyLoss'),
              topk=(1, )), train_cfg=None)
