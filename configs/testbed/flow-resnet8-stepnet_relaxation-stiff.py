# The stiff-dynamics testbed (docs/methods.md §14): an 8-step residual network with StepNet
# steps learns the flow of a nonlinear relaxation system of 8 coordinates whose rates spread
# over [1, 100] (stiff), trained on 1024 exact trajectories, tested on 512 others: 160
# iterations, about a minute on one CPU core. Set `model.adaptor` to None (plain steps, Δ ≡ 1) or
# dict(type='mmstiff.SEAdaptor') for SE; the non-stiff version of the same task is
# flow-resnet8-stepnet_relaxation-nonstiff.py.
_base_ = ['mmpretrain::_base_/default_runtime.py']

system = dict(dim=8, spread=100.0, coupling=1.0, horizon=1.0, num_steps=8, system_seed=0)
model = dict(type='mmstiff.FlowResNet', dim=8, depth=8, hidden=32,
             adaptor=dict(type='mmstiff.StepNetAdaptor'), supervise='trajectory')

train_dataloader = dict(
    batch_size=128, num_workers=0, persistent_workers=False,
    collate_fn=dict(type='default_collate'), sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='mmstiff.StiffFlowDataset', num_samples=1024, split='train', seed=0,
                 **system))
test_dataloader = dict(
    batch_size=512, num_workers=0, persistent_workers=False,
    collate_fn=dict(type='default_collate'), sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='mmstiff.StiffFlowDataset', num_samples=512, split='test', seed=0, **system))
test_evaluator = dict(type='mmstiff.FlowMetric')
val_dataloader = val_cfg = val_evaluator = None

optim_wrapper = dict(optimizer=dict(type='Adam', lr=1e-2))
param_scheduler = [
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=20, convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=20)
test_cfg = dict()

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=8), checkpoint=dict(type='CheckpointHook', interval=5,
                                                                max_keep_ckpts=1))
