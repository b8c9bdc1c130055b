# ConvNeXt-T on ImageNet-1k with a StepNet step size (Δ from x_t and x_t + f) on every residual
# step, written by mmstiff.WithSteps onto mmpretrain's backbone: everything else (data, schedule,
# augmentation, the backbone's own settings) is mmpretrain's config, inherited from its wheel
# (docs/methods.md §15).
_base_ = 'mmpretrain::convnext/convnext-tiny_32xb128_in1k.py'

model = dict(
    backbone=dict(_delete_=True, type='mmstiff.WithSteps', backbone={{_base_.model.backbone}},
                  adaptor=dict(type='mmstiff.StepNetAdaptor')))
