"""The trajectory recorder on upstream and mmstiff residual networks.

Each test recomputes the states of a few blocks by calling the block's own submodules in the
order of the block's forward, and checks the recorded ``(x_t, x_{t+1}, Δ_t)`` against them.
"""
import pytest
import torch
import torch.nn as nn

from mmstiff.analysis import (TrajectoryRecorder, find_blocks, neural_stiffness_index,
                              record_states, register_block_type, stage_of)


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _resnet_stem(backbone, x):
    if backbone.deep_stem:
        return backbone.maxpool(backbone.stem(x))
    return backbone.maxpool(backbone.relu(backbone.norm1(backbone.conv1(x))))


def test_mmpretrain_resnet_blocks_states_and_clean_removal():
    from mmpretrain.models.backbones import ResNet
    torch.manual_seed(0)
    net = ResNet(depth=18, base_channels=8, stem_channels=8)
    net.eval()  # mmpretrain's train() returns None
    x = torch.randn(2, 3, 32, 32)
    before = _hook_count(net)
    recorder = TrajectoryRecorder(net)
    assert _hook_count(net) == before and not recorder.active  # off: nothing registered
    with torch.no_grad(), recorder:
        assert _hook_count(net) > before
        net(x)
    assert _hook_count(net) == before  # removed cleanly
    assert list(recorder.outputs) == [f'layer{i}.{j}' for i in range(1, 5) for j in range(2)]

    with torch.no_grad():
        state = _resnet_stem(net, x)
        for i in range(1, 5):
            for j, block in enumerate(getattr(net, f'layer{i}')):
                record = recorder.outputs[f'layer{i}.{j}'][0]
                # post-activation block: a projected shortcut is taken through the activation
                x_t = state if block.downsample is None else block.relu(block.downsample(state))
                state = block(state)
                assert torch.allclose(record.x_t, x_t, atol=1e-6)
                assert torch.allclose(record.x_next, state, atol=1e-6)
                assert record.step is None
    assert stage_of('layer3.1') == 'layer3'


@pytest.mark.slow
def test_recorder_detaches_and_reduces_on_the_fly():
    from mmpretrain.models.backbones import ResNet_CIFAR
    net = ResNet_CIFAR(depth=18, base_channels=8, stem_channels=8)
    x = torch.randn(3, 3, 16, 16)
    seen = []

    def reduce(record):
        seen.append((record.x_t.requires_grad, record.x_next.grad_fn, torch.is_grad_enabled()))
        return neural_stiffness_index(record.x_t, record.x_next, record.step)

    with TrajectoryRecorder(net, reduce=reduce, select=['layer1.*', 'layer4.1']) as recorder:
        out = net(x)[-1]
    out.sum().backward()  # the training graph is intact
    assert list(recorder.outputs) == ['layer1.0', 'layer1.1', 'layer4.1']
    assert all(s == (False, None, False) for s in seen)
    nsi = recorder.outputs['layer1.0'][0]
    assert nsi.shape == (3, ) and not nsi.requires_grad
    with pytest.raises(ValueError, match='matches none'):
        TrajectoryRecorder(net, select=['layer9.*'])
    with pytest.raises(ValueError, match='level='):
        TrajectoryRecorder(net, level='layers')


def test_on_pass_end_runs_after_each_forward_pass_while_started():
    from mmpretrain.models.backbones import ResNet_CIFAR
    net = ResNet_CIFAR(depth=18, base_channels=8, stem_channels=8)
    x = torch.randn(2, 3, 16, 16)
    events = []
    recorder = TrajectoryRecorder(net, reduce=lambda r: events.append(r.name),
                                  on_pass_end=lambda: events.append('end'))
    with recorder:
        net(x)
        net(x)
    net(x)  # stopped: neither the blocks nor the end of the pass are seen
    blocks = [b.name for b in recorder.blocks]
    # every block's reduction first, then the end of the pass, once per forward pass
    assert events == (blocks + ['end']) * 2
    assert _hook_count(net) == 0
    with pytest.raises(ValueError, match='on_pass_end='):
        TrajectoryRecorder(net, on_pass_end='free')


