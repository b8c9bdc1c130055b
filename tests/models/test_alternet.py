"""AlterNet (docs/alternet.md, docs/methods.md §10): layout, shapes, the ResNet contract, the
local MSA against a per-window reference, parameter counts of the authors' model, training and
the trajectory recorder."""
import json

import pytest
import torch
import torch.nn.functional as F
from mmengine.registry import DefaultScope
from mmengine.utils.dl_utils.parrots_wrapper import _BatchNorm
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from reference_weights import randomise_bn

from mmstiff.analysis import TrajectoryRecorder, block_kind
from mmstiff.models.backbones.alternet import (AlterNet, PreActMSABlock, PreActMSABottleneck,
                                               alternating_layout, stochastic_depth_rates)
from mmstiff.models.backbones.preact_resnet import PreActBasicBlock, PreActBottleneck
from mmstiff.models.layers import LocalSelfAttention, record_attention_maps
from mmstiff.models.layers.local_attention import relative_position_index, window_padding
from mmstiff.registry import MODELS

FASHION_CONFIG = 'configs/alternet/alternet18-small_1xb128-3e_fashion-mnist.py'

# ------------------------------------------------------------------ the authors' model
# Parameter counts of the public AlterNet (github.com/xxxnell/how-do-vits-work,
# models/alternet.py: dnn_18 / dnn_34 with AttentionBasicBlockB, dnn_50 / 101 / 152 with
# AttentionBlockB; pre-activation blocks of models/preresnet_dnn_block.py; StemB; the classifier
# classifier_block.BNGAPBlock = BN + ReLU + GAP + Linear), counted with every trainable
# parameter, as its models.count_parameters does:
#   ImageNet-1k: stem=True (7x7/2 conv + max pool), window_size=7, 224², 1000 classes;
#   CIFAR-100:  stem=False (3x3/1 conv), window_size=4 (Appendix E), 32², 100 classes.
# They were derived twice: by rebuilding that module structure (same layers, same shapes) in a
# scratch script and summing p.numel(), and by the closed form public_param_count below, which
# adds up the layers read off the authors' code; both agree.
PUBLIC_PARAMS = {
    (18, 'in1k'): 9_968_803,
    (18, 'cifar100'): 9_499_063,
    (34, 'in1k'): 22_833_054,
    (34, 'cifar100'): 22_362_954,
    (50, 'in1k'): 35_915_038,
    (50, 'cifar100'): 34_062_538,
    (101, 'in1k'): 54_907_166,
    (101, 'cifar100'): 53_054_666,
    (152, 'in1k'): 70_550_814,
    (152, 'cifar100'): 68_698_314,
}
SETTINGS = {'in1k': ('imagenet', 7, 1000), 'cifar100': ('cifar', 4, 100)}
PUBLIC_BLOCKS = {
    18: ((2, 2, 2, 2), (0, 1, 1, 1)),
    34: ((3, 4, 6, 4), (0, 1, 3, 2)),
    50: ((3, 4, 6, 4), (0, 1, 3, 2)),
    101: ((3, 4, 23, 4), (0, 1, 3, 2)),
    152: ((3, 8, 36, 4), (0, 1, 3, 2))
}


