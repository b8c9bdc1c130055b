# Faster R-CNN R50-FPN 1x on COCO with an SE step size Δ = sigmoid(W2 relu(W1 GAP(f))) in every
# residual block of the backbone (docs/methods.md §3).
#
# Starting point: torchvision's plain ResNet-50 (as the plain config), so every SE adaptor is
# missing from the checkpoint. start='identity' (Δ = 2 sigmoid(W2 relu(W1 GAP(f)) + b2) with
# W2 = 0, b2 = 0, so Δ ≡ 1) makes the adapted backbone compute exactly the pretrained plain
# network at the first iteration (docs/methods.md §3, "Starting from a plain checkpoint").
# To start from an SE-ResNet-50 trained with configs/stepnet/resnet50-se_8xb32-120e_in1k.py,
# set start='paper' and point init_cfg at that checkpoint with prefix='backbone.' (mmpretrain
# classifier keys), e.g.
#   init_cfg=dict(type='Pretrained',
#                 checkpoint='work_dirs/resnet50-se_8xb32-120e_in1k/epoch_120.pth',
#                 prefix='backbone.')
_base_ = ['./faster-rcnn_r50_fpn_1x_coco.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.SEAdaptor', ratio=16, start='identity')))
