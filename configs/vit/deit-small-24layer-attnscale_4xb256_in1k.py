# 24-layer DeiT-S (drop path 0.2) with AttnScale in every layer (docs/methods.md §6);
# paper, Table 1: 81.1 top-1.
_base_ = ['./deit-small-24layer_4xb256_in1k.py']

model = dict(backbone=dict(attn_scale_layers='all'))

optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'.omega': dict(decay_mult=0.0)}))
