# The demo: a StepNet pre-activation ResNet-20 on the real Fashion-MNIST (28x28 grey,
# 60k train / 10k test), trained on CPU in a few minutes through tools/train.py.
#
#   make demo        # or: python tools/demo.py (this config is its default --config)
#
# Every residual block is one Euler step x_{t+1} = x_t + Δ_t ⊙ f(x_t) whose step size Δ_t
# comes from the StepNet adaptor. Set `adaptor` to None for the plain ResNet (Δ ≡ 1) or to
# dict(type='mmstiff.SEAdaptor') for SE, to compare them on the same data.
_base_ = [
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/datasets/fashion-mnist_bs128.py',
]

adaptor = dict(type='mmstiff.StepNetAdaptor')
backbone = dict(type='mmstiff.PreActStepResNet', depth=20, in_channels=1, base_channels=16,
                strides=(2, 2, 2), adaptor=adaptor)
model = dict(
    type='ImageClassifier', backbone=backbone, neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=64,
              loss=dict(type='CrossEntropyLoss'), topk=(1, )))

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=3, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=3, val_interval=3)
val_cfg = dict()
test_cfg = dict()

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50), checkpoint=dict(type='CheckpointHook', interval=1,
                                                                 max_keep_ckpts=2))

# Training diagnostics: per-block neural stiffness index (NSI), step sizes and TNS every 50
# iterations; high-frequency ratio and Δ log amplitude every 100. They go to the JSON log, the
# console and any configured visualizer backend; tools/analysis/plot_logs.py plots them.
custom_hooks = [
    dict(type='mmstiff.StiffnessHook', interval=50),
    dict(type='mmstiff.FrequencyHook', interval=100),
]
