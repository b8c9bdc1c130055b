"""Block specs: the tap language, blocks declared from a config, and the errors of a block the
spec does not describe."""
import argparse

import pytest
import torch
import torch.nn as nn

from mmstiff.analysis import TrajectoryRecorder, find_blocks, neural_stiffness_index, stage_of
from mmstiff.analysis.blocks import block_types_of
from mmstiff.analysis.step_specs import BlockSpec, Tap, parse_scale, parse_tap
from mmstiff.apis.block_types_arg import block_types_for


class Scaled(nn.Module):
    """``x + γ ⊙ conv(x)``, γ a per-channel parameter."""

    def __init__(self, channels=3, adds=True):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.gamma = nn.Parameter(torch.tensor([0.5, 2.0, 0.25][:channels]))
        self.adds = adds

    def forward(self, x):
        return x + self.gamma.view(1, -1, 1, 1) * self.conv(x)


class TwoStep(nn.Module):
    """``y = x + a ⊙ mix(norm1 x)``, then ``y + b ⊙ mlp(norm2 y)`` on ``(B, N, C)`` tokens."""

    def __init__(self, dims=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dims), nn.LayerNorm(dims)
        self.mix, self.mlp = nn.Linear(dims, dims), nn.Linear(dims, dims)
        self.a = nn.Parameter(torch.linspace(0.1, 0.4, dims))
        self.b = nn.Parameter(torch.linspace(1.0, 2.0, dims))

    def forward(self, x):
        x = x + self.a * self.mix(self.norm1(x))
        return x + self.b * self.mlp(self.norm2(x))


TWO_STEPS = dict(steps=[
    dict(name='msa', end='input:norm2', scale='param:a:channels_last'),
    dict(name='mlp', start='input:norm2', scale='param:b:channels_last'),
])


def test_taps_and_scales_parse_and_bad_ones_name_themselves():
    assert parse_tap('in') == Tap('in')
    assert parse_tap('input:attn.norm#2') == Tap('input', 'attn.norm', 2)
    assert parse_tap('kwarg:ffn:identity') == Tap('kwarg', 'ffn', 1, 'identity')
    assert parse_scale('param:gamma:channels_first').layout == 'channels_first'
    assert parse_scale(None) is None
    for bad in ('middle', 'input:', 'input:norm#0', 'kwarg:ffn'):
        with pytest.raises(ValueError, match=f'tap={bad!r}'):
            parse_tap(bad)
    with pytest.raises(ValueError, match="scale='param:gamma'"):
        parse_scale('param:gamma')
    with pytest.raises(ValueError,
                       match="block_types\\['B'\\]: the spec of B, step 'block': tap='nowhere'"):
        block_types_of(dict(B=dict(steps=[dict(start='nowhere')])))
    with pytest.raises(ValueError, match="block_types\\['B'\\]: kind='residual'"):
        block_types_of(dict(B='residual'))
    with pytest.raises(ValueError, match='names its steps'):
        block_types_of(dict(B=dict(steps=[dict(name='a'), dict(name='a')])))


def test_a_declared_layer_scale_is_the_step_size_of_the_nsi():
    torch.manual_seed(0)
    net = nn.Sequential(Scaled(), nn.ReLU(), Scaled())
    x = torch.randn(2, 3, 5, 5)
    declared = dict(Scaled=dict(steps=[dict(scale='param:gamma:channels_first')]))
    recorder = TrajectoryRecorder(net, block_types=declared)
    with torch.no_grad(), recorder:
        net(x)
    record = recorder.outputs['0'][0]
    assert torch.equal(record.step.reshape(-1), net[0].gamma.detach())
    with torch.no_grad():
        slope = net[0].conv(x)  # f, by hand
    expected = slope.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)
    assert torch.allclose(
        neural_stiffness_index(record.x_t, record.x_next, record.step), expected, rtol=1e-5)
    assert list(recorder.outputs) == ['0', '2']


def test_a_two_step_block_records_each_step_and_the_whole_move():
    torch.manual_seed(0)
    net = nn.Sequential(TwoStep(), TwoStep())
    x = torch.randn(2, 6, 4)
    recorder = TrajectoryRecorder(net, level='both', block_types=dict(TwoStep=TWO_STEPS))
    assert recorder.record_names == ['0.msa', '0.mlp', '0', '1.msa', '1.mlp', '1']
    with torch.no_grad(), recorder:
        net(x)
        block = net[0]
        mid = x + block.a * block.mix(block.norm1(x))
        out = mid + block.b * block.mlp(block.norm2(mid))
    msa, mlp, whole = (recorder.outputs[n][0] for n in ('0.msa', '0.mlp', '0'))
    assert torch.allclose(msa.x_t, x) and torch.allclose(msa.x_next, mid)
    assert torch.allclose(mlp.x_t, mid) and torch.allclose(mlp.x_next, out)
    assert torch.equal(msa.step.reshape(-1), block.a.detach()) and mlp.kind == 'mlp'
    assert whole.step is None and torch.allclose(whole.x_next, out)
    assert stage_of('stages.0.3.mlp') == 'stages.0' and stage_of('stages.0.3') == 'stages.0'


