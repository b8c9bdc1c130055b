# Faster R-CNN R50-FPN 1x on COCO with the StepNet step size in every residual block of the
# backbone (docs/methods.md §1; StepNet paper: +2.9 mAP over the plain R50 on this recipe).
#
# mmdet's norm_eval=True also freezes the statistics of the adaptors' BN (the adaptors' affine
# and IE parameters still train); frozen_stages=1 freezes the first stage's adaptors with it.
#
# Starting point: torchvision's plain ResNet-50 (as the plain config); every adaptor is then
# missing from the checkpoint and starts at Δ ≡ sigmoid(-1). The paper starts from a StepNet
# ResNet-50 trained on ImageNet: train configs/stepnet/resnet50-stepnet_8xb32-120e_in1k.py
# and point init_cfg at its checkpoint with prefix='backbone.', e.g.
#   init_cfg=dict(type='Pretrained',
#                 checkpoint='work_dirs/resnet50-stepnet_8xb32-120e_in1k/epoch_120.pth',
#                 prefix='backbone.')
_base_ = ['./faster-rcnn_r50_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        adaptor=dict(type='mmstiff.StepNetAdaptor', groups=None, norm='bn_ie'),
        # LTH4SA (docs/methods.md §4): e.g. adaptor_stages=(False, True, True, True)
        adaptor_stages=None,
        adaptor_blocks=None))
