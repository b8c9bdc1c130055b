# A small ViT on the real Fashion-MNIST (28x28 grey, 60k train / 10k test), trained on CPU in
# minutes through tools/train.py: the transformer of the reproduction studies
# (configs/studies/frequency_fashion_mnist.py, configs/studies/oversmoothing_fashion_mnist.py).
#
#   python tools/prepare_fashion_mnist.py --dst data/fashion_mnist
#   python tools/train.py configs/vit/vit-tiny-p4_1xb128-2e_fashion-mnist.py
#
# Patch 4 gives a 7x7 token grid plus the class token; width 64, 4 heads, MLP 128, 4 layers
# (deeper with --cfg-options model.backbone.arch.num_layers=8), 2 epochs: about 3 minutes per
# 4 layers on one CPU core. AttnScale / FeatScale switch on
# with model.backbone.attn_scale_layers='all' / feat_scale_layers='all' (docs/methods.md §6-7).
# Both diagnostics hooks log every layer's MSA and MLP steps: NSI, high-frequency ratio, Δ log
# amplitude of the 7x7 token map and token / attention cosine similarity (docs/diagnostics.md).
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/datasets/fashion-mnist_bs128.py',
]

model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmstiff.StepViT', arch=dict(embed_dims=64, num_layers=4, num_heads=4,
                                                    feedforward_channels=128), img_size=28,
                  patch_size=4, in_channels=1, drop_path_rate=0.0), neck=None,
    head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=64,
              loss=dict(type='CrossEntropyLoss'), topk=(1, )), init_cfg=[
                  dict(type='TruncNormal', layer='Linear', std=.02),
                  dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
              ])

optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05, betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0, bias_decay_mult=0.0, custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),
            '.omega': dict(decay_mult=0.0),
        }), clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=200),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=2, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=2, val_interval=2)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50), checkpoint=dict(type='CheckpointHook', interval=1,
                                                                 max_keep_ckpts=2))

custom_hooks = [
    dict(type='mmstiff.StiffnessHook', interval=50),
    dict(type='mmstiff.FrequencyHook', interval=100),
]
