# Faster R-CNN R50-FPN 1x on COCO with the StepNet step size in every residual block of the
# backbone (docs/methods.md §1; StepNet paper: +2.9 mAP over the plain R50 on this recipe).
#
# Starting point: torchvision's plain ResNet-50 (as the plain config), so every adaptor is
# missing from the checkpoint. start='identity' (Δ = 2 sigmoid(z), starting at Δ ≡ 1) makes the
# adapted backbone compute exactly the pretrained plain network at the first iteration; the
# paper's start (Δ ≡ sigmoid(-1) ≈ 0.27) would scale every residual branch by 0.27 and lose the
# pretrained features before fine-tuning (docs/methods.md §3, "Starting from a plain
# checkpoint"). To start from a StepNet ResNet-50 trained on ImageNet, as the paper does, use
# faster-rcnn_r50-stepnet-in1k-pre_fpn_1x_coco.py beside this file.
#
# mmdet's norm_eval=True freezes the backbone's BN statistics. The adaptors' BN statistics are
# not in the checkpoint, so with adaptor_norm='auto' (the default) they are learned during
# fine-tuning instead of staying at mean 0 / variance 1 (the log says how many at the start of
# training); frozen_stages=1 freezes the first stage's adaptors with it.
# With 2 images per GPU a per-GPU batch statistic of the pooled (B, C, 1, 1) values is too
# noisy, so the adaptors normalise with SyncBN: under DDP their statistics are computed over
# every GPU's batch; on one process SyncBN is plain BN (MMEngine turns it into one).
_base_ = ['./faster-rcnn_r50_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        adaptor=dict(type='mmstiff.StepNetAdaptor', groups=None, norm='bn_ie', start='identity'),
        adaptor_norm='auto',
        adaptor_norm_cfg=dict(type='SyncBN', requires_grad=True),
        # LTH4SA (docs/methods.md §4): e.g. adaptor_stages=(False, True, True, True)
        adaptor_stages=None,
        adaptor_blocks=None))
