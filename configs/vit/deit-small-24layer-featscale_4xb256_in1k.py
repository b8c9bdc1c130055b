# 24-layer DeiT-S (drop path 0.2) with FeatScale in every layer (docs/methods.md §7);
# paper, Table 1: 81.3 top-1.
_base_ = ['./deit-small-24layer_4xb256_in1k.py']

model = dict(backbone=dict(feat_scale_layers='all'))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '.dc_scale': dict(decay_mult=0.0),
        '.hc_scale': dict(decay_mult=0.0)
    }))