def test_gradient_checkpointing_records_once():
    from mmpretrain.models.backbones import ResNet
    net = ResNet(depth=18, base_channels=8, stem_channels=8, with_cp=True)
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    with TrajectoryRecorder(net, reduce=lambda r: r.x_next.shape[0]) as recorder:
        net(x)[-1].sum().backward()  # the backward pass re-runs inner modules
    assert all(len(v) == 1 for v in recorder.outputs.values())


def test_seresnet_reads_the_se_gate_as_step_size():
    from mmpretrain.models.backbones import SEResNet
    torch.manual_seed(0)
    net = SEResNet(depth=50, base_channels=8, stem_channels=8, out_indices=(0, ))
    net.eval()
    x = torch.randn(2, 3, 32, 32)
    records = record_states(net, x, select=['layer1.*'])
    with torch.no_grad():
        state = _resnet_stem(net, x)
        block = net.layer1[0]
        # SEBottleneck.forward: conv-bn chain, SE gate, projected shortcut, add, relu
        out = block.relu(block.norm1(block.conv1(state)))
        out = block.relu(block.norm2(block.conv2(out)))
        f = block.norm3(block.conv3(out))
        se = block.se_layer
        gate = se.conv2(se.conv1(se.global_avgpool(f)))
        shortcut = block.downsample(state)
        x_next = block.relu(f * gate + shortcut)
        x_t = torch.relu(shortcut)
    record = records['layer1.0']
    assert record.step.shape == (2, f.shape[1], 1, 1)
    assert torch.allclose(record.step, gate, atol=1e-6)
    assert torch.allclose(record.x_next, x_next, atol=1e-5)
    expected = ((x_next - x_t) / gate).flatten(1).norm(dim=1) / x_t.flatten(1).norm(dim=1)
    assert torch.allclose(
        neural_stiffness_index(record.x_t, record.x_next, record.step), expected, rtol=1e-5)


def _tiny_vit():
    from mmpretrain.models.backbones import VisionTransformer
    arch = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
    vit = VisionTransformer(arch=arch, img_size=16, patch_size=4, drop_rate=0.0)
    vit.eval()
    return vit


def test_vit_layer_is_two_euler_steps():
    torch.manual_seed(0)
    vit = _tiny_vit()
    x = torch.randn(2, 3, 16, 16)
    inputs = {}
    handle = vit.layers[1].register_forward_pre_hook(lambda m, a: inputs.setdefault('x', a[0]))
    records = record_states(vit, x, level='both')
    handle.remove()
    assert list(records) == [
        'layers.0.msa', 'layers.0.mlp', 'layers.0', 'layers.1.msa', 'layers.1.mlp', 'layers.1'
    ]
    layer, x1 = vit.layers[1], inputs['x']
    with torch.no_grad():
        mid = x1 + layer.attn(layer.ln1(x1))
        out = layer.ffn(layer.ln2(mid), identity=mid)
    assert records['layers.1.msa'].x_t.shape == (2, 17, 32)  # class token + 4 x 4 patches
    assert torch.allclose(records['layers.1.msa'].x_t, x1)
    assert torch.allclose(records['layers.1.msa'].x_next, mid, atol=1e-6)
    assert torch.allclose(records['layers.1.mlp'].x_t, mid, atol=1e-6)
    assert torch.allclose(records['layers.1.mlp'].x_next, out, atol=1e-6)
    assert torch.allclose(records['layers.1'].x_next, out, atol=1e-6)
    assert stage_of('layers.1.msa') == 'layers'


def test_attention_recorder_rebuilds_softmax_maps():
    from mmstiff.analysis import AttentionRecorder
    torch.manual_seed(0)
    vit = _tiny_vit()
    x = torch.randn(2, 3, 16, 16)
    inputs = {}
    attn = vit.layers[0].attn
    handle = attn.register_forward_pre_hook(lambda m, a: inputs.setdefault('x', a[0]))
    with torch.no_grad(), AttentionRecorder(vit) as recorder:
        vit(x)
    handle.remove()
    maps = recorder.outputs['layers.0'][0]
    assert maps.shape == (2, 2, 17, 17)
    # explicit attention: softmax(q kᵀ / sqrt(d)) · v through proj must give the module output
    with torch.no_grad():
        qkv = attn.qkv(inputs['x']).reshape(2, 17, 3, 2, 16).permute(2, 0, 3, 1, 4)
        v = qkv[2]
        out = (maps @ v).transpose(1, 2).reshape(2, 17, 32)
        assert torch.allclose(attn.proj(out), attn(inputs['x']), atol=1e-5)
    assert _hook_count(vit) == 0


