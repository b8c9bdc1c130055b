# ViT with StepNet on STL-10, trained from scratch (StepNet paper, Appendix G, Table 3:
# 65.58 vs 62.58 top-1): a StepNet adaptor gives the step size of every MSA branch
# (docs/methods.md §0, §1); the MLP branches keep Δ ≡ 1.
_base_ = ['./vit-lite-7-p8_1xb128-200e_stl10.py']

model = dict(backbone=dict(msa_adaptor=dict(type='mmstiff.StepNetAdaptor')))