def public_param_count(depth, stem, window, num_classes):
    """Parameters of the authors' AlterNet, added up layer by layer from their code."""
    blocks, msa = PUBLIC_BLOCKS[depth]
    expansion = 1 if depth in (18, 34) else 4
    heads, dim_head = (3, 6, 12, 24), 64
    total = 3 * 64 * (7 * 7 if stem == 'imagenet' else 3 * 3)  # stem conv, no bias, no BN
    cin = 64
    for i in range(4):
        planes = 64 * 2**i
        out = planes * expansion
        kinds = ['conv'] * (blocks[i] - 2 * msa[i]) + ['conv', 'msa'] * msa[i]
        for j, kind in enumerate(kinds):
            stride = (1 if i == 0 else 2) if j == 0 else 1
            if kind == 'conv':
                total += 2 * cin  # bn1
                if expansion == 1:  # 3x3 cin->planes, bn2, 3x3 planes->out
                    total += 9 * cin * planes + 2 * planes + 9 * planes * out
                else:  # 1x1 cin->planes, bn2, 3x3, bn3, 1x1 planes->out
                    total += cin * planes + 2 * planes + 9 * planes**2 + 2 * planes + planes * out
                if stride != 1 or cin != out:
                    total += cin * out  # 1x1 projection shortcut, no bias
            else:  # norm1, 1x1 conv to width = cin / expansion, norm2, to_q, to_kv, to_out, table
                width, inner = cin // expansion, heads[i] * dim_head
                total += (2 * cin + cin * width + 2 * width + 3 * width * inner + inner * out +
                          out + (2 * window - 1)**2)
            cin = out
    return total + 2 * cin + cin * num_classes + num_classes  # BNGAPBlock: BN + Linear


@pytest.mark.parametrize('key', sorted(PUBLIC_PARAMS))
def test_public_counts_agree_with_the_closed_form(key):
    depth, data = key
    stem, window, classes = SETTINGS[data]
    assert public_param_count(depth, stem, window, classes) == PUBLIC_PARAMS[key]


def classifier(depth, data):
    stem, window, classes = SETTINGS[data]
    feat = 512 * (1 if depth in (18, 34) else 4)
    # Another test may have left a different default scope (mmdet) behind.
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(
            dict(type='ImageClassifier', backbone=dict(type='mmstiff.AlterNet', depth=depth,
                                                       stem=stem, window_size=window),
                 neck=dict(type='GlobalAveragePooling'),
                 head=dict(type='LinearClsHead', num_classes=classes, in_channels=feat)))