@pytest.mark.det
def test_mmdet_resnet_blocks():
    from mmdet.models.backbones import ResNet as DetResNet
    torch.manual_seed(0)
    net = DetResNet(depth=18, base_channels=8, out_indices=(0, 1, 2, 3))
    net.eval()
    x = torch.randn(1, 3, 64, 48)
    records = record_states(net, x)
    assert len(records) == 8
    with torch.no_grad():
        state = net.maxpool(net.relu(net.norm1(net.conv1(x))))
        block = net.layer1[0]
        out = block(state)
    assert torch.allclose(records['layer1.0'].x_t, state)
    assert torch.allclose(records['layer1.0'].x_next, out)
    assert records['layer2.0'].x_t.shape == records['layer2.0'].x_next.shape == (1, 16, 8, 6)


def test_custom_block_registration_and_predicate():

    class Scale(nn.Module):
        """x + 0.5 x: NSI = 0.5 for every sample."""

        def forward(self, x):
            return x + 0.5 * x

    net = nn.Sequential(Scale(), nn.ReLU(), Scale())
    with pytest.raises(
            ValueError, match=r"most frequent module classes .* Scale \(2\).*"
            r"block_types=dict\(Scale='conv'\)"):
        TrajectoryRecorder(net)
    blocks = find_blocks(net, is_block=lambda m: isinstance(m, Scale))
    assert [block.name for block in blocks] == ['0', '2'] and blocks[0].kind == 'conv'
    register_block_type(Scale, 'conv')
    x = torch.rand(4, 3) + 0.1
    with TrajectoryRecorder(net, reduce=lambda r: neural_stiffness_index(r.x_t, r.x_next)) as rec:
        net(x)
    assert torch.allclose(rec.outputs['2'][0], torch.full((4, ), 0.5))
    with pytest.raises(ValueError, match='kind='):
        register_block_type(Scale, 'recurrent')


@pytest.mark.slow
def test_step_resnet_cifar_reports_its_adaptor_output():
    from mmstiff.models.backbones import StepResNet_CIFAR
    torch.manual_seed(0)
    net = StepResNet_CIFAR(depth=18, stem_channels=8, base_channels=8,
                           adaptor=dict(type='mmstiff.StepNetAdaptor'))
    net.init_weights()
    net.train()  # the adaptor's BN in training mode: Δ varies over the batch
    x = torch.randn(4, 3, 16, 16)
    seen = {}
    block = net.layer2[0]
    handle = block.step_adaptor.register_forward_hook(
        lambda m, a, out: seen.update(x_t=a[0].detach(), step=out.detach()))
    records = record_states(net, x, select=['layer2.0'])
    handle.remove()
    record = records['layer2.0']
    assert record.step.shape == (4, 16, 1, 1)
    assert torch.allclose(record.step, seen['step'])
    # the adaptor saw the raw projected shortcut; the state x_t is it after the activation
    assert torch.allclose(record.x_t, torch.relu(seen['x_t']))
    # num_samples: the same records cut to the first samples as they are captured
    net.eval()  # Δ no longer depends on the rest of the batch
    full = record_states(net, x, select=['layer2.*'])
    first = record_states(net, x, select=['layer2.*'], num_samples=2)
    for name in ('layer2.0', 'layer2.1'):
        for field in ('x_t', 'x_next', 'step'):
            cut, whole = getattr(first[name], field), getattr(full[name], field)
            assert cut.shape[0] == 2 and torch.equal(cut, whole[:2]), (name, field)
    with pytest.raises(ValueError, match='num_samples=0'):
        TrajectoryRecorder(net, num_samples=0)


