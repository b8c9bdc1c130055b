# Pre-activation ResNet-164 with the StepNet step-size adaptor in every block (docs/methods.md §1):
# Δ = sigmoid(IE(BN(GroupConv(interleave(GAP(x_t), GAP(x_t + f)))))), Δ = sigmoid(-1) at init.
_base_ = ['./preact-resnet164_1xb128-164e_cifar10.py']

model = dict(backbone=dict(adaptor=dict(type='mmstiff.StepNetAdaptor')))
