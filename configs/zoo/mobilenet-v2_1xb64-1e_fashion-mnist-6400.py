# MobileNetV2 (width 1.0, mmpretrain's architecture unchanged) trained from scratch with the matched
# budget of the cross-architecture study (_base_/fashion-mnist-6400_1xb64-1e_adamw.py); its
# inverted residuals that keep stride 1 and width add their input.
_base_ = [
    'mmpretrain::_base_/models/mobilenet_v2_1x.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(head=dict(num_classes=10, topk=(1, )))
