"""WithSteps: adaptors written onto an upstream backbone's steps by the blocks' specs.

Checked against independent computations: the upstream backbone with the same weights (the
identity start), the block's own move scaled by a constant step (where f is written), the
hand-built StepResNet with the same weights (outputs and gradients), and the recorders.
"""
import copy

import pytest
import torch

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.registry import MODELS

pytest.importorskip('mmpretrain')

CONVNEXT = dict(type='mmpretrain.ConvNeXt', arch='atto', drop_path_rate=0.0)
VIT = dict(type='mmpretrain.VisionTransformer', arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                                          feedforward_channels=64), img_size=32,
           patch_size=8, layer_scale_init_value=0.5)
STEPNET = dict(type='mmstiff.StepNetAdaptor', start='identity')
SE = dict(type='mmstiff.SEAdaptor', start='identity', ratio=4)


def _image(size=32, batch=2, seed=1):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _pair(cfg, adaptor=STEPNET, **kwargs):
    """(upstream backbone, written backbone) with the upstream weights in both."""
    torch.manual_seed(0)
    upstream = MODELS.build(dict(cfg))
    written = MODELS.build(
        dict(type='mmstiff.WithSteps', backbone=dict(cfg), adaptor=adaptor,
             probe_input=(1, 3, 32, 32), **kwargs))
    missing, unexpected = written.load_state_dict(upstream.state_dict(), strict=False)
    assert unexpected == []
    assert all('step_adaptor' in key for key in missing), missing
    assert bool(missing) == any(True for _ in MODELS.build(dict(
        adaptor, channels=8)).state_dict()), missing  # a ConstantStep has no keys
    upstream.eval()  # some backbones' train() returns None
    written.eval()
    return upstream, written


def _outputs_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize('adaptor', [STEPNET, SE], ids=['stepnet', 'se'])
def test_identity_start_is_the_upstream_convnext_bit_for_bit(adaptor):
    upstream, written = _pair(CONVNEXT, adaptor)
    assert type(written).__name__ == 'ConvNeXt' and isinstance(written, type(upstream))
    x = _image()
    _outputs_equal(upstream(x), written(x))
    adaptors = [n for n, _ in written.named_modules() if n.endswith('step_adaptor')]
    assert len(adaptors) == sum(len(stage) for stage in written.stages)  # every block


def test_state_dict_is_upstream_plus_adaptor_keys():
    upstream, written = _pair(CONVNEXT)
    up, wr = set(upstream.state_dict()), set(written.state_dict())
    assert up <= wr
    assert all('.step_adaptor.' in key for key in wr - up)


def _move(block, x):
    return block(x) - x


def test_the_step_is_written_where_f_is_formed():
    """With Δ ≡ c (ConstantStep), each block moves its input by c times its upstream move
    (ConvNeXt: x + gamma * f, so the move is gamma * f, layer scale included)."""
    upstream, written = _pair(CONVNEXT, dict(type='mmstiff.ConstantStep', step=0.5))
    with torch.no_grad():
        for gamma in upstream.parameters():
            if gamma.dim() == 1:
                gamma.add_(0.3)  # layer scales well away from 1e-6
        written.load_state_dict(upstream.state_dict(), strict=False)
        x = torch.randn(2, 80, 8, 8)
        up, wr = upstream.stages[1][0], written.stages[1][0]
        torch.testing.assert_close(_move(wr, x), 0.5 * _move(up, x), rtol=1e-5, atol=1e-6)


def test_vit_branches_choose_the_steps():
    """branches=('mlp',) writes only the MLP step: Δ = c halves that step's move and leaves
    the attention step as upstream (both read by the recorder on the same input)."""
    upstream, written = _pair(VIT, dict(type='mmstiff.ConstantStep', step=0.25), branches='mlp')
    assert all(not hasattr(layer, 'step_adaptors') or list(layer.step_adaptors) == ['mlp']
               for layer in written.layers)
    x = _image()
    with torch.no_grad():
        moves = []
        for model in (upstream, written):
            with TrajectoryRecorder(model, level='branch') as recorder:
                model(x)
            moves.append({k: v[0].x_next - v[0].x_t for k, v in recorder.outputs.items()})
    # the first layer's steps start from the same states in both models
    torch.testing.assert_close(moves[1]['layers.0.msa'], moves[0]['layers.0.msa'])
    torch.testing.assert_close(moves[1]['layers.0.mlp'], 0.25 * moves[0]['layers.0.mlp'], rtol=1e-5,
                               atol=1e-6)


