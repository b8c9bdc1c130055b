"""The adjoint trajectory: ‖∂L/∂x_t‖ at every recorded step's two ends, from the training
backward pass, against ``torch.autograd.grad`` of the same loss with respect to the states.

The states the reference differentiates are captured by the test's own forward hooks on a copy
of the model (same weights, same batch), never by the recorder.
"""
import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from diagnostics_toy import tiny_backbone

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.engine.hooks import StiffnessHook
from mmstiff.engine.hooks.stiffness_hook import loss_scale_of

BATCH = 4


class Head(nn.Module):
    """backbone -> pooled features (maps averaged, tokens as they are) -> linear."""

    def __init__(self, backbone, channels, classes=3):
        super().__init__()
        self.backbone = backbone
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        out = self.backbone(x)[-1]
        return self.fc(out.mean((2, 3)) if out.dim() == 4 else out)


def _resnet():
    torch.manual_seed(0)
    backbone = tiny_backbone(depth=18, channels=4)
    return Head(backbone, backbone.feat_dim), torch.randn(BATCH, 3, 16, 16)


def _convnext():
    """mmpretrain's ConvNeXt blocks: a step scaled by its layer scale γ (read as Δ)."""
    from mmpretrain.models.backbones import ConvNeXt
    torch.manual_seed(0)
    backbone = ConvNeXt(
        arch=dict(depths=[2, 2], channels=[8, 16]), stem_patch_size=2, out_indices=(1, ))
    for block in backbone.modules():
        if hasattr(block, 'gamma') and torch.is_tensor(block.gamma):
            with torch.no_grad():  # a layer scale of the order of 1, not 1e-6: f matters
                block.gamma.uniform_(0.5, 1.5)
    return Head(backbone, 16), torch.randn(BATCH, 3, 16, 16)


def _vit():
    """mmpretrain's ViT: each layer is two steps, msa then mlp."""
    from mmpretrain.models.backbones import VisionTransformer
    torch.manual_seed(0)
    backbone = VisionTransformer(
        arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=16,
        patch_size=4, out_type='cls_token', drop_rate=0.0)
    return Head(backbone, 16), torch.randn(BATCH, 3, 16, 16)


def _capture(model, kind):
    """``{record name: (start module, start kind, end module, end kind)}`` read by the test's
    own hooks: 'in' / 'out' of a module, or 'pre' (the first input of a submodule)."""
    ends = {}
    backbone = model.backbone
    if kind == 'resnet':
        for i in range(1, 5):
            for j, block in enumerate(getattr(backbone, f'layer{i}')):
                # behind a projection shortcut too: the block's input, of another shape
                ends[f'layer{i}.{j}'] = (block, 'in', block, 'out')
    elif kind == 'convnext':
        for i, stage in enumerate(backbone.stages):
            for j, block in enumerate(stage):
                ends[f'stages.{i}.{j}'] = (block, 'in', block, 'out')
    else:
        for i, layer in enumerate(backbone.layers):
            ends[f'layers.{i}.msa'] = (layer, 'in', layer.ln2, 'pre')
            ends[f'layers.{i}.mlp'] = (layer.ln2, 'pre', layer, 'out')
    return ends


def _reference_adjoints(model, images, labels, kind, scale=1.0):
    """``{record: (‖∂L/∂x_t‖, ‖∂L/∂x_{t+1}‖)}`` per sample by ``torch.autograd.grad``."""
    ends = _capture(model, kind)
    live = {}
    handles = []

    def store(module, where, value):
        live.setdefault((id(module), where), value)  # (a hook returning a value replaces it)

    def keep(module, where):
        if where == 'pre':
            return module.register_forward_pre_hook(lambda m, args: store(m, 'pre', args[0]))
        if where == 'in':
            return module.register_forward_hook(lambda m, args, out: store(m, 'in', args[0]))
        return module.register_forward_hook(lambda m, args, out: store(m, 'out', out))

    for start_module, start, end_module, end in ends.values():
        handles.append(keep(start_module, start))
        handles.append(keep(end_module, end))
    loss = F.cross_entropy(model(images), labels) * scale
    for handle in handles:
        handle.remove()
    keys = list(live)
    grads = dict(zip(keys, torch.autograd.grad(loss, [live[k] for k in keys])))

    def norm(module, where):
        g = grads[(id(module), where)] / scale
        return g.flatten(1).double().norm(dim=1)

    return {name: (norm(sm, s), norm(em, e)) for name, (sm, s, em, e) in ends.items()}


MODELS = {'resnet': _resnet, 'convnext': _convnext, 'vit': _vit}