def test_instances_that_do_not_add_are_not_blocks():
    net = nn.Sequential(Scaled(adds=True), Scaled(adds=False))
    spec = BlockSpec('Scaled', 'toy', residual='adds')
    assert [b.name for b in find_blocks(net, block_types=dict(Scaled=spec))] == ['0']


def test_a_spec_naming_a_missing_submodule_stops_the_recorder_when_it_is_built():
    net = nn.Sequential(TwoStep())
    declared = dict(
        TwoStep=dict(
            steps=[dict(name='msa', end='input:norm3'),
                   dict(name='mlp', start='input:norm3')]))
    with pytest.raises(ValueError, match="block 0 \\(TwoStep\\) has no submodule 'norm3'"):
        TrajectoryRecorder(net, block_types=declared)


def test_a_tap_the_pass_does_not_reach_or_a_step_of_two_shapes_stops_the_record():
    net = nn.Sequential(TwoStep())
    declared = dict(
        TwoStep=dict(
            steps=[dict(name='msa', end='input:norm2#2'),
                   dict(name='mlp', start='input:norm2#2')]))
    recorder = TrajectoryRecorder(net, block_types=declared)
    with torch.no_grad(), recorder, pytest.raises(ValueError, match="'input:norm2#2' was not "
                                                  'reached'):
        net(torch.randn(1, 3, 4))

    class Project(nn.Module):

        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 2)

        def forward(self, x):
            return x + self.proj(x).sum(-1, keepdim=True)

    recorder = TrajectoryRecorder(
        nn.Sequential(Project()), block_types=dict(Project=dict(steps=[dict(end='output:proj')])))
    with torch.no_grad(), recorder, pytest.raises(ValueError, match='differ in shape'):
        recorder.model(torch.randn(1, 3, 4))


def test_a_model_with_no_known_block_is_told_its_classes_and_the_config_line():
    net = nn.Sequential(*[nn.Sequential(nn.Linear(3, 3), nn.ReLU()) for _ in range(2)], Scaled(),
                        Scaled())
    with pytest.raises(ValueError) as error:
        TrajectoryRecorder(net)
    message = str(error.value)
    assert 'Scaled (2)' in message
    assert "block_types=dict(Scaled='conv')" in message


def test_a_non_residual_backbone_says_why():
    pytest.importorskip('mmpretrain')
    from mmpretrain.models.backbones import VGG

    from mmstiff.analysis.zoo import non_residual
    with pytest.raises(ValueError, match='VGG has no residual step to record') as error:
        TrajectoryRecorder(VGG(depth=11))
    assert non_residual()['mmpretrain.VGG'] in str(error.value)


def test_tools_take_block_types_from_the_command_line_and_the_config_hooks():
    cfg = dict(custom_hooks=[
        dict(type='mmstiff.StiffnessHook', block_types=dict(Scaled='preact')),
        dict(type='EMAHook', block_types=dict(Ignored='conv')),
    ])
    args = argparse.Namespace(block_types=['TwoStep=transformer'])
    assert block_types_for(args, cfg) == dict(Scaled='preact', TwoStep='transformer')
    assert block_types_for(argparse.Namespace(block_types=None), dict()) is None
    with pytest.raises(ValueError, match="--block-types holds 'Scaled'"):
        block_types_for(argparse.Namespace(block_types=['Scaled']), None)


def test_hooks_check_their_block_types_when_built():
    from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
    for hook in (StiffnessHook, FrequencyHook):
        with pytest.raises(ValueError, match="block_types\\['X'\\]"):
            hook(block_types=dict(X='sideways'))


def test_layer_scale_switched_off_reads_as_a_unit_step():
    torch.manual_seed(0)
    net = nn.Sequential(Scaled())
    net[0].gamma = None
    net[0].forward = lambda x: x + net[0].conv(x)
    declared = dict(Scaled=dict(steps=[dict(scale='param:gamma:channels_first')]))
    recorder = TrajectoryRecorder(net, block_types=declared)
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad(), recorder:
        net(x)
    assert recorder.outputs['0'][0].step is None
    with pytest.raises(ValueError, match="has no attribute 'beta'"):
        TrajectoryRecorder(
            net, block_types=dict(Scaled=dict(steps=[dict(scale='param:beta:channels_first')])))
