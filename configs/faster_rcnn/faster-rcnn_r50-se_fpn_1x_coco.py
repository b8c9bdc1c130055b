# Faster R-CNN R50-FPN 1x on COCO with an SE step size Δ = sigmoid(W2 relu(W1 GAP(f))) in every
# residual block of the backbone (docs/methods.md §3).
#
# Starting point: torchvision's plain ResNet-50 (as the plain config); every SE adaptor is then
# missing from the checkpoint and starts from its own initialisation. To start from an SE-ResNet-50
# trained with configs/stepnet/resnet50-se_8xb32-120e_in1k.py, point init_cfg at that
# checkpoint with prefix='backbone.' (mmpretrain classifier keys), e.g.
#   init_cfg=dict(type='Pretrained',
#                 checkpoint='work_dirs/resnet50-se_8xb32-120e_in1k/epoch_120.pth',
#                 prefix='backbone.')
_base_ = ['./faster-rcnn_r50_fpn_1x_coco.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.SEAdaptor', ratio=16)))
