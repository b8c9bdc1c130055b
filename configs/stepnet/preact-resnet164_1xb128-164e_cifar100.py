# Pre-activation ResNet-164 (bottleneck) on CIFAR-100: the CIFAR-10 recipe beside this file
# (StepNet paper, Appendix F, Table 2: batch 128, 164 epochs, SGD 0.9, lr 0.1 (x0.1 at 81, 122),
# wd 1e-4), with CIFAR-100's data, 100 classes and top-5 accuracy as well.
_base_ = ['./preact-resnet164_1xb128-164e_cifar10.py']

# the folder that contains cifar-100-python/
data_root = 'data/cifar100'
dataset_type = 'CIFAR100'  # the name mmpretrain's CIFAR-100 configs carry

# mmpretrain's CIFAR-100 pixel statistics (_base_/datasets/cifar100_bs16.py)
data_preprocessor = dict(num_classes=100, mean=[129.304, 124.070, 112.434],
                         std=[68.170, 65.392, 70.418])
model = dict(head=dict(num_classes=100, topk=(1, 5)))

train_dataloader = dict(dataset=dict(type='mmstiff.CIFAR100', data_root=data_root))
val_dataloader = dict(dataset=dict(type='mmstiff.CIFAR100', data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator
