# ViT with StepNet on CIFAR-10, trained from scratch (StepNet paper, Appendix G, Table 3:
# 90.32 vs 89.08 top-1): the step size of every MSA branch comes from a StepNet adaptor,
# Δ = sigmoid(IE(BN(GroupConv(interleave(mean_tokens(x_t), mean_tokens(x_t + f)))))), so
# x' = x + Δ ⊙ MSA(LN x) (docs/methods.md §0, §1). The MLP branches keep Δ ≡ 1 (set mlp_adaptor to
# give them one as well).
_base_ = ['./vit-lite-7-p4_1xb128-200e_cifar10.py']

model = dict(backbone=dict(msa_adaptor=dict(type='mmstiff.StepNetAdaptor')))