def test_preact_resnet_blocks_have_no_activation_after_the_add():
    from mmstiff.models.backbones import PreActStepResNet
    torch.manual_seed(0)
    net = PreActStepResNet(depth=8, adaptor=dict(type='mmstiff.ConstantStep', step=0.5))
    net.eval()
    x = torch.randn(2, 3, 16, 16)
    records = record_states(net, x)
    assert list(records) == ['layer1.0', 'layer2.0', 'layer3.0']
    with torch.no_grad():
        state = net.layer1(net.conv1(x))
        block = net.layer2[0]
        preact = block.relu(block.norm1(state))
        x_t = block.downsample(preact)
        f = block.residual(preact)
    record = records['layer2.0']
    assert record.step == 0.5
    assert torch.allclose(record.x_t, x_t, atol=1e-6)
    assert torch.allclose(record.x_next, x_t + 0.5 * f, atol=1e-6)
    # x_{t+1} - x_t = Δ f exactly, so NSI = ||f|| / ||x_t||
    assert torch.allclose(
        neural_stiffness_index(record.x_t, record.x_next, record.step),
        f.flatten(1).norm(dim=1) / x_t.flatten(1).norm(dim=1), rtol=1e-5)


def test_step_vit_branch_steps_and_attnscale_maps():
    from mmstiff.analysis import AttentionRecorder
    from mmstiff.models.backbones import StepViT
    from mmstiff.models.layers.attn_scale import attn_scale_matrix
    torch.manual_seed(0)
    vit = StepViT(
        arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=16,
        patch_size=4, attn_scale_layers='all', msa_adaptor=dict(type='mmstiff.ConstantStep',
                                                                step=0.25),
        mlp_adaptor=dict(type='mmstiff.ConstantStep', step=0.75), mlp_adaptor_layers=[1])
    vit.eval()
    attn = vit.layers[0].attn
    with torch.no_grad():
        attn.attn_scale.omega.fill_(0.5)
    x = torch.randn(2, 3, 16, 16)
    inputs = {}
    handle = attn.register_forward_pre_hook(lambda m, a: inputs.setdefault('h', a[0]))
    recorder = TrajectoryRecorder(vit, level='both')
    with torch.no_grad(), recorder, AttentionRecorder(vit) as attn_recorder:
        vit(x)
    handle.remove()
    steps = {name: calls[0].step for name, calls in recorder.outputs.items()}
    # the MSA adaptor fires before ln2, the MLP adaptor after it; a layer with two steps has
    # no single block-level step
    assert steps == {
        'layers.0.msa': 0.25,
        'layers.0.mlp': None,
        'layers.0': 0.25,
        'layers.1.msa': 0.25,
        'layers.1.mlp': 0.75,
        'layers.1': None
    }
    # AttnScale's Â = A_LP + (1 + ω) A_HP, from the module's own explicit path
    with torch.no_grad():
        qkv = attn.qkv(inputs['h']).reshape(2, 17, 3, 2, 8).permute(2, 0, 3, 1, 4)
        plain = torch.softmax(qkv[0] @ qkv[1].transpose(-2, -1) * 8**-0.5, dim=-1)
        expected = attn_scale_matrix(plain, attn.attn_scale.omega)
    assert torch.allclose(attn_recorder.outputs['layers.0'][0], expected, atol=1e-5)
    assert not attn.keep_attn_map  # the module is back on its fused path
    assert _hook_count(vit) == 0


def _tiny_swin(cls=None, **kwargs):
    """64x64 images, patch 4, window 4: the odd blocks shift their windows (additive mask)."""
    if cls is None:
        from mmpretrain.models.backbones import SwinTransformer as cls
    torch.manual_seed(0)
    swin = cls(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=64, window_size=4,
        out_indices=(0, 1), drop_path_rate=0., **kwargs)
    with torch.no_grad():  # a visible relative position bias
        for name, p in swin.named_parameters():
            if 'relative_position_bias_table' in name:
                p.normal_(std=0.5)
    swin.eval()
    return swin


def _capture_inputs(module, store, key):

    def hook(mod, args, kwargs):
        store.setdefault(key, (args, kwargs))

    return module.register_forward_pre_hook(hook, with_kwargs=True)


def _assert_map_drives_the_window_output(w_msa, args, kwargs, maps):
    """The recorded map, applied to the module's own V and projection, gives its output."""
    x = args[0]
    b, n, c = x.shape
    heads = w_msa.num_heads
    with torch.no_grad():
        v = w_msa.qkv(x).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)[2]
        out = w_msa.proj((maps @ v).transpose(1, 2).reshape(b, n, c))
        torch.testing.assert_close(out, w_msa(*args, **kwargs), rtol=1e-5, atol=1e-5)


