# Pre-activation ResNet-164 (bottleneck, He et al. 2016) as an mmpretrain classifier for
# 10 classes: the network of the StepNet paper's CIFAR and STL-10 experiments (Appendix F).
model = dict(
    type='ImageClassifier', backbone=dict(type='mmstiff.PreActStepResNet',
                                          depth=164), neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=256,
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0), topk=(1, )))