def test_recorders_read_the_adaptors_step_times_the_layer_scale():
    upstream, written = _pair(CONVNEXT, dict(type='mmstiff.StepNetAdaptor'))  # paper start
    x = _image()
    with torch.no_grad(), TrajectoryRecorder(written) as recorder:
        written(x)
    block = written.stages[2][0]
    record = recorder.outputs['stages.2.0'][0]
    with torch.no_grad():
        seen = {}
        handle = block.step_adaptor.register_forward_hook(
            lambda m, a, out: seen.setdefault('delta', out))
        written(x)
        handle.remove()
    expected = seen['delta'] * block.gamma.view(1, -1, 1, 1)
    torch.testing.assert_close(record.step, expected)
    # the move the recorder reads is that Δ times f (x_next - x_t == Δ_adaptor * gamma * f)
    assert not torch.allclose(record.step, block.gamma.view(1, -1, 1, 1).expand_as(record.step))


def test_gradients_reach_every_adaptor():
    # W_IE away from 0, so that the parameters before it get a gradient too
    _, written = _pair(CONVNEXT, dict(type='mmstiff.StepNetAdaptor', ie_weight_init=0.5))
    written.train()
    sum(out.sum() for out in written(_image(batch=4))).backward()
    for name, param in written.named_parameters():
        if 'step_adaptor' in name and param.requires_grad:
            assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_deep_copy_is_an_independent_written_model():
    """EMA keeps a deep copy: it must compute as the original, and its adaptors must be its
    own (the copy's hooks write with the copy's adaptors)."""
    _, written = _pair(CONVNEXT, dict(type='mmstiff.StepNetAdaptor'))
    ema = copy.deepcopy(written)
    x = _image()
    _outputs_equal(written(x), ema(x))
    with torch.no_grad():
        for name, param in ema.named_parameters():
            if name.endswith('step_adaptor.ie_bias'):
                param.fill_(3.0)
    assert not torch.equal(written(x)[-1], ema(x)[-1])
    _outputs_equal(written(x), copy.deepcopy(written)(x))


def _same_as_hand_built(hand_type, upstream_type, **cfg):
    """The written upstream ResNet and the hand-built one, same weights, compute the same
    outputs and gradients, with a StepNet adaptor away from its start (in float64: the
    adaptors' BN over 4 pooled samples amplifies float32 rounding to 1e-3)."""
    torch.manual_seed(0)
    adaptor = dict(type='mmstiff.StepNetAdaptor', ie_weight_init=0.7, ie_bias_init=0.2)
    hand = MODELS.build(dict(type=hand_type, adaptor=adaptor, **cfg))
    written = MODELS.build(
        dict(type='mmstiff.WithSteps', backbone=dict(type=upstream_type, **cfg), adaptor=adaptor,
             probe_input=(1, 3, 32, 32)))
    assert set(hand.state_dict()) == set(written.state_dict())
    written.load_state_dict(hand.state_dict())
    hand.double().train()
    written.double().train()
    x = _image(size=64, batch=4).double()
    outs = [model(x) for model in (hand, written)]
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    for out in outs:
        sum((o * o).sum() for o in out).backward()
    grads = [dict(m.named_parameters()) for m in (hand, written)]
    for name, param in grads[0].items():
        torch.testing.assert_close(grads[1][name].grad, param.grad, rtol=1e-8, atol=1e-8,
                                   msg=lambda m: f'{name}: {m}')


def test_resnet_written_equals_step_resnet():
    """On mmpretrain's ResNet the written step is StepResNet's: x_t the projected shortcut,
    f the branch up to its last norm."""
    _same_as_hand_built('mmstiff.StepResNet', 'mmpretrain.ResNet', depth=18, out_indices=(2, 3))


@pytest.mark.det
def test_mmdet_resnet_written_equals_det_step_resnet():
    """mmdet's ResNet projects its shortcut after forming f: the written step there is the
    shortcut x_t + (Δ - 1) f, the same sum as DetStepResNet's x_t + Δ f."""
    pytest.importorskip('mmdet.models')
    _same_as_hand_built('mmstiff.DetStepResNet', 'mmdet.ResNet', depth=18, out_indices=(0, 1, 2, 3),
                        norm_eval=False, frozen_stages=-1)


def test_placement_knobs():
    _, last = _pair(CONVNEXT, steps='last')
    assert [n for n, _ in last.named_modules() if n.endswith('step_adaptor')] == [
        f'stages.{i}.{len(stage) - 1}.step_adaptor' for i, stage in enumerate(last.stages)
    ]
    _, some = _pair(CONVNEXT, adaptor_stages=(False, False, True, True),
                    adaptor_blocks=(None, None, [0], [-1]))
    assert [n for n, _ in some.named_modules() if n.endswith('step_adaptor')
            ] == ['stages.2.0.step_adaptor', 'stages.3.1.step_adaptor']