def count(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize('key', [(18, 'in1k'), (18, 'cifar100'), (50, 'in1k'), (50, 'cifar100')])
def test_parameter_count_equals_the_public_model(key):
    model = classifier(*key)
    assert count(model) == PUBLIC_PARAMS[key]
    classes = SETTINGS[key[1]][2]
    assert count(model.backbone) == PUBLIC_PARAMS[key] - (model.backbone.feat_dim + 1) * classes


@pytest.mark.slow
@pytest.mark.parametrize('key', [(depth, data) for depth in (34, 101, 152)
                                 for data in ('in1k', 'cifar100')])
def test_parameter_count_equals_the_public_model_deep(key):
    assert count(classifier(*key)) == PUBLIC_PARAMS[key]


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize('blocks, msa, expected', [
    (3, 0, ('conv', 'conv', 'conv')),
    (4, 1, ('conv', 'conv', 'conv', 'msa')),
    (6, 3, ('conv', 'msa') * 3),
    (4, 2, ('conv', 'msa', 'conv', 'msa')),
    (23, 3, ('conv', ) * 17 + ('conv', 'msa') * 3),
])
def test_msa_blocks_alternate_from_the_end_of_a_stage(blocks, msa, expected):
    assert alternating_layout(blocks, msa) == expected


def test_too_many_msa_blocks_are_refused():
    with pytest.raises(ValueError, match='3 MSA blocks in a stage of 4 blocks'):
        alternating_layout(4, 3)


@pytest.mark.parametrize('depth, names', [
    (18, [['conv0', 'conv1'], ['conv0', 'msa1'], ['conv0', 'msa1'], ['conv0', 'msa1']]),
    (50, [['conv0', 'conv1', 'conv2'], ['conv0', 'conv1', 'conv2', 'msa3'],
          ['conv0', 'msa1', 'conv2', 'msa3', 'conv4', 'msa5'], ['conv0', 'msa1', 'conv2', 'msa3']]),
])
def test_blocks_are_named_by_kind_and_position(depth, names):
    net = AlterNet(depth)
    conv, msa = ((PreActBasicBlock, PreActMSABlock) if depth == 18 else
                 (PreActBottleneck, PreActMSABottleneck))
    for i, stage in enumerate(names):
        layer = getattr(net, f'layer{i + 1}')
        assert [name for name, _ in layer.named_children()] == stage
        for name, block in layer.named_children():
            assert type(block) is (msa if name.startswith('msa') else conv)
    heads = [getattr(net, f'layer{i}')[-1].attn.num_heads for i in (2, 3, 4)]
    assert heads == [6, 12, 24]
    assert {b.attn.head_dim for b in net.modules() if isinstance(b, PreActMSABlock)} == {64}


def test_msa_block_widths_follow_the_public_blocks():
    net = AlterNet(50)
    block = net.layer3.msa1  # 1024 channels, 12 heads
    assert (block.conv1.in_channels, block.conv1.out_channels) == (1024, 256)
    assert block.attn.qkv.weight.shape == (3 * 12 * 64, 256, 1, 1)
    assert block.attn.proj.weight.shape == (1024, 12 * 64, 1, 1)
    assert block.attn.relative_position_bias_table.shape == (13, 13)
    assert block.downsample is None
    assert isinstance(block.relu, torch.nn.GELU)
    assert AlterNet(18).layer4.msa1.conv1.out_channels == 512  # basic: no reduction


# ------------------------------------------------------------------ shapes
@pytest.mark.slow
@pytest.mark.parametrize('depth, widths', [(18, (64, 128, 256, 512)), (50, (256, 512, 1024, 2048))])
def test_output_shapes_imagenet_stem(depth, widths):
    net = AlterNet(depth, out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        outs = net(torch.rand(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, c, s, s) for c, s in zip(widths, (56, 28, 14, 7))]
    assert net.feat_dim == widths[-1]


@pytest.mark.slow
@pytest.mark.parametrize('depth, widths', [(18, (64, 128, 256, 512)), (34, (64, 128, 256, 512)),
                                           (50, (256, 512, 1024, 2048))])
def test_output_shapes_cifar_stem(depth, widths):
    net = AlterNet(depth, stem='cifar', window_size=4, out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        outs = net(torch.rand(2, 3, 32, 32))
    assert [tuple(o.shape) for o in outs] == [(2, c, s, s) for c, s in zip(widths, (32, 16, 8, 4))]


@pytest.mark.slow
@pytest.mark.parametrize('depth', [34, 101, 152])
def test_every_depth_builds_and_runs(depth):
    net = AlterNet(depth, out_indices=(1, -1)).eval()
    width = 1 if depth == 34 else 4
    with torch.no_grad():
        outs = net(torch.rand(1, 3, 112, 112))  # 28, 14, 7, 4: the last map is padded
    assert [tuple(o.shape) for o in outs] == [(1, 128 * width, 14, 14), (1, 512 * width, 4, 4)]


def test_out_indices_select_stages_and_only_the_last_is_normalised():
    net = randomise_bn(AlterNet(18, stem='cifar', window_size=4, out_indices=(1, 3))).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        y1, y3 = net(x)
        h = net.layer2(net.layer1(net.conv1(x)))
        last = net.layer4(net.layer3(h))
    torch.testing.assert_close(y1, h)
    torch.testing.assert_close(y3, F.relu(net.final_norm(last)))


# ------------------------------------------------------------------ the ResNet contract
def test_registered_in_mmstiff_and_reachable_from_mmpretrain():
    for registry in (MODELS, MMPRETRAIN_MODELS):
        net = registry.build(dict(type='mmstiff.AlterNet', depth=18, stem='cifar'))
        assert isinstance(net, AlterNet)


@pytest.mark.slow
@pytest.mark.parametrize('frozen', [-1, 0, 2, 4])
def test_frozen_stages(frozen):
    net = AlterNet(18, stem='cifar', window_size=4, frozen_stages=frozen)
    net.train()
    assert all(not p.requires_grad for p in net.conv1.parameters()) == (frozen >= 0)
    for i in range(1, 5):
        layer = getattr(net, f'layer{i}')
        frozen_here = i <= frozen
        assert all(p.requires_grad != frozen_here for p in layer.parameters())
        assert all(m.training != frozen_here for m in layer.modules())
    final_frozen = frozen == 4
    assert all(p.requires_grad != final_frozen for p in net.final_norm.parameters())
    assert net.final_norm.training != final_frozen
    # a training step leaves the frozen weights as they were
    before = {k: v.clone() for k, v in net.state_dict().items()}
    trainable = [p for p in net.parameters() if p.requires_grad]
    out = net(torch.rand(2, 3, 32, 32))[0]
    if trainable:
        out.sum().backward()
        torch.optim.SGD(trainable, lr=0.1).step()
    after = net.state_dict()
    for key, value in before.items():
        if key.startswith(tuple(f'layer{i}.' for i in range(1, frozen + 1))):
            assert torch.equal(after[key], value), key


def test_norm_eval_keeps_every_bn_in_eval_mode():
    net = AlterNet(18, stem='cifar', window_size=4, norm_eval=True, drop_path_rate=0.1)
    net.train()
    bns = [m for m in net.modules() if isinstance(m, _BatchNorm)]
    assert bns and not any(m.training for m in bns)
    assert net.layer2.msa1.drop_path.training  # everything else trains
    stats = [m.running_mean.clone() for m in bns]
    net(torch.rand(2, 3, 32, 32))
    assert all(torch.equal(m.running_mean, s) for m, s in zip(bns, stats))


@pytest.mark.slow
def test_with_cp_gives_the_same_outputs_and_gradients():
    torch.manual_seed(0)
    plain = randomise_bn(AlterNet(18, stem='cifar', window_size=4)).eval()
    ckpt = AlterNet(18, stem='cifar', window_size=4, with_cp=True).eval()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.rand(2, 3, 32, 32)
    outs = []
    for net in (plain, ckpt):
        xi = x.clone().requires_grad_()
        out = net(xi)[0]
        out.square().sum().backward()
        outs.append((out.detach(), xi.grad, net.layer4.msa1.attn.qkv.weight.grad))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)


def test_stochastic_depth_schedule_is_linear_over_all_blocks():
    net = AlterNet(50, drop_path_rate=0.2)
    rates = stochastic_depth_rates(17, 0.2)
    assert rates[0] == 0 and rates[-1] == pytest.approx(0.2)
    index = 0
    for i in range(1, 5):
        for name, block in getattr(net, f'layer{i}').named_children():
            if name.startswith('msa'):
                assert block.drop_path.drop_prob == pytest.approx(0.2 * index / 16), name
            else:
                assert getattr(block, 'drop_path', None) is None, name
            index += 1
    assert index == 17
    assert AlterNet(50).layer4.msa3.drop_path is None  # rate 0: no module


@pytest.mark.parametrize('kwargs, message', [
    (dict(depth=20), 'depth=20'),
    (dict(depth=18, stem='deep'), "stem='deep'"),
    (dict(depth=18, num_msa_blocks=(0, 1, 2, 1)), '2 MSA blocks in a stage of 2 blocks'),
    (dict(depth=18, num_msa_blocks=(0, 1, 1)), 'num_msa_blocks=(0, 1, 1)'),
    (dict(depth=18, num_heads=(3, 0, 12, 24)), 'num_heads=(3, 0, 12, 24)'),
    (dict(depth=18, window_size=0), 'window_size=0'),
    (dict(depth=18, head_dim=2.5), 'head_dim=2.5'),
    (dict(depth=18, out_indices=(4, )), 'out_indices holds 4'),
    (dict(depth=18, frozen_stages=5), 'frozen_stages=5'),
    (dict(depth=18, drop_path_rate=1.0), 'drop_path_rate=1.0'),
    (dict(depth=18, strides=(1, 2, 2)), 'strides=(1, 2, 2)'),
])
def test_bad_settings_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
        AlterNet(**kwargs)


# ------------------------------------------------------------------ the local MSA
def reference_local_attention(layer, x):
    """Window attention computed window by window on the real positions only, with the bias
    read from the table by the positions' offsets (no index buffer, no padding)."""
    b, _, height, width = x.shape
    w, heads, d = layer.window_size, layer.num_heads, layer.head_dim
    qkv = F.conv2d(x, layer.qkv.weight)
    out = torch.zeros(b, heads * d, height, width)
    table = layer.relative_position_bias_table
    for top in range(0, height, w):
        for left in range(0, width, w):
            pos = [(y, x_) for y in range(top, min(top + w, height))
                   for x_ in range(left, min(left + w, width))]
            ys = torch.tensor([p[0] for p in pos])
            xs = torch.tensor([p[1] for p in pos])
            tokens = qkv[:, :, ys, xs].view(b, 3, heads, d, len(pos)).transpose(-1, -2)
            q, k, v = tokens.unbind(1)
            bias = table[(ys[None, :] - ys[:, None]) + w - 1, (xs[None, :] - xs[:, None]) + w - 1]
            attn = (q @ k.transpose(-1, -2) / d**0.5 + bias).softmax(-1)
            out[:, :, ys, xs] = (attn @ v).transpose(-1, -2).reshape(b, heads * d, len(pos))
    return F.conv2d(out, layer.proj.weight, layer.proj.bias)


def attention_layer(window, in_channels=8, out_channels=12):
    torch.manual_seed(0)
    layer = LocalSelfAttention(in_channels, out_channels, num_heads=2, head_dim=4,
                               window_size=window)
    with torch.no_grad():
        layer.relative_position_bias_table.normal_(std=1.0)
    return layer.eval()


@pytest.mark.parametrize(
    'size, window',
    [
        ((8, 8), 4),  # divides: plain windows
        ((10, 7), 4),  # does not divide: padded, padding masked
        ((3, 5), 7),  # smaller than the window: attention over the whole map
        ((7, 7), 7),
    ])
def test_local_attention_equals_per_window_reference(size, window):
    layer = attention_layer(window)
    x = torch.randn(2, 8, *size)
    with torch.no_grad():
        out = layer(x)
        assert out.shape == (2, 12, *size)
        torch.testing.assert_close(out, reference_local_attention(layer, x), rtol=1e-4, atol=1e-5)
        with record_attention_maps(layer) as maps:
            explicit = layer(x)
    torch.testing.assert_close(explicit, out, rtol=1e-4, atol=1e-5)
    pad_h, pad_w = window_padding(*size, window)
    windows = (size[0] + pad_h) // window * ((size[1] + pad_w) // window)
    attn = maps['']
    assert attn.shape == (2 * windows, 2, window**2, window**2)
    torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:-1]))


