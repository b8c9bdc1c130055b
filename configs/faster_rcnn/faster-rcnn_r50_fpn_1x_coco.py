# Faster R-CNN R50-FPN 1x on COCO, the StepNet paper's detection baseline (mmdet's recipe as is),
# built on mmstiff.DetStepResNet without adaptors, which is exactly mmdet's ResNet.
# The r50-se and r50-stepnet configs beside this one change only the backbone's step-size adaptor.
# StepNet paper: Huang et al., "Understanding Self-attention Mechanism via Dynamical System
# Perspective", ICCV 2023, arXiv:2308.09939.
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'

# COCO 2017 in mmdet's layout: data_root/annotations/instances_{train,val}2017.json and
# data_root/{train,val}2017/ images.
data_root = 'data/coco/'

# ImageNet weights for the backbone. 'torchvision://resnet50' is fetched and cached by
# torchvision on first use (https://download.pytorch.org/models/resnet50-0676ba61.pth).
# Offline, convert a downloaded torchvision file with
#   python tools/model_converters/torchvision_to_mmpretrain_resnet.py --backbone-only SRC DST
# and put DST here.
backbone_checkpoint = 'torchvision://resnet50'

model = dict(
    backbone=dict(
        type='mmstiff.DetStepResNet',
        depth=50,
        # no adaptor: every block is the plain step x_t + f, exactly mmdet's ResNet
        init_cfg=dict(type='Pretrained', checkpoint=backbone_checkpoint)))

# mmdet's CocoDataset, but it reports the boxes it drops and fails when no box is left
train_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset', data_root=data_root))
val_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset', data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