def test_norm_eval_and_frozen_stages_as_upstream():
    cfg = dict(type='mmpretrain.ResNet', depth=18, frozen_stages=1, norm_eval=True)
    written = MODELS.build(
        dict(type='mmstiff.WithSteps', backbone=cfg, adaptor=STEPNET, probe_input=(1, 3, 32, 32)))
    written.train()
    frozen = written.layer1[0].step_adaptor
    assert not any(p.requires_grad for p in frozen.parameters())
    live = written.layer3[0].step_adaptor
    assert all(p.requires_grad for p in live.parameters())
    # nothing loaded: every BN (the adaptors' too) keeps its statistics under norm_eval
    assert not written.layer3[0].norm1.training and not live.norm.training


@pytest.mark.parametrize('cfg, field, needle', [
    (dict(backbone=dict(type='mmpretrain.VGG', depth=11),
          adaptor=STEPNET), 'VGG', 'no residual step'),
    (dict(backbone=CONVNEXT, adaptor=STEPNET, steps='every'), 'steps', "'every'"),
    (dict(backbone=CONVNEXT, adaptor=None), 'adaptor', 'adaptor=None'),
    (dict(backbone=CONVNEXT, adaptor=dict(type='mmstiff.Nope')), 'adaptor', 'Nope'),
    (dict(backbone=CONVNEXT, adaptor=STEPNET, branches=('msa', )), 'branches', "'msa'"),
    (dict(backbone='ConvNeXt', adaptor=STEPNET), 'backbone', "'ConvNeXt'"),
    (dict(backbone=CONVNEXT, adaptor=STEPNET, adaptor_stages=(True, )), 'adaptor_stages', '4'),
])
def test_bad_arguments_name_the_field(cfg, field, needle):
    with pytest.raises(ValueError) as error:
        MODELS.build(dict(type='mmstiff.WithSteps', probe_input=(1, 3, 32, 32), **cfg))
    assert field in str(error.value) and needle in str(error.value), str(error.value)


class TinyBlock(torch.nn.Module):
    """A user's block: x + scale * body(x)."""

    def __init__(self, channels):
        super().__init__()
        self.body = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.scale = torch.nn.Parameter(torch.full((channels, ), 0.5))

    def forward(self, x):
        return x + self.scale.view(1, -1, 1, 1) * self.body(x)


class TinyNet(torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = torch.nn.Sequential(TinyBlock(8), TinyBlock(8))

    def forward(self, x):
        return (self.blocks(self.stem(x)), )


def test_a_users_block_declared_with_a_branch_is_written():
    """block_types gives a model of another package its steps: here f is the output of
    ``body``, and the scale parameter (its own step size) multiplies the adaptor's Δ."""
    spec = dict(steps=[dict(scale='param:scale:channels_first', branch='output:body')])
    torch.manual_seed(0)
    plain = TinyNet()
    written = MODELS.build(
        dict(type='mmstiff.WithSteps', backbone=dict(type=TinyNet),
             block_types=dict(TinyBlock=spec), adaptor=dict(type='mmstiff.ConstantStep',
                                                            step=0.5), probe_input=(1, 3, 8, 8)))
    written.load_state_dict(plain.state_dict())
    x = torch.randn(2, 8, 8, 8)
    with torch.no_grad():
        block, own = written.blocks[0], plain.blocks[0]
        # x + 0.5 * scale * body(x): half the plain block's move
        torch.testing.assert_close(block(x) - x, 0.5 * (own(x) - x))
    with pytest.raises(ValueError, match=r'TinyBlock.*no branch'):
        MODELS.build(
            dict(type='mmstiff.WithSteps', backbone=dict(type=TinyNet),
                 block_types=dict(TinyBlock=dict(steps=[dict(scale='param:scale:channels_first')])),
                 adaptor=STEPNET, probe_input=(1, 3, 8, 8)))


def test_a_block_without_a_write_description_is_refused_by_name():
    cfg = dict(
        type='mmpretrain.HorNet', arch=dict(base_dim=8, depths=[1, 1, 1, 1], orders=[2, 3, 4, 5],
                                            dw_cfg=[dict(type='DW', kernel_size=7)] * 4))
    with pytest.raises(ValueError, match=r'HorNet.*HorNetBlock.*one step'):
        MODELS.build(
            dict(type='mmstiff.WithSteps', backbone=cfg, adaptor=STEPNET,
                 probe_input=(1, 3, 32, 32)))


@pytest.mark.slow
@pytest.mark.parametrize('family', ['convnext-atto', 'mobilenet-v2', 'deit-tiny-p4'])
def test_runner_training_logs_the_written_steps(family, tiny_data, tmp_path):
    """Two iterations of a written zoo config under MMEngine's Runner with StiffnessHook: a
    finite step size and NSI logged for the written steps."""
    import math
    import os.path as osp

    from mmengine.config import Config
    from mmengine.runner import Runner
    from test_configs import REPO, drop_downloads, point_data_at, shorten

    config = f'configs/zoo/{family}-stepnet_1xb64-1e_fashion-mnist-6400.py'
    cfg = Config.fromfile(osp.join(REPO, config))
    point_data_at(cfg, tiny_data)
    drop_downloads(cfg)
    shorten(cfg, tmp_path)
    cfg.custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=1)]
    runner = Runner.from_cfg(cfg)
    runner.train()
    scalars = {k: v.current() for k, v in runner.message_hub.log_scalars.items()}
    steps = {k: v for k, v in scalars.items() if k.startswith('stiffness/step/')}
    nsi = {k: v for k, v in scalars.items() if k.startswith('stiffness/nsi/')}
    assert steps and nsi, sorted(scalars)
    assert all(math.isfinite(v) for v in list(steps.values()) + list(nsi.values()))
    written = {n for n, _ in runner.model.named_modules() if '.step_adaptor' in n}
    assert written