def test_padding_does_not_change_full_windows():
    """Windows fully inside a non-divisible map see exactly what they see in a divisible one."""
    layer = attention_layer(4)
    x = torch.randn(1, 8, 10, 11)
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x)[..., :8, :8], layer(x[..., :8, :8]), rtol=1e-5, atol=1e-6)


def test_relative_position_index_reads_key_minus_query_offsets():
    w = 3
    index = relative_position_index(w)
    assert index.shape == (9, 9)
    # query (0, 0) -> key (2, 1): offset (+2, +1) -> row 2 + 2, column 1 + 2 of a 5 x 5 table
    assert index[0, 2 * 3 + 1] == (2 + 2) * 5 + (1 + 2)
    assert index[2 * 3 + 1, 0] == (-2 + 2) * 5 + (-1 + 2)
    assert torch.all(index.diagonal() == 2 * 5 + 2)


def test_msa_block_is_a_preactivated_euler_step():
    torch.manual_seed(0)
    block = randomise_bn(PreActMSABottleneck(32, 32, num_heads=2, head_dim=4, window_size=4)).eval()
    x = torch.randn(2, 32, 8, 8)
    a = F.gelu(
        F.batch_norm(x, block.norm1.running_mean, block.norm1.running_var, block.norm1.weight,
                     block.norm1.bias, eps=block.norm1.eps))
    h = F.conv2d(a, block.conv1.weight)
    assert h.shape[1] == 8  # a quarter of the width
    h = F.batch_norm(h, block.norm2.running_mean, block.norm2.running_var, block.norm2.weight,
                     block.norm2.bias, eps=block.norm2.eps)
    with torch.no_grad():
        expected = x + reference_local_attention(block.attn, h)
        torch.testing.assert_close(block(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('kwargs, message', [
    (dict(in_channels=8, num_heads=0), 'num_heads=0'),
    (dict(in_channels=8, window_size=-1), 'window_size=-1'),
    (dict(in_channels=8, proj_drop=1.5), 'proj_drop=1.5'),
])
def test_local_attention_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LocalSelfAttention(**kwargs)


def test_msa_block_refuses_a_stride():
    with pytest.raises(ValueError, match='stride=2'):
        PreActMSABlock(8, 8, stride=2)


def test_non_divisible_maps_through_the_backbone():
    # 28² (Fashion-MNIST) with the CIFAR stem and window 4: stage maps 28, 14, 7, 4
    net = AlterNet(18, stem='cifar', in_channels=1, window_size=4, out_indices=(0, 1, 2, 3))
    outs = net.eval()(torch.rand(2, 1, 28, 28))
    assert [o.shape[-1] for o in outs] == [28, 14, 7, 4]
    assert torch.isfinite(outs[-1]).all()


# ------------------------------------------------------------------ diagnostics, training
def test_trajectory_recorder_sees_conv_and_msa_steps():
    net = AlterNet(18, stem='cifar', window_size=4).eval()
    assert block_kind(net.layer2.msa1) == block_kind(net.layer2.conv0) == 'preact'
    assert block_kind(AlterNet(50).layer4.msa3) == 'preact'
    recorder = TrajectoryRecorder(net)
    expected = [f'layer1.conv{j}' for j in (0, 1)
                ] + [f'layer{i}.{name}' for i in (2, 3, 4) for name in ('conv0', 'msa1')]
    assert recorder.record_names == expected
    with torch.no_grad(), recorder:
        net(torch.rand(2, 3, 32, 32))
    assert list(recorder.outputs) == expected
    for name in ('layer2.msa1', 'layer4.msa1'):
        record = recorder.outputs[name][0]
        assert record.x_t.shape == record.x_next.shape
        # an MSA step with its identity shortcut: x_t is the block input
        assert not torch.equal(record.x_t, record.x_next)
    # the projection conv block of stage 2 reads its projected shortcut as x_t
    record = recorder.outputs['layer2.conv0'][0]
    assert record.x_t.shape == record.x_next.shape == (2, 128, 16, 16)


@pytest.mark.slow
def test_trains_through_tools_train_with_the_stiffness_hook(tiny_data, run_tool, tmp_path,
                                                            repo_root):
    """Two iterations of the Fashion-MNIST config via tools/train.py, with the stiffness hook
    logging the NSI of both kinds of steps."""
    root = tiny_data('mnist')
    config = tmp_path / 'alternet_tiny.py'
    config.write_text(f"""
_base_ = [{repo_root + '/' + FASHION_CONFIG!r}]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root={root!r}))
val_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root={root!r}))
test_dataloader = val_dataloader
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=2, val_interval=2)
param_scheduler = dict(_delete_=True, type='ConstantLR', factor=1.0, by_epoch=False)
default_hooks = dict(logger=dict(type='LoggerHook', interval=1),
                     checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2))
log_processor = dict(by_epoch=False)
custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=1)]
""")
    work = tmp_path / 'work'
    run_tool('tools/train.py', str(config), '--work-dir', str(work))
    assert (work / 'iter_2.pth').is_file()
    scalars = next(work.glob('*/vis_data/scalars.json'))
    lines = [json.loads(line) for line in scalars.read_text().splitlines()]
    keys = set().union(*lines)
    assert 'stiffness/nsi/layer1.conv0' in keys
    assert 'stiffness/nsi/layer2.msa1' in keys and 'stiffness/nsi/layer4.msa1' in keys
    assert 'stiffness/tns/layer3' in keys
    assert [line['step'] for line in lines if 'stiffness/nsi/layer2.msa1' in line] == [1, 2]
