# ViT with StepNet on CIFAR-100, trained from scratch (StepNet paper, Appendix G, Table 3:
# 68.88 vs 66.32 top-1): the step size of every MSA branch comes from a StepNet adaptor,
# Δ = sigmoid(IE(BN(GroupConv(interleave(mean_tokens(x_t), mean_tokens(x_t + f)))))), so
# x' = x + Δ ⊙ MSA(LN x) (docs/methods.md §0, §1). The MLP branches keep Δ ≡ 1 (set mlp_adaptor to
# give them one as well).
_base_ = ['./vit-lite-7-p4_1xb128-200e_cifar100.py']

model = dict(backbone=dict(msa_adaptor=dict(type='mmstiff.StepNetAdaptor')))