def _tiny_written(adaptor=None):
    torch.manual_seed(0)
    model = MODELS.build(
        dict(
            type='mmstiff.WithSteps', backbone=dict(VIT), adaptor=adaptor
            or dict(type='mmstiff.StepNetAdaptor', ie_weight_init=0.5, ie_bias_init=0.3),
            probe_input=(1, 3, 32, 32)))
    return model.eval()


def test_torch_export_gives_the_eager_outputs():
    model = _tiny_written()
    x = _image()
    program = torch.export.export(model, (x, ))
    _outputs_equal(model(x), program.module()(x))


@pytest.mark.slow
def test_onnx_runtime_gives_the_eager_outputs(tmp_path):
    onnxruntime = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    model = _tiny_written()
    x = _image()
    path = str(tmp_path / 'written.onnx')
    torch.onnx.export(model, (x, ), dynamo=True).save(path)
    session = onnxruntime.InferenceSession(path)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    for a, b in zip(model(x), got):
        torch.testing.assert_close(torch.from_numpy(b), a.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_training_step_matches_eager():
    model = _tiny_written().train()
    compiled = torch.compile(copy.deepcopy(model))
    x = _image(batch=4)
    eager_out, compiled_out = model(x), compiled(x)
    for a, b in zip(eager_out, compiled_out):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    # a random projection: the sum of a LayerNorm output has a gradient of rounding noise only
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(7)) for o in eager_out]
    sum((o * w).sum() for o, w in zip(eager_out, weights)).backward()
    sum((o * w).sum() for o, w in zip(compiled_out, weights)).backward()
    grads = dict(compiled.named_parameters())
    for name, param in model.named_parameters():
        got = grads.get(f'_orig_mod.{name}', grads.get(name)).grad
        scale = param.grad.abs().max().item()  # the compiler's kernels sum in another order
        torch.testing.assert_close(got, param.grad, rtol=1e-3, atol=1e-4 * scale + 1e-8)


def test_autocast_keeps_the_upstream_precision():
    """Under bfloat16 autocast the adaptor's Δ (float32 from its norm) is cast to f's dtype:
    the written backbone's outputs have the upstream's dtypes."""
    upstream, written = _pair(CONVNEXT, dict(type='mmstiff.StepNetAdaptor', start='identity'))
    x = _image()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        expected, actual = upstream(x), written(x)
        inner = written.stages[0](written.downsample_layers[0](x))
        plain = upstream.stages[0](upstream.downsample_layers[0](x))
    assert [a.dtype for a in actual] == [e.dtype for e in expected]
    assert inner.dtype == plain.dtype
    _outputs_equal(expected, actual)


@pytest.mark.parametrize('kind', [
    'mmpretrain.ResNet',
    pytest.param('mmdet.ResNet', marks=pytest.mark.det),
])
def test_with_cp_recomputes_the_written_step(kind):
    """A checkpointed block (with_cp=True) recomputes its written step in the backward: the
    gradients are those of the model without checkpoints (x_t read inside the recomputed
    function; mmdet's shortcut, formed after f, included)."""
    if kind.startswith('mmdet'):
        pytest.importorskip('mmdet.models')
    models = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        models.append(
            MODELS.build(
                dict(type='mmstiff.WithSteps', backbone=dict(type=kind, depth=18, with_cp=with_cp),
                     adaptor=dict(type='mmstiff.StepNetAdaptor',
                                  ie_weight_init=0.5), probe_input=(1, 3, 32, 32))))
    models[1].load_state_dict(models[0].state_dict())
    x = _image(size=64, batch=4).requires_grad_()
    for model in models:
        model.train()
        model(x)[-1].pow(2).sum().backward()
    grads = dict(models[1].named_parameters())
    for name, param in models[0].named_parameters():
        torch.testing.assert_close(grads[name].grad, param.grad, msg=lambda m: f'{name}: {m}')
