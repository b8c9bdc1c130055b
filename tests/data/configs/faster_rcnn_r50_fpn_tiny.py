# mmdet's Faster R-CNN R50-FPN 1x recipe, cut to two iterations at a small image scale on a
# tiny generated COCO set. No pretrained backbone (nothing can be downloaded in tests).
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'
data_root = 'data/coco/'
scale = (160, 128)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=2, val_interval=1000)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1), checkpoint=dict(type='CheckpointHook',
                                                                by_epoch=False, interval=2))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
# Two iterations leave the class scores near 1/81: keep every detection so that COCO mAP is
# computed over real predictions, and keep fewer proposals so CPU inference stays quick.
model = dict(
    backbone=dict(init_cfg=None), train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100)),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=100), rcnn=dict(score_thr=0.0)))
