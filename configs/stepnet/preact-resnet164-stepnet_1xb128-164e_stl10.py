# Pre-activation ResNet-164 with the StepNet step-size adaptor in every block on STL-10
# (docs/methods.md §1, §11).
_base_ = ['./preact-resnet164_1xb128-164e_stl10.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.StepNetAdaptor')))
