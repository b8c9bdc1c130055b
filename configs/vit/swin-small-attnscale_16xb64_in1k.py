# Swin-S with AttnScale in every block (docs/methods.md §6): window attention with relative position
# bias and shift masks, Â = A_LP + (1 + ω) A_HP with A_LP the mean over the window's tokens.
# Swin recipe of mmpretrain (300 epochs, AdamW, batch 1024, drop path 0.3; 1-D parameters,
# ω included, get no weight decay); paper, Table 1: 83.4 top-1.
_base_ = ['mmpretrain::swin_transformer/swin-small_16xb64_in1k.py']

# the folder with train/ and val/ (and meta/ when annotation lists are used)
data_root = 'data/imagenet'

model = dict(backbone=dict(type='mmstiff.StepSwin', attn_scale_layers='all'))

train_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
val_dataloader = dict(dataset=dict(type='ImageNet', data_root=data_root))
test_dataloader = val_dataloader
