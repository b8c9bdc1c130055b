# mmdet's COCO detection data settings with mmstiff's checked dataset: the same files and
# pipelines, and before training a report of the boxes and images dropped, with errors naming
# the annotation file for an empty file, a filter that drops every image, and missing or empty
# image files (docs/reliability.md, "COCO annotations"). Inherit it in place of
# 'mmdet::_base_/datasets/coco_detection.py'.
_base_ = 'mmdet::_base_/datasets/coco_detection.py'

train_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset'))
val_dataloader = dict(dataset=dict(type='mmstiff.CocoDataset'))
test_dataloader = val_dataloader
