"""Feature-map variance on hand-computed tensors and along a recorded trajectory."""
import functools

import pytest
import torch

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.analysis.feature_variance import (feature_map_variance, step_variance,
                                               variance_trajectory)


def test_maps_by_hand():
    # sample 0: channel 0 holds 1, 2, 3, 4 (mean 2.5, unbiased variance 5/3), channel 1 is
    # constant (0); sample 1: channel 0 holds 0, 0, 0, 8 (variance 16), channel 1 holds
    # -1, 1, -1, 1 (variance 4/3)
    x = torch.tensor([[[[1., 2.], [3., 4.]], [[7., 7.], [7., 7.]]],
                      [[[0., 0.], [0., 8.]], [[-1., 1.], [-1., 1.]]]])
    variance = feature_map_variance(x)
    assert variance.dtype == torch.float64 and variance.shape == (2, )
    assert variance.tolist() == pytest.approx([(5 / 3 + 0) / 2, (16 + 4 / 3) / 2])


def test_tokens_by_hand_without_the_class_token():
    # tokens (B=1, N=3, C=2); the first token is a class token, left out
    x = torch.tensor([[[100., -100.], [1., 2.], [3., 2.]]])
    # channel 0: 1, 3 -> variance 2; channel 1: 2, 2 -> 0
    assert feature_map_variance(x, num_extra_tokens=1).tolist() == pytest.approx([1.0])
    # with the class token: channel 0: 100, 1, 3; channel 1: -100, 2, 2
    c0 = torch.tensor([100., 1., 3.]).var()
    c1 = torch.tensor([-100., 2., 2.]).var()
    assert float(feature_map_variance(x)) == pytest.approx(float(c0 + c1) / 2)
    # the same numbers as maps: positions are positions, whatever the layout
    maps = x[:, 1:].transpose(1, 2).reshape(1, 2, 1, 2)
    assert torch.allclose(
        feature_map_variance(maps, layout='nchw'), feature_map_variance(x, num_extra_tokens=1))


def test_bad_input_fails_naming_it():
    with pytest.raises(ValueError, match='num_extra_tokens=3 leaves no token'):
        feature_map_variance(torch.ones(1, 3, 2), num_extra_tokens=3)
    with pytest.raises(ValueError, match='expected .B, C, H, W. feature maps or'):
        feature_map_variance(torch.ones(2, 3))
    with pytest.raises(ValueError, match="layout='nhwc'"):
        feature_map_variance(torch.ones(1, 2, 2, 2), layout='nhwc')
    with pytest.raises(ValueError, match='num_extra_tokens=-1'):
        feature_map_variance(torch.ones(1, 3, 2), num_extra_tokens=-1)


def _cifar_resnet():
    from mmpretrain.models.backbones import ResNet_CIFAR
    torch.manual_seed(0)
    net = ResNet_CIFAR(depth=18, stem_channels=4, base_channels=4, zero_init_residual=False)
    net.eval()  # mmpretrain's ResNet.train returns None
    return net


@pytest.mark.slow
def test_trajectory_of_a_resnet_with_its_subsampling_states():
    net = _cifar_resnet()
    images = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    recorder = TrajectoryRecorder(net, reduce=step_variance)
    with torch.no_grad(), recorder:
        net(images[:2])
        net(images[2:])  # a second pass: its samples are appended
    states = variance_trajectory(recorder.outputs)
    blocks = [f'layer{i}.{j}' for i in range(1, 5) for j in range(2)]
    expected_names = ['input']
    for name in blocks:
        if name != 'layer1.0' and name.endswith('.0'):
            expected_names.append(name + '.shortcut')  # the projected state of each stage
        expected_names.append(name)
    assert list(states) == expected_names
    assert states['layer2.0.shortcut'].kind == 'shortcut'
    assert states['input'].kind == 'input' and states['layer3.1'].kind == 'block'

    # recompute the states block by block (post-activation blocks: x_t = relu(P x))
    with torch.no_grad():
        x = net.relu(net.norm1(net.conv1(images)))
        expected = {'input': feature_map_variance(x)}
        for name in blocks:
            block = net.get_submodule(name)
            if block.downsample is not None:
                expected[name + '.shortcut'] = feature_map_variance(torch.relu(block.downsample(x)))
            x = block(x)
            expected[name] = feature_map_variance(x)
    for name, state in states.items():
        assert state.variance.shape == (3, )
        assert torch.allclose(state.variance, expected[name], rtol=1e-5), name


def test_token_trajectory_drops_the_class_token():
    from mmpretrain.models.backbones import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(
        arch=dict(embed_dims=8, num_layers=2, num_heads=2, feedforward_channels=16), img_size=16,
        patch_size=4)
    vit.eval()
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    reduce = functools.partial(step_variance, num_extra_tokens=vit.num_extra_tokens)
    recorder = TrajectoryRecorder(vit, reduce=reduce, level='branch')
    with torch.no_grad(), recorder:
        vit(images)
    states = variance_trajectory(recorder.outputs)
    assert list(states) == ['input', 'layers.0.msa', 'layers.0.mlp', 'layers.1.msa', 'layers.1.mlp']
    assert [s.kind for s in states.values()] == ['input', 'msa', 'mlp', 'msa', 'mlp']
    # the state after layers.0's MLP step is that layer's output, class token left out
    outputs = []
    handle = vit.layers[0].register_forward_hook(lambda m, a, out: outputs.append(out))
    with torch.no_grad():
        vit(images)
    handle.remove()
    assert torch.allclose(states['layers.0.mlp'].variance, feature_map_variance(outputs[0][:, 1:]),
                          rtol=1e-5)
    assert not torch.allclose(states['layers.0.mlp'].variance, feature_map_variance(outputs[0]),
                              rtol=1e-5)
