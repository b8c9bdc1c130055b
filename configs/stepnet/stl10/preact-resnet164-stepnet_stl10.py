# Pre-activation ResNet-164 with the StepNet step-size adaptor in every block on STL-10
# (METHODS.md §1, §11).
_base_ = ['./preact-resnet164_stl10.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.StepNetAdaptor')))
