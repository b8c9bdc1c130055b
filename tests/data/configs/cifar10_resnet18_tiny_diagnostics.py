# The tiny CIFAR-10 ResNet-18 run with both diagnostics hooks recording every iteration.
_base_ = './cifar10_resnet18_tiny.py'
custom_hooks = [
    dict(type='mmstiff.StiffnessHook', interval=1),
    dict(type='mmstiff.FrequencyHook', interval=1),
]
