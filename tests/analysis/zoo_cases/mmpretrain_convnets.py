"""Registry-walk cases of mmpretrain's convolutional backbones, and their steps recomputed.

``CASES`` builds the smallest instance of each backbone (two stages where the arch allows) at a
small input (``setup``, where given, is called before the pass). ``BRANCHES`` recomputes, from
a block's own submodules and in the order its upstream forward runs them, the step size Δ and
the increment f of each step with a spec, in eval mode (drop path is the identity):
``x_t + Δ ⊙ f`` is the state after the step. The ResNet family's blocks (the ``'conv'`` kind,
post-activation: ``act(shortcut + Δ ⊙ branch)``) have no entry: their states are checked
against the blocks' inputs and outputs.
"""
import torch
from mmpretrain.models.backbones import cspnet as _cspnet


def _all_pixels_active():
    """SparseResNet's convolutions and norms read the active-pixel mask that SparK sets before
    each forward pass from a class attribute (a (B, 1, h, w) map): mark every pixel of a
    one-image batch active, so that the sparse pass is the dense one."""
    from mmpretrain.models.utils.sparse_modules import SparseHelper
    SparseHelper._cur_active = torch.ones(1, 1, 1, 1, dtype=torch.bool)


_SMALL = (1, 3, 32, 32)
_TWO_STAGES = dict(num_stages=2, strides=(1, 2), dilations=(1, 1), out_indices=(1, ))
_HRNET_TINY = {
    f'stage{i + 1}':
    dict(num_modules=1, num_branches=i + 1, block='BOTTLENECK' if i == 0 else 'BASIC',
         num_blocks=(1, ) * (i + 1), num_channels=(16, ) if i == 0 else (8, 16, 32, 64)[:i + 1])
    for i in range(4)
}

