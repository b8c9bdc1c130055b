# EfficientNet-B0 (mmpretrain's architecture unchanged: MBConv blocks with SE gates) trained from
# scratch with the matched budget of the cross-architecture study
# (_base_/fashion-mnist-6400_1xb64-1e_adamw.py).
_base_ = [
    'mmpretrain::_base_/models/efficientnet_b0.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(head=dict(num_classes=10, topk=(1, )))
