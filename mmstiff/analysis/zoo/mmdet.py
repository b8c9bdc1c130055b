"""The Euler steps of mmdet 3.3's backbones that the three block kinds do not read.

mmdet's ``ResNet`` ``BasicBlock`` / ``Bottleneck`` and their subclasses (ResNeXt, RegNet,
Res2Net's ``Bottle2neck``, ResNeSt, DetectoRS, TridentNet's ``TridentBottleneck``, the blocks
of HRNet and HourglassNet) are read by the ``'conv'`` kind, and ``SwinBlock`` by the
``'transformer'`` kind (:mod:`mmstiff.analysis.zoo.kinds`); this table adds the rest. Pure
data: nothing here imports mmdet.
"""
from ..step_specs import BlockSpec, Step

SPECS = [
    BlockSpec(
        'mmdet.models.layers.inverted_residual.InvertedResidual', 'MobileNetV2 / EfficientNet',
        residual='with_res_shortcut', steps=(Step(branch='input:drop_path'), ),
        note='x + linear_conv(se(depthwise_conv(expand_conv(x)))) where the stride is 1 and the '
        'channels agree; the SE gates the expanded features before the projection, not the '
        'step: Δ = 1'),
    BlockSpec(
        'mmdet.models.backbones.efficientnet.EdgeResidual', 'EfficientNet-EdgeTPU',
        residual='with_residual', steps=(Step(branch='input:drop_path'), ),
        note='x + conv2(se(conv1(x))) (a fused expand conv, then the projection) where the '
        'stride is 1, the channels agree and the stage keeps its residual; Δ = 1'),
    BlockSpec(
        'mmdet.models.backbones.darknet.ResBlock', 'Darknet', steps=(Step(branch='output:conv2'), ),
        note='x + conv2(conv1(x)) (1x1 halving, 3x3 restoring; no activation after the add); '
        'Δ = 1'),
    BlockSpec(
        'mmdet.models.layers.csp_layer.DarknetBottleneck', 'CSPDarknet', residual='add_identity',
        steps=(Step(branch='output:conv2'), ),
        note='x + conv2(conv1(x)) inside a CSP stage, where the stage adds its identity; Δ = 1'),
    BlockSpec(
        'mmdet.models.layers.csp_layer.CSPNeXtBlock', 'CSPNeXt', residual='add_identity',
        steps=(Step(branch='output:conv2'), ),
        note='x + conv2(conv1(x)) (3x3, then a depthwise-separable large kernel) where the stage '
        'adds its identity; Δ = 1'),
    BlockSpec(
        'mmdet.models.backbones.pvt.PVTEncoderLayer', 'PVT / PVTv2',
        steps=(Step('msa', 'in', 'input:norm2', branch='input:attn.dropout_layer'),
               Step('mlp', 'input:norm2', 'out', branch='input:ffn.dropout_layer')),
        note='pre-norm: x + SRA(norm1(x)) (spatial-reduction attention), then '
        'x + FFN(norm2(x)) (MixFFN, with a depthwise conv in PVTv2); Δ = 1'),
]

# backbones (registry scope + registered name) that have no residual step, with the reason
NON_RESIDUAL = {
    'mmdet.SSDVGG':
    "mmcv's VGG (a plain stack of conv / ReLU / max-pool layers) with SSD's dilated conv6 and "
    '1x1 conv7 appended: no layer adds its input',
}

__all__ = ['SPECS', 'NON_RESIDUAL']
