"""Training with MMEngine's ``compile=True`` (``torch.compile`` of ``train_step``), with and
without the diagnostics hooks.

The hooks register module hooks at their recorded iterations only, and while they record the
compiler's stance is ``force_eager`` (:mod:`mmstiff.engine.hooks.eager_recording`): a recorded
iteration runs as an eager one, so its values are those of an eager run, and the compiler never
sees the hooks: no graph cut at the hooked blocks is ever compiled, and the other iterations
run the graph of a run without the hooks.
"""
import math

import pytest
import torch
import torch._dynamo
from diagnostics_toy import ToyClassifier, read_json_lines, toy_loader
from mmengine.runner import Runner


def _stepnet_resnet():
    from mmstiff.models.backbones import StepResNet_CIFAR
    return StepResNet_CIFAR(depth=18, stem_channels=4, base_channels=4, zero_init_residual=False,
                            adaptor=dict(type='mmstiff.StepNetAdaptor'))


def _step_vit():
    from mmstiff.models.backbones import StepViT
    return StepViT(
        arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=16,
        patch_size=4, out_type='featmap', attn_scale_layers='all', feat_scale_layers='all')


BACKBONES = {'stepnet-resnet': _stepnet_resnet, 'vit-attnscale-featscale': _step_vit}
HOOKS = [
    dict(type='mmstiff.StiffnessHook', interval=1),
    dict(type='mmstiff.FrequencyHook', interval=2, num_samples=2)
]


def _train(work_dir, backbone, hooks, compile, max_iters=2):
    torch._dynamo.reset()  # no graph of an earlier test's model
    torch.manual_seed(0)
    runner = Runner(
        model=ToyClassifier(BACKBONES[backbone]()),
        work_dir=str(work_dir),
        train_dataloader=toy_loader(batch_size=4),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        # lr 0: both runs see the same weights at every iteration
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)),
        custom_hooks=hooks,
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=1)),
        randomness=dict(seed=0),
        default_scope='mmengine',
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
        assert not any(
            k.startswith(('stiffness/', 'freq/')) for row in compiled.values() for k in row)
        return
    eager = _train(tmp_path / 'eager', backbone, hooks, compile=False)
    # every recorded iteration is written, with the values of the eager run
    for step in (1, 2):
        keys = [k for k in eager[step] if k.startswith(('stiffness/', 'freq/'))]
        assert any(k.startswith('freq/') for k in keys) == (step == 2)
        assert keys and set(keys) <= set(compiled[step])
        for key in keys:
            assert compiled[step][key] == pytest.approx(eager[step][key], rel=1e-3, abs=1e-5), key


def _graphs(work_dir, hooks):
    """Graphs compiled in a run of 5 iterations (with the compiler's ``eager`` backend, which
    traces but generates no code), the run's rows, and the compiler's stance after it."""
    from torch._dynamo import eval_frame
    from torch._dynamo.utils import counters
    counters.clear()
    rows = _train(work_dir, 'stepnet-resnet', hooks, compile=dict(backend='eager'), max_iters=5)
    return counters['stats']['unique_graphs'], rows, eval_frame._stance.stance


# both record iterations 2 and 4; 1, 3 and 5 run compiled
EVERY_OTHER = [
    dict(type='mmstiff.StiffnessHook', interval=2),
    dict(type='mmstiff.FrequencyHook', interval=2, num_samples=2)
]


@pytest.mark.slow
def test_recorded_iterations_add_no_compiled_graph(tmp_path):
    """The compiler makes no graph for the recorded iterations (they run eagerly): as many
    graphs as without the hooks, none cut at a hooked block, and the other iterations run
    those graphs. The stance is the default again after training."""
    plain, _, stance_after_plain = _graphs(tmp_path / 'plain', [])
    hooked, rows, stance_after_hooks = _graphs(tmp_path / 'hooks', EVERY_OTHER)
    assert plain > 0 and hooked == plain
    assert stance_after_plain == stance_after_hooks == 'default'
    recorded = sorted(step for step, row in rows.items() if any(
        k.startswith('stiffness/nsi/') for k in row))
    assert recorded == [2, 4]


@pytest.mark.slow
def test_without_the_eager_stance_the_hooks_cut_the_graph(tmp_path, monkeypatch):
    """The fallback of a torch without ``set_stance`` (guards on module hooks): the hooks still
    run in the compiled model and log their values, but the compiler makes graphs cut at the
    hooked blocks, which the check above would see."""
    from mmstiff.engine.hooks import eager_recording
    plain, _, _ = _graphs(tmp_path / 'plain', [])
    monkeypatch.setattr(eager_recording, 'stance_supported', lambda: False)
    # (the compiler's own patch: monkeypatch would delete the setting when it restores it)
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        hooked, rows, _ = _graphs(tmp_path / 'hooks', EVERY_OTHER)
        assert torch._dynamo.config.skip_nnmodule_hook_guards is False  # guards turned on
    assert hooked > plain
    assert all(any(k.startswith('stiffness/nsi/') for k in rows[step]) for step in (2, 4))
