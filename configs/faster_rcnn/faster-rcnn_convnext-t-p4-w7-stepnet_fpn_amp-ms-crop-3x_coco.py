# Faster R-CNN with mmpretrain's ConvNeXt-T backbone and a StepNet step size on every block,
# written onto the upstream ConvNeXt by mmstiff.WithSteps (docs/methods.md §15).
#
# Inherits mmdet's ConvNeXt-T detection recipe (mask-rcnn_convnext-t-p4-w7_fpn_amp-ms-crop-3x:
# the ImageNet-pretrained ConvNeXt-T, drop path 0.4, AdamW with layer-wise decay, AMP, the
# multi-scale crop augmentation, 36 epochs) and drops its mask branch: the detector is the
# two-stage box detector (FasterRCNN) evaluated on boxes. start='identity' (Δ = 2 sigmoid(z),
# starting at Δ ≡ 1) makes the backbone compute the pretrained ConvNeXt-T exactly at the first
# iteration; the adaptors' keys are the only ones the checkpoint lacks. ConvNeXt normalises with
# LayerNorm, so the adaptors keep their own batch norm, synchronised over the GPUs (2 images
# each) as in the StepNet ResNet-50 detector.
_base_ = 'mmdet::convnext/mask-rcnn_convnext-t-p4-w7_fpn_amp-ms-crop-3x_coco.py'

model = dict(
    type='FasterRCNN',
    backbone=dict(_delete_=True, type='mmstiff.WithSteps', backbone={{_base_.model.backbone}},
                  adaptor=dict(type='mmstiff.StepNetAdaptor', start='identity'),
                  adaptor_norm_cfg=dict(type='SyncBN', requires_grad=True)),
    roi_head=dict(mask_roi_extractor=None, mask_head=None))

# mmstiff's COCO dataset checks the annotations and images before training
train_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset'))
val_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset'))
test_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset'))
val_evaluator = dict(metric='bbox')
test_evaluator = dict(metric='bbox')
