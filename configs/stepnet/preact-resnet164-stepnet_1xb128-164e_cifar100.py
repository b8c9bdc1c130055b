# Pre-activation ResNet-164 with the StepNet step-size adaptor in every block on CIFAR-100
# (docs/methods.md §1); the paper reports its largest gain here.
_base_ = ['./preact-resnet164_1xb128-164e_cifar100.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.StepNetAdaptor')))