def test_swin_blocks_are_two_euler_steps_with_window_attention_maps():
    from mmstiff.analysis import AttentionRecorder
    swin = _tiny_swin()
    x = torch.randn(2, 3, 64, 64)
    names = [block.name for block in find_blocks(swin) if block.kind == 'transformer']
    assert names == [f'stages.{i}.blocks.{j}' for i in range(2) for j in range(2)]
    block = swin.stages[0].blocks[1]  # a shifted-window block
    inputs = {}
    handles = [
        _capture_inputs(block, inputs, 'block'),
        _capture_inputs(block.attn.w_msa, inputs, 'w_msa')
    ]
    recorder = TrajectoryRecorder(swin, level='branch')
    with torch.no_grad(), recorder, AttentionRecorder(swin) as attn_recorder:
        swin(x)
    for handle in handles:
        handle.remove()
    (h, hw_shape), _ = inputs['block']
    with torch.no_grad():
        mid = h + block.attn(block.norm1(h), hw_shape)
        out = block.ffn(block.norm2(mid), identity=mid)
    msa, mlp = (recorder.outputs[f'stages.0.blocks.1.{b}'][0] for b in ('msa', 'mlp'))
    assert torch.equal(msa.x_t, h) and msa.x_t.shape == (2, 16 * 16, 16)
    torch.testing.assert_close(msa.x_next, mid)
    torch.testing.assert_close(mlp.x_t, mid)
    torch.testing.assert_close(mlp.x_next, out)
    # the window attention maps: (batch · 16 windows, heads, 16, 16), bias and shift mask in
    maps = attn_recorder.outputs['stages.0.blocks.1'][0]
    assert maps.shape == (2 * 16, 2, 16, 16)
    assert inputs['w_msa'][1]['mask'] is not None
    torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))
    _assert_map_drives_the_window_output(block.attn.w_msa, *inputs['w_msa'], maps)
    assert _hook_count(swin) == 0


@pytest.mark.det
def test_step_swin_attnscale_maps_and_mmdet_swin_blocks():
    from mmdet.models.backbones import SwinTransformer as DetSwin

    from mmstiff.analysis import AttentionRecorder
    from mmstiff.models.backbones import StepSwin
    swin = _tiny_swin(StepSwin, attn_scale_layers='all')
    w_msa = swin.stages[1].blocks[1].attn.w_msa
    with torch.no_grad():
        w_msa.attn_scale.omega.fill_(0.5)
    inputs = {}
    handle = _capture_inputs(w_msa, inputs, 'w_msa')
    with torch.no_grad(), AttentionRecorder(swin, select=['stages.1.*']) as recorder:
        swin(torch.randn(2, 3, 64, 64))
    handle.remove()
    assert list(recorder.outputs) == ['stages.1.blocks.0', 'stages.1.blocks.1']
    # Â (not the softmax map) is what multiplies V in a block with AttnScale
    _assert_map_drives_the_window_output(w_msa, *inputs['w_msa'],
                                         recorder.outputs['stages.1.blocks.1'][0])
    assert not w_msa.keep_attn_map

    torch.manual_seed(0)
    det = DetSwin(embed_dims=16, depths=(2, 2), num_heads=(2, 4), window_size=4, strides=(4, 2),
                  out_indices=(0, 1))
    det.eval()
    records = record_states(det, torch.randn(1, 3, 32, 48), level='branch')
    assert list(records) == [
        f'stages.{i}.blocks.{j}.{b}' for i in range(2) for j in range(2) for b in ('msa', 'mlp')
    ]
    assert records['stages.1.blocks.0.msa'].x_t.shape == (1, 4 * 6, 32)
    w_msa = det.stages[0].blocks[1].attn.w_msa
    inputs = {}
    handle = _capture_inputs(w_msa, inputs, 'w_msa')
    with torch.no_grad(), AttentionRecorder(det) as recorder:
        det(torch.randn(1, 3, 32, 48))
    handle.remove()
    _assert_map_drives_the_window_output(w_msa, *inputs['w_msa'],
                                         recorder.outputs['stages.0.blocks.1'][0])
