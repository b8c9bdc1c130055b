# Pre-activation ResNet-164 with an SE step-size adaptor in every block on CIFAR-100
# (docs/methods.md §3).
_base_ = ['./preact-resnet164_1xb128-164e_cifar100.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.SEAdaptor', ratio=16, divisor=1)))
