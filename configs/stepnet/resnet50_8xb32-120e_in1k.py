# Plain ResNet-50 on ImageNet: the ResNet-34 recipe beside this file (StepNet appendix, Table 2:
# batch 256 = 8 GPUs x 32, SGD(0.9) lr 0.1, wd 1e-4, 120 epochs, lr x0.1 at epochs 30/60/90)
# on the bottleneck network. mmpretrain's ResNet-50 config differs from its ResNet-34 config in
# exactly these two numbers. The SE and StepNet configs beside this one change only the
# backbone's step-size adaptor.
_base_ = ['./resnet34_8xb32-120e_in1k.py']

# No adaptor: every block is the plain step x_t + f, exactly mmpretrain's ResNet.
model = dict(backbone=dict(depth=50), head=dict(in_channels=2048))
