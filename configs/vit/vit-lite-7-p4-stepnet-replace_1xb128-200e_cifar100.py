# ViT with StepNet on CIFAR-100, StepNet paper, Appendix G, Table 3 (68.88 vs 66.32 top-1), read
# literally: "directly replace the attention modules in ViT with StepNet" (reading B,
# docs/methods.md §13). Every MSA branch loses its attention matrix and keeps the value and
# output projections, and a StepNet adaptor gives its step size: x' = x + Δ ⊙ proj(V(LN x)),
# Δ from (x, x + proj(V(LN x))). The config it inherits is reading A (the MSA kept, its output
# scaled by Δ); which reading Table 3 measured the appendix does not say.
_base_ = ['./vit-lite-7-p4-stepnet_1xb128-200e_cifar100.py']

model = dict(backbone=dict(replace_attention_layers='all'))
