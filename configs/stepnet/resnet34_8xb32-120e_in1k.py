# Plain ResNet-34 on ImageNet, the StepNet paper's baseline recipe (StepNet appendix, Table 2):
# batch 256 = 8 GPUs x 32, SGD(0.9) lr 0.1, wd 1e-4, 120 epochs, lr x0.1 at epochs 30/60/90.
# The SE and StepNet configs beside this one change only the backbone's step-size adaptor.
# StepNet paper: Huang et al., "Understanding Self-attention Mechanism via Dynamical System
# Perspective", ICCV 2023, arXiv:2308.09939.
_base_ = ['mmpretrain::resnet/resnet34_8xb32_in1k.py']

# ImageNet in mmpretrain's layout: data_root/{train,val}/ and data_root/meta/{train,val}.txt
data_root = 'data/imagenet/'

# No adaptor: every block is the plain step x_t + f, exactly mmpretrain's ResNet.
model = dict(backbone=dict(type='mmstiff.StepResNet', depth=34))

train_dataloader = dict(
    batch_size=32, dataset=dict(type='ImageNet', data_root=data_root, ann_file='meta/train.txt',
                                data_prefix='train'))
val_dataloader = dict(
    batch_size=32, dataset=dict(type='ImageNet', data_root=data_root, ann_file='meta/val.txt',
                                data_prefix='val'))
test_dataloader = val_dataloader

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4))
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[30, 60, 90], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=120, val_interval=1)

# base_batch_size = (8 GPUs) x (32 samples per GPU)
auto_scale_lr = dict(base_batch_size=256)
