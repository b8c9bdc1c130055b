# PoolFormer-S12 of the matched-budget zoo with a StepNet step size (Δ from x_t and x_t + f) on
# both steps of every block, token mixer and MLP (Δ times each layer scale): mmstiff.WithSteps
# writes it onto mmpretrain's own backbone, whose config and weights it keeps (docs/methods.md
# §15). The adaptor starts as the paper initialises it.
_base_ = './poolformer-s12_1xb64-1e_fashion-mnist-6400.py'

model = dict(
    backbone=dict(_delete_=True, type='mmstiff.WithSteps', backbone={{_base_.model.backbone}},
                  adaptor=dict(type='mmstiff.StepNetAdaptor'), probe_input=(1, 3, 28, 28)))
