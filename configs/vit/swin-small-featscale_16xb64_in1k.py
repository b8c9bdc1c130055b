# Swin-S with FeatScale in every block (docs/methods.md §7): DC = mean over the whole feature map of
# the merged window-attention output, as the public Swin code. Swin recipe of mmpretrain
# (300 epochs, AdamW, batch 1024, drop path 0.3; 1-D parameters, s and t included, get no
# weight decay); paper, Table 1: 83.5 top-1.
_base_ = ['mmpretrain::swin_transformer/swin-small_16xb64_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(backbone=dict(type='mmstiff.StepSwin', feat_scale_layers='all'))

train_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
test_dataloader = val_dataloader
