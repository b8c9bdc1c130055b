# Faster R-CNN R50-FPN 1x on COCO with the StepNet step size in every residual block, started
# as the StepNet paper does: from a StepNet ResNet-50 trained on ImageNet, adaptors included,
# with the paper's start (docs/methods.md §1). Train the backbone first with
#   python tools/train.py configs/stepnet/resnet50-stepnet_8xb32-120e_in1k.py
# (or tools/dist_train.sh); its last checkpoint is the path below. Its keys carry the
# classifier's 'backbone.' prefix, which init_cfg strips.
#
# Every adaptor, BN statistics included, comes from that checkpoint: under mmdet's
# norm_eval=True, adaptor_norm='auto' keeps the adaptors' statistics frozen with the backbone's.
# Starting from torchvision's plain ResNet-50 instead: faster-rcnn_r50-stepnet_fpn_1x_coco.py
# (identity start).
_base_ = ['./faster-rcnn_r50-stepnet_fpn_1x_coco.py']

stepnet_in1k_checkpoint = 'work_dirs/resnet50-stepnet_8xb32-120e_in1k/epoch_120.pth'

model = dict(
    backbone=dict(
        adaptor=dict(start='paper'), init_cfg=dict(
            type='Pretrained', checkpoint=stepnet_in1k_checkpoint, prefix='backbone.')))