CASES = {
    'mmpretrain.RegNet':
    dict(cfg=dict(arch='regnetx_400mf'), input=_SMALL),
    'mmpretrain.ResNet':
    dict(cfg=dict(depth=18), input=_SMALL),
    'mmpretrain.ResNetV1c':
    dict(cfg=dict(depth=18, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.ResNetV1d':
    dict(cfg=dict(depth=18, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.ResNet_CIFAR':
    dict(cfg=dict(depth=18, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.ResNeXt':
    dict(cfg=dict(depth=50, groups=32, width_per_group=4, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.ResNeSt':
    dict(cfg=dict(depth=50, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.SEResNet':
    dict(cfg=dict(depth=50, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.SEResNeXt':
    dict(cfg=dict(depth=50, groups=32, width_per_group=4, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.Res2Net':
    dict(cfg=dict(depth=50, **_TWO_STAGES), input=_SMALL),
    'mmpretrain.SparseResNet':
    dict(
        cfg=dict(depth=18, norm_cfg=dict(type='BN'), **_TWO_STAGES), input=_SMALL,
        setup=_all_pixels_active),
    'mmpretrain.HRNet':
    dict(cfg=dict(extra=_HRNET_TINY), input=_SMALL),
    'mmpretrain.MobileNetV2':
    dict(cfg=dict(widen_factor=0.35), input=_SMALL),
    'mmpretrain.MobileNetV3':
    dict(cfg=dict(arch='small'), input=_SMALL),
    'mmpretrain.EfficientNet':
    dict(cfg=dict(arch='b0'), input=_SMALL),
    # 's' is the smallest arch whose first stage has the skip convolutions (b0's has none)
    'mmpretrain.EfficientNetV2':
    dict(cfg=dict(arch='s'), input=_SMALL),
    'mmpretrain.CSPDarkNet':
    dict(cfg=dict(depth=53), input=_SMALL),
    'mmpretrain.CSPResNet':
    dict(cfg=dict(depth=50), input=_SMALL),
    'mmpretrain.CSPResNeXt':
    dict(cfg=dict(depth=50), input=_SMALL),
    # the abstract base of the three above: exported, but not registered, so the registry
    # cannot build it; its blocks are those of CSPDarkNet, CSPResNet and CSPResNeXt
    # the base class the CSP backbones build on, not registered: built from the class with a
    # one-convolution stem and two Darknet stages
    'mmpretrain.CSPNet':
    dict(
        cfg=dict(
            arch=dict(block_fn=_cspnet.DarknetBottleneck, in_channels=(8, 16),
                      out_channels=(16, 32), num_blocks=(1, 2), expand_ratio=(2, 1),
                      bottle_ratio=(2, 1), has_downsampler=True, down_growth=True),
            stem_fn=lambda channels: torch.nn.Conv2d(channels, 8, 3, padding=1), out_indices=(1, )),
        input=(2, 3, 32, 32)),
    'mmpretrain.ShuffleNetV1':
    dict(cfg=dict(groups=3, widen_factor=0.5), input=_SMALL),
    # the non-residual backbones (NON_RESIDUAL), built to check that no block is found
    'mmpretrain.RepVGG':
    dict(cfg=dict(arch='A0'), input=_SMALL, non_residual_check=True),
    'mmpretrain.MobileOne':
    dict(cfg=dict(arch='s0'), input=_SMALL, non_residual_check=True),
    'mmpretrain.DenseNet':
    dict(
        cfg=dict(arch=dict(growth_rate=8, depths=[2, 2], init_channels=16)), input=_SMALL,
        non_residual_check=True),
    'mmpretrain.InceptionV3':
    dict(cfg=dict(num_classes=10), input=(1, 3, 75, 75), non_residual_check=True),
    'mmpretrain.ShuffleNetV2':
    dict(cfg=dict(widen_factor=0.5), input=_SMALL, non_residual_check=True),
    'mmpretrain.LeNet5':
    dict(cfg=dict(), input=(1, 1, 32, 32), non_residual_check=True),
    'mmpretrain.AlexNet':
    dict(cfg=dict(), input=(1, 3, 64, 64), non_residual_check=True),
    'mmpretrain.VGG':
    dict(cfg=dict(depth=11), input=_SMALL, non_residual_check=True),
}


# ----------------------------------------------------------------- blocks that add last
def _mobilenet_v2(b, x, a, k):
    return None, b.conv(x)


def _inverted_residual(b, x, a, k):
    out = b.expand_conv(x) if b.with_expand_conv else x
    out = b.depthwise_conv(out)
    if b.with_se:
        out = b.se(out)  # gates the expanded features: inside f, not Δ
    return None, b.linear_conv(out)


def _edge_residual(b, x, a, k):
    out = b.conv1(x)
    if b.with_se:
        out = b.se(out)
    return None, b.conv2(out)


def _enhanced_conv(b, x, a, k):
    from mmcv.cnn import ConvModule
    return None, ConvModule.forward(b, x)


def _darknet(b, x, a, k):
    return None, b.conv2(b.conv1(x))


def _shuffle_unit(b, x, a, k):
    from mmpretrain.models.utils import channel_shuffle
    out = b.depthwise_conv3x3_bn(b.g_conv_1x1_compress(x))
    if b.groups > 1:
        out = channel_shuffle(out, b.groups)
    return None, b.g_conv_1x1_expand(out)


_R = 'mmpretrain.models.backbones.'
BRANCHES = {
    _R + 'mobilenet_v2.InvertedResidual': dict(block=_mobilenet_v2),
    'mmpretrain.models.utils.inverted_residual.InvertedResidual': dict(block=_inverted_residual),
    _R + 'efficientnet.EdgeResidual': dict(block=_edge_residual),
    _R + 'efficientnet_v2.EnhancedConvModule': dict(block=_enhanced_conv),
    _R + 'cspnet.DarknetBottleneck': dict(block=_darknet),
    _R + 'shufflenet_v1.ShuffleUnit': dict(block=_shuffle_unit),
}
