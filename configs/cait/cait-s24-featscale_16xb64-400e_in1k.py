# CaiT-S24 with FeatScale in every patch (self-attention) layer (anti-oversmoothing §3.2,
# docs/methods.md §7): X <- X_DC (1 + s) + X_HC (1 + t) on the attention output, before
# LayerScale and drop path, s and t initialised to 0; the class-attention layers are left as
# they are (paper §5.1). CaiT recipe of the baseline; paper, Table 1: 83.2 top-1.
_base_ = ['./cait-s24_16xb64-400e_in1k.py']

model = dict(backbone=dict(feat_scale_layers='all'))

# 1-D parameters, s and t included, get no weight decay (the base's flat_decay_mult=0)
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '.dc_scale': dict(decay_mult=0.0),
        '.hc_scale': dict(decay_mult=0.0)
    }))
