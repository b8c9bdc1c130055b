# CaiT-S24 with AttnScale in every patch (self-attention) layer (anti-oversmoothing §3.1,
# docs/methods.md §6): Â = A_LP + (1 + ω) (A - A_LP) per layer and head, ω initialised to 0,
# applied after the post-softmax head mixing of talking heads; the class-attention layers are
# left as they are (paper §5.1). CaiT recipe of the baseline; paper, Table 1: 83.2 top-1.
_base_ = ['./cait-s24_16xb64-400e_in1k.py']

model = dict(backbone=dict(attn_scale_layers='all'))

# 1-D parameters, ω included, get no weight decay (the base's flat_decay_mult=0); stated here
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'.omega': dict(decay_mult=0.0)}))