@pytest.mark.parametrize('kind', list(MODELS))
def test_recorded_adjoints_equal_autograd_grad_of_the_states(kind):
    model, images = MODELS[kind]()
    model.train()
    labels = torch.tensor([0, 1, 2, 1])
    reference = _reference_adjoints(copy.deepcopy(model), images, labels, kind)

    recorder = TrajectoryRecorder(model.backbone, reduce=lambda r: r.adjoint, level='branch',
                                  adjoint=True)
    with recorder:
        loss = F.cross_entropy(model(images), labels)
    assert set(recorder.outputs) == set(reference)
    for ends, in recorder.outputs.values():  # nothing before the backward pass
        assert ends.start.norm is None and ends.end.norm is None
    loss.backward()
    for name, (start, end) in reference.items():
        (ends, ) = recorder.outputs[name]
        assert ends.start.norm.double() == pytest.approx(start, rel=1e-4, abs=1e-9), name
        assert ends.end.norm.double() == pytest.approx(end, rel=1e-4, abs=1e-9), name
        assert ends.start.norm.dtype == torch.float32 and ends.start.norm.shape == (BATCH, )
    if kind == 'vit':  # the state between the two steps is one tensor, one hook
        for i in range(2):
            (msa, ), (mlp, ) = (recorder.outputs[f'layers.{i}.{s}'] for s in ('msa', 'mlp'))
            assert msa.end is mlp.start
    if kind == 'resnet':  # a block's output is the next block's input: one hook
        assert recorder.outputs['layer1.0'][0].end is recorder.outputs['layer1.1'][0].start
        # across a stage boundary (layer2.0 projects its shortcut) the trajectory chains too
        assert recorder.outputs['layer1.1'][0].end is recorder.outputs['layer2.0'][0].start
        assert model.backbone.layer2[0].downsample is not None


def test_no_gradient_hook_without_a_graph_or_when_off():
    model, images = _resnet()
    with TrajectoryRecorder(model.backbone, reduce=lambda r: r.adjoint) as recorder:
        model(images).sum().backward()
    assert all(v == [None] for v in recorder.outputs.values())  # adjoint=False: no hook
    with torch.no_grad(), TrajectoryRecorder(model.backbone, reduce=lambda r: r.adjoint,
                                             adjoint=True) as recorder:
        model(images)
    assert all(ends.start is None and ends.end is None for (ends, ) in recorder.outputs.values())


def test_the_adjoint_keeps_no_activation_alive():
    """The gradient hooks hold the (B,) norms, not the states: once the graph is gone, every
    recorded state is freed."""
    import gc
    import weakref
    model, images = _resnet()
    refs = []
    with TrajectoryRecorder(model.backbone, reduce=lambda r: r.adjoint, adjoint=True) as recorder:
        handle = model.backbone.layer2[0].register_forward_hook(
            lambda m, a, out: refs.append(weakref.ref(out)))
        loss = model(images).sum()
    handle.remove()
    loss.backward()
    del loss
    gc.collect()
    assert refs and refs[0]() is None
    assert recorder.outputs['layer2.0'][0].end.norm is not None


class _Runner(SimpleNamespace):
    """What a StiffnessHook reads of a Runner between its hook points."""


def _hook_rows(model, images, labels, hook, scaler=None, iters=1):
    runner = _Runner(model=model, hooks=[], iter=0, epoch=0, max_iters=iters,
                     optim_wrapper=SimpleNamespace(loss_scaler=scaler) if scaler else None)
    rows = []
    hook.write = lambda runner, new: rows.extend(new)
    hook.before_train(runner)
    for i in range(iters):
        runner.iter = i
        hook.before_train_iter(runner, i)
        loss = F.cross_entropy(model(images), labels)
        (scaler.scale(loss) if scaler else loss).backward()
        hook.after_train_iter(runner, i)
    hook.flush(runner)
    return rows


@pytest.mark.parametrize('amp', [False, True], ids=['fp32', 'loss-scaled'])
def test_stiffness_hook_logs_norms_and_gains_unscaled(amp):
    model, images = _vit()
    model.train()
    labels = torch.tensor([0, 1, 2, 1])
    reference = _reference_adjoints(copy.deepcopy(model), images, labels, 'vit')
    scaler = torch.amp.GradScaler('cpu', init_scale=2.0**10) if amp else None
    rows = _hook_rows(model, images, labels, StiffnessHook(interval=1, module='backbone'), scaler)
    (row, ) = rows
    scalars = row.scalars
    for name, (start, end) in reference.items():
        assert scalars[f'adjoint/{name}'] == pytest.approx(float(start.mean()), rel=1e-4)
        assert scalars[f'adjoint_end/{name}'] == pytest.approx(float(end.mean()), rel=1e-4)
        assert scalars[f'adjoint_gain/{name}'] == pytest.approx(
            float((start / end).mean()), rel=1e-4)
    # the steps of the trajectory chain: the end of one is the start of the next
    assert scalars['adjoint_end/layers.0.msa'] == pytest.approx(scalars['adjoint/layers.0.mlp'])
    assert scalars['adjoint_end/layers.0.mlp'] == pytest.approx(scalars['adjoint/layers.1.msa'])


def test_stiffness_hook_without_the_adjoint_logs_none_of_it():
    model, images = _resnet()
    rows = _hook_rows(model, images, torch.tensor([0, 1, 2, 1]),
                      StiffnessHook(interval=1, adjoint=False))
    assert rows and not any(k.startswith('adjoint') for k in rows[0].scalars)
    assert 'nsi/layer1.0' in rows[0].scalars
    with pytest.raises(ValueError, match='adjoint'):
        StiffnessHook(adjoint='yes')


def test_loss_scale_of_reads_an_enabled_scaler_only():
    assert loss_scale_of(SimpleNamespace()) is None
    off = torch.amp.GradScaler('cpu', enabled=False)
    assert loss_scale_of(SimpleNamespace(optim_wrapper=SimpleNamespace(loss_scaler=off))) is None
    scaler = torch.amp.GradScaler('cpu', init_scale=256.0)
    runner = SimpleNamespace(optim_wrapper=SimpleNamespace(loss_scaler=scaler))
    assert loss_scale_of(runner) == 256.0  # before its first use
    scaler.scale(torch.ones(()))
    assert float(loss_scale_of(runner)) == 256.0
