"""A tiny CIFAR config whose DivergenceHook option is out of range: the user's mistake raised
while the Runner builds its hooks, for the tests of the one-line error ending (tests/
reliability/, tests/tools/). Importable from any test folder (it sits beside the root
conftest.py)."""

HOOK_OPTION = '''
_base_ = [{base!r}]
model = dict(backbone=dict(base_channels=8, stem_channels=8), head=dict(in_channels=64))
train_dataloader = dict(dataset=dict(data_root={root!r}))
val_dataloader = train_dataloader
test_dataloader = train_dataloader
custom_hooks = [dict(type='mmstiff.DivergenceHook', max_skips=-3)]
'''
