"""Training with MMEngine's ``compile=True`` (``torch.compile`` of ``train_step``), with and
without the diagnostics hooks.

The hooks register module hooks at their recorded iterations only. In a compiled run they turn
on torch's guards on module hooks (otherwise hooks registered after the first compiled
iteration never run: the FrequencyHook here first records at iteration 2), and each hook is
opaque to the compiler (``torch.compiler.disable``), so the compiled model calls it at every
recorded iteration and the values are those of an eager run (the recorder's side effects are
not traced once into a graph). Where the hooks are registered, the compiled forward pass is cut
at each hooked block (a graph break per hook); the other iterations run the whole graph.
"""
import math

import pytest
import torch
import torch._dynamo
from mmengine.runner import Runner

from diagnostics_toy import ToyClassifier, read_json_lines, toy_loader


def _stepnet_resnet():
    from mmstiff.models.backbones import StepResNet_CIFAR
    return StepResNet_CIFAR(depth=18, stem_channels=4, base_channels=4, zero_init_residual=False,
                            adaptor=dict(type='mmstiff.StepNetAdaptor'))


def _step_vit():
    from mmstiff.models.backbones import StepViT
    return StepViT(arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32),
                   img_size=16, patch_size=4, out_type='featmap', attn_scale_layers='all',
                   feat_scale_layers='all')


BACKBONES = {'stepnet-resnet': _stepnet_resnet, 'vit-attnscale-featscale': _step_vit}
HOOKS = [dict(type='mmstiff.StiffnessHook', interval=1),
         dict(type='mmstiff.FrequencyHook', interval=2, num_samples=2)]


def _train(work_dir, backbone, hooks, compile):
    torch._dynamo.reset()  # no graph of an earlier test's model
    torch.manual_seed(0)
    runner = Runner(
        model=ToyClassifier(BACKBONES[backbone]()), work_dir=str(work_dir),
        train_dataloader=toy_loader(batch_size=4),
        train_cfg=dict(by_epoch=False, max_iters=2),
        # lr 0: both runs see the same weights at every iteration
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)),
        custom_hooks=hooks, default_hooks=dict(checkpoint=None,
                                               logger=dict(type='LoggerHook', interval=1)),
        randomness=dict(seed=0), default_scope='mmengine',
        experiment_name=f'{backbone}-{bool(hooks)}-{compile}',
        cfg=dict(compile=compile))
    runner.train()
    rows = {}
    for line in read_json_lines(f'{runner.log_dir}/vis_data/scalars.json'):
        rows.setdefault(line['step'], {}).update(line)
    return rows


@pytest.mark.slow
@pytest.mark.parametrize('with_hooks', [False, True], ids=['plain', 'hooks'])
@pytest.mark.parametrize('backbone', list(BACKBONES))
def test_compiled_training_with_and_without_the_hooks(backbone, with_hooks, tmp_path):
    hooks = HOOKS if with_hooks else []
    compiled = _train(tmp_path / 'compiled', backbone, hooks, compile=True)
    assert sorted(compiled) == [1, 2] and all(math.isfinite(compiled[s]['loss']) for s in (1, 2))
    if not with_hooks:
        assert not any(k.startswith(('stiffness/', 'freq/')) for row in compiled.values()
                       for k in row)
        return
    eager = _train(tmp_path / 'eager', backbone, hooks, compile=False)
    # every recorded iteration is written, with the values of the eager run
    for step in (1, 2):
        keys = [k for k in eager[step] if k.startswith(('stiffness/', 'freq/'))]
        assert any(k.startswith('freq/') for k in keys) == (step == 2)
        assert keys and set(keys) <= set(compiled[step])
        for key in keys:
            assert compiled[step][key] == pytest.approx(eager[step][key], rel=1e-3, abs=1e-5), key
