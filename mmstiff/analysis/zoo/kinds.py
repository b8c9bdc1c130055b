"""The upstream blocks read by a built-in kind (:data:`mmstiff.analysis.blocks.BLOCK_KINDS`), with
where their steps are formed, for writing.

mmpretrain's and mmdet's ResNet ``BasicBlock`` / ``Bottleneck`` (and every subclass: ResNeXt,
SEResNet, ResNeSt, Res2Net, RegNet, HRNet, ...) are read by the ``'conv'`` kind: x_t is the
(projected) shortcut, Δ the block's step-size sources. The Swin layers are read by the
``'transformer'`` kind: two steps, the state between them the input of ``norm2``. Pure data.
"""
from ..step_specs import BlockSpec, Step

_PB = 'mmpretrain.models.backbones.'
#: x_t where the block projects its shortcut, else the input of its first convolution (inside
#: the function a with_cp block checkpoints)
_SHORTCUT = 'output:downsample|input:conv1'

#: pre-norm attention then MLP, each f before its drop path
_SWIN_STEPS = (Step('msa', 'in', 'input:norm2', branch='input:attn.drop', state='input:norm1'),
               Step('mlp', 'input:norm2', 'out', branch='input:ffn.dropout_layer'))

SPECS = [
    BlockSpec(_PB + 'resnet.BasicBlock', 'ResNet', kind='conv',
              steps=(Step(branch='input:drop_path', state=_SHORTCUT), ),
              note='relu(shortcut(x) + drop_path(norm2(conv2(...)))): f is the input of drop_path'),
    BlockSpec(_PB + 'resnet.Bottleneck', 'ResNet', kind='conv',
              steps=(Step(branch='input:drop_path', state=_SHORTCUT), ),
              note='relu(shortcut(x) + drop_path(norm3(conv3(...)))): f is the input of drop_path'),
    BlockSpec(
        _PB + 'seresnet.SEBottleneck', 'SEResNet', kind='conv',
        steps=(Step(branch='output:se_layer', state=_SHORTCUT), ),
        note='relu(shortcut(x) + se(norm3(...))): f is the SE layer\'s output, so an adaptor\'s '
        'Δ multiplies the SE gate; the shortcut is projected after f is formed'),
    BlockSpec(
        _PB + 'resnest.Bottleneck', 'ResNeSt', kind='conv',
        steps=(Step(branch='output:norm3', state=_SHORTCUT), ),
        note='split-attention bottleneck, relu(shortcut(x) + norm3(conv3(...))); no drop path'),
    BlockSpec(_PB + 'res2net.Bottle2neck', 'Res2Net', kind='conv',
              steps=(Step(branch='output:norm3', state=_SHORTCUT), ),
              note='hierarchical bottleneck, relu(shortcut(x) + norm3(conv3(...))); no drop path'),
    BlockSpec(
        'mmdet.models.backbones.resnet.BasicBlock', 'ResNet (mmdet)', kind='conv',
        steps=(Step(branch='output:norm2', state=_SHORTCUT), ),
        note='relu(shortcut(x) + norm2(conv2(...))): f is the output of norm2; the shortcut is '
        'projected after f is formed, so a projecting block writes its step there'),
    BlockSpec(
        'mmdet.models.backbones.resnet.Bottleneck', 'ResNet (mmdet)', kind='conv',
        steps=(Step(branch='output:norm3', state=_SHORTCUT), ),
        note='relu(shortcut(x) + norm3(conv3(...))): f is the output of norm3 (plugins after '
        'conv3 are not covered); the shortcut is projected after f is formed'),
    BlockSpec(_PB + 'swin_transformer.SwinBlock', 'Swin', kind='transformer', steps=_SWIN_STEPS,
              note='x + attn(norm1(x)), then + ffn(norm2(.)); f before each drop path'),
    BlockSpec('mmdet.models.backbones.swin.SwinBlock', 'Swin (mmdet)', kind='transformer',
              steps=_SWIN_STEPS, note='as mmpretrain\'s Swin block'),
]

NON_RESIDUAL = {}

__all__ = ['SPECS', 'NON_RESIDUAL']
