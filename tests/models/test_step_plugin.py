"""StepPlugin: an SE step-size adaptor in mmdet ResNet's own ``plugins`` (docs/methods.md §3)."""
import pytest
import torch
from mmcv.cnn import build_plugin_layer

pytestmark = pytest.mark.det
pytest.importorskip('mmdet.models', reason='needs mmdet: pip install "mmstiff[det]"')

from mmdet.models.backbones import ResNet as DetResNet

from mmstiff.models.backbones import DetStepResNet
from mmstiff.models.plugins import StepPlugin
from mmstiff.models.steps import SEAdaptor

STAGES = (False, True, True, True)


def test_plugin_computes_step_times_residual():
    torch.manual_seed(0)
    name, plugin = build_plugin_layer(dict(type='mmstiff.StepPlugin'), in_channels=32)
    assert name == 'step_plugin' and isinstance(plugin.step_adaptor, SEAdaptor)
    with torch.no_grad():
        for param in plugin.parameters():
            param.normal_(0, 0.3)
    f = torch.randn(2, 32, 4, 4)
    adaptor = plugin.step_adaptor
    w1, b1 = adaptor.conv1.conv.weight.flatten(1), adaptor.conv1.conv.bias
    w2, b2 = adaptor.conv2.conv.weight.flatten(1), adaptor.conv2.conv.bias
    step = torch.sigmoid(torch.relu(f.mean((2, 3)) @ w1.T + b1) @ w2.T + b2)
    torch.testing.assert_close(plugin(f), step[:, :, None, None] * f)


def test_plugin_inside_mmdet_resnet_equals_adaptor_inside_step_block():
    torch.manual_seed(1)
    plugins = [dict(cfg=dict(type='mmstiff.StepPlugin'), position='after_conv3', stages=STAGES)]
    with_plugin = DetResNet(50, plugins=plugins, norm_eval=False)
    assert not hasattr(with_plugin.layer1[0], 'step_plugin')
    assert isinstance(with_plugin.layer2[0].step_plugin, StepPlugin)
    with torch.no_grad():
        for name, param in with_plugin.named_parameters():
            if 'step_plugin' in name:
                param.normal_(0, 0.1)
    in_block = DetStepResNet(50, adaptor=dict(type='mmstiff.SEAdaptor'), adaptor_stages=STAGES,
                             norm_eval=False)
    in_block.load_state_dict({
        k.replace('.step_plugin.step_adaptor.', '.step_adaptor.'): v
        for k, v in with_plugin.state_dict().items()
    })
    # Δ ⊙ f + x_t is one fused addcmul in the block, two roundings through the plugin; in train
    # mode batch statistics (8 values per channel in layer4 at 64x64) amplify that last bit
    for mode, size, tol in ((False, 32, 1e-5), (True, 64, 1e-3)):
        with_plugin.train(mode), in_block.train(mode)
        x = torch.randn(2, 3, size, size)
        for ref, out in zip(with_plugin(x), in_block(x)):
            torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


def test_plugin_refuses_adaptors_that_need_the_state():
    with pytest.raises(ValueError, match='DetStepResNet'):
        StepPlugin(64, adaptor=dict(type='mmstiff.StepNetAdaptor'))
    with pytest.raises(ValueError, match="'NoSuchStep'"):
        StepPlugin(64, adaptor=dict(type='NoSuchStep'))
