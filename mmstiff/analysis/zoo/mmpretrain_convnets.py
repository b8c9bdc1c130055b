"""The Euler steps of mmpretrain's convolutional backbones (the ResNet family aside).

The ResNet family (``ResNet``, ``ResNetV1c``, ``ResNetV1d``, ``ResNet_CIFAR``, ``ResNeXt``,
``SEResNet``, ``SEResNeXt``, ``ResNeSt``, ``Res2Net``, ``RegNet``, ``SparseResNet``, ``HRNet``,
``CSPResNet``, ``CSPResNeXt``) builds its blocks from subclasses of mmpretrain's ``BasicBlock`` /
``Bottleneck`` that keep the parent's shape ``act(shortcut(x) + Δ ⊙ branch(x))``; the
``'conv'`` kind reads them by class, so they have no spec here. What the subclasses change sits
inside the branch: ResNeSt's split attention (a softmax over the radix splits of one conv, not
a gate on the branch output), Res2Net's hierarchical sums of the channel splits (additions of
features of one branch, not of the block input), RegNet's grouped widths, SparseResNet's masked
convolutions and norms. SEResNet / SEResNeXt gate the branch output right before the add, so
their SE gate is Δ, as the ``'conv'`` kind reads it.

Pure data: nothing here imports a model.
"""
from ..step_specs import BlockSpec, Step

SPECS = [
    BlockSpec(
        'mmpretrain.models.backbones.mobilenet_v2.InvertedResidual', 'MobileNetV2',
        steps=(Step(branch='output:conv', state='input:conv'), ), residual='use_res_connect',
        note='x + conv(x) where stride is 1 and the width is kept (use_res_connect); the other '
        'blocks change the shape and are no step'),
    BlockSpec(
        'mmpretrain.models.utils.inverted_residual.InvertedResidual', 'MobileNetV3 / EfficientNet',
        steps=(Step(branch='input:drop_path', state='input:expand_conv|input:depthwise_conv'), ),
        residual='with_res_shortcut',
        note='x + linear_conv(se(depthwise_conv(expand_conv(x)))) where stride is 1 and the '
        'width is kept (with_res_shortcut); the SE gate multiplies the expanded features before '
        'the projection, not the step, so Δ = 1'),
    BlockSpec(
        'mmpretrain.models.backbones.efficientnet.EdgeResidual', 'EfficientNet / EfficientNetV2',
        steps=(Step(branch='input:drop_path', state='input:conv1'), ), residual='with_residual',
        note='fused MBConv: x + conv2(se(conv1(x))) where with_residual (stride 1, width kept); '
        'an SE gate, where configured, gates the expansion before the projection, so Δ = 1'),
    BlockSpec(
        'mmpretrain.models.backbones.efficientnet_v2.EnhancedConvModule', 'EfficientNetV2',
        steps=(Step(branch='input:drop_path'), ), residual='has_skip',
        note='x + act(norm(conv(x))) where has_skip (stride 1, width kept); the other '
        'EnhancedConvModules are plain convolutions'),
    BlockSpec(
        'mmpretrain.models.backbones.cspnet.DarknetBottleneck', 'CSPDarkNet / CSPNet',
        steps=(Step(branch='output:drop_path'), ), residual='add_identity',
        note='x + conv2(conv1(x)) inside the cross-stage half of a CSP stage (add_identity); '
        'the stage itself concatenates and is no step'),
    BlockSpec(
        'mmpretrain.models.backbones.shufflenet_v1.ShuffleUnit', 'ShuffleNetV1',
        steps=(Step('block', 'in', 'input:act',
                    branch='output:g_conv_1x1_expand'), ), residual=lambda m: m.combine == 'add',
        note="x + branch(x) in the stride-1 units (combine='add'), read up to the input of the "
        'activation that follows the add (the unit outputs its ReLU); the stride-2 units '
        'concatenate and are no step'),
]

# backbones (registry scope + registered name) that have no residual step, with the reason
NON_RESIDUAL = {
    'mmpretrain.LeNet5':
    'a plain feed-forward stack of convolutions and linear layers: no layer adds its input',
    'mmpretrain.AlexNet':
    'a plain feed-forward stack of convolutions and pools: no layer adds its input',
    'mmpretrain.VGG':
    'a plain feed-forward stack of convolutions: no block adds its input',
    'mmpretrain.DenseNet':
    'each dense layer concatenates its features to the state, which grows by growth_rate channels '
    'per layer: no layer adds its input, and no two states have the same shape',
    'mmpretrain.InceptionV3':
    'each Inception block concatenates parallel convolution branches into a new state of another '
    'width: no block adds its input',
    'mmpretrain.ShuffleNetV2':
    'a unit concatenates the untouched half of its input with the branch output on the other half '
    'and shuffles the channels: the branch replaces its half instead of adding to it',
    'mmpretrain.RepVGG':
    'a training-mode block is act(BN(x) + conv3x3(x) + conv1x1(x)): its "identity" branch is a '
    'batch norm of x (a learned per-channel affine map, not x), under the activation (and the SE '
    'gate of the -se archs); a deploy-mode block is one 3x3 convolution',
    'mmpretrain.MobileOne':
    'a training-mode block is act(se(BN(x) + sum of conv-BN branches)): its "identity" branch is '
    'a batch norm of x (a learned per-channel affine map, not x); a deploy-mode block is one '
    'convolution',
}
