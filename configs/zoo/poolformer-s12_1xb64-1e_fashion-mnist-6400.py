# PoolFormer-S12 (mmpretrain's MetaFormer with pooling token mixers, layer scale 1e-5) trained from
# scratch with the matched budget of the cross-architecture study
# (_base_/fashion-mnist-6400_1xb64-1e_adamw.py). Its 4x patch embedding gives the stages 7x7,
# 4x4, 2x2 and 1x1 maps at 28x28; drop path off, as for every family of the study.
_base_ = [
    'mmpretrain::_base_/models/poolformer/poolformer_s12.py',
    './_base_/fashion-mnist-6400_1xb64-1e_adamw.py',
]

model = dict(backbone=dict(drop_path_rate=0.0), head=dict(num_classes=10, topk=(1, )))
