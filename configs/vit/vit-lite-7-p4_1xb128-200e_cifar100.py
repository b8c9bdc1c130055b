# A ViT trained from scratch on CIFAR-100, the plain baseline of the StepNet paper's Appendix G,
# Table 3 (66.32 top-1). The appendix does not give the architecture or the schedule; this is
# ViT-Lite-7/4 (Hassani et al., 2021), a standard from-scratch ViT for 32x32 images: patch 4
# (64 tokens + a class token), 7 layers, 256 channels, 4 heads, MLP 512; AdamW (lr 1e-3 for
# batch 128, weight decay 0.05), 200 epochs, 10 warm-up epochs then cosine, label smoothing 0.1,
# random crop (padding 4) and horizontal flip.
_base_ = ['./vit-lite-7-p4_1xb128-200e_cifar10.py']

# the folder that contains cifar-100-python/
data_root = 'data/cifar100'
dataset_type = 'CIFAR100'  # the name mmpretrain's CIFAR-100 configs carry

# mmpretrain's CIFAR-100 pixel statistics (_base_/datasets/cifar100_bs16.py)
data_preprocessor = dict(num_classes=100, mean=[129.304, 124.070, 112.434],
                         std=[68.170, 65.392, 70.418])
model = dict(head=dict(num_classes=100))

train_dataloader = dict(dataset=dict(type='mmstiff.CIFAR100', data_root=data_root))
val_dataloader = dict(dataset=dict(type='mmstiff.CIFAR100', data_root=data_root))
test_dataloader = val_dataloader
