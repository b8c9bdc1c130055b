# The non-stiff version of flow-resnet8-stepnet_relaxation-stiff.py: the same system, data
# seeds and network with the rates spread over [1, 2] (docs/methods.md §14).
_base_ = ['./flow-resnet8-stepnet_relaxation-stiff.py']

train_dataloader = dict(dataset=dict(spread=2.0))
test_dataloader = dict(dataset=dict(spread=2.0))
