# StepNet-ResNet-50 on ImageNet: the plain recipe with the StepNet step size
# Δ = sigmoid(IE(BN(GroupConv(interleave(GAP(x_t), GAP(x_t + f)))))) in every block
# (docs/methods.md §1; StepNet appendix F, Table 2).
_base_ = ['./resnet50_8xb32-120e_in1k.py']

model = dict(
    backbone=dict(
        adaptor=dict(type='mmstiff.StepNetAdaptor', groups=None, norm='bn_ie'),
        # LTH4SA (docs/methods.md §4): e.g. adaptor_stages=(False, False, True, True)
        adaptor_stages=None,
        adaptor_blocks=None))
