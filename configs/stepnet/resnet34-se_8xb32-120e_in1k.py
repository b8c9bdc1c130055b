# SE-ResNet-34 on ImageNet: the plain recipe with a Squeeze-and-Excitation step size
# Δ = sigmoid(W2 relu(W1 GAP(f))) in every residual block (docs/methods.md §3).
_base_ = ['./resnet34_8xb32-120e_in1k.py']

model = dict(
    backbone=dict(
        adaptor=dict(type='mmstiff.SEAdaptor', ratio=16),
        # LTH4SA (docs/methods.md §4): e.g. adaptor_stages=(False, False, True, True)
        adaptor_stages=None,
        adaptor_blocks=None))
