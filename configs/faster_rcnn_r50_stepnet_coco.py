# Faster R-CNN R50-FPN 1x on COCO with the StepNet step size in every residual block of the
# backbone: the documented entry point, kept under its first name. The config itself, with the
# plain and SE baselines beside it, is in configs/faster_rcnn/.
_base_ = './faster_rcnn/faster-rcnn_r50-stepnet_fpn_1x_coco.py'
