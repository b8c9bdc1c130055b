# ResNet-18 (mmpretrain's ImageNet ResNet, unchanged) trained from scratch with the matched budget
# of the cross-architecture study (_base_/fashion-mnist-6400_1xb64-1e_adamw.py). Its 4x stem
# (7x7 stride-2 conv, max-pool) gives the four stages 7x7, 4x4, 2x2 and 1x1 maps at 28x28.
_base_ = [
    'mmpretrain::_base_/models/resnet18.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(head=dict(num_classes=10, topk=(1, )))
