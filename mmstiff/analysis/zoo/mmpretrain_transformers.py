"""The Euler steps of mmpretrain's vision transformers (ViT and its descendants, Swin V2,
Twins, MViT, DaViT, TinyViT, XCiT, SAM, EVA-02, HiViT, TNT, T2T-ViT, Conformer, MixMIM).

A pre-norm layer ``x + Δ ⊙ attn(norm1(x))``, then ``· + Δ ⊙ mlp(norm2(·))``, is read as two
steps, ``msa`` and ``mlp``; the state between them is the input of the second norm (or the
``identity`` the FFN adds). Layer scale (a ``LayerScale`` module or a raw ``gamma`` parameter)
is the step size Δ; where a layer has none (``nn.Identity``, None or the float 1.0 in its
place) Δ = 1. Instances whose steps the taps cannot read exactly are excluded by ``residual``
(their ``note`` says why). Nothing here imports a model.
"""
from ..step_specs import BlockSpec, Step

_BB = 'mmpretrain.models.backbones.'


def _pre_norm(mid, msa_scale=None, mlp_scale=None, branches=(None, None)):
    """The two steps of a pre-norm layer whose middle state is the tap ``mid``; ``branches``:
    where each f is formed, for writing."""
    return (Step('msa', 'in', mid, msa_scale,
                 branch=branches[0]), Step('mlp', mid, 'out', mlp_scale, branch=branches[1]))


#: f of mmpretrain's MultiheadAttention (after its layer scale) and mmcv's FFN, before each
#: adds it through its drop path
_ATTN_FFN = ('input:attn.out_drop', 'input:ffn.dropout_layer')
#: f of a layer that drops both paths through one ``drop_path`` module
_DROP_TWICE = ('input:drop_path', 'input:drop_path#2')

#: XCiT's class attention: its second step starts after norm2, which sits between the adds
_CLASS_ATTENTION_STEPS = (
    Step('msa', 'in', 'input:norm2', 'param:gamma1:channels_last'),
    Step('mlp', 'output:norm2', 'out'),
)
#: HiViT's main-stage layer, its raw layer scales gamma_1 / gamma_2 as Δ
_HIVIT_STEPS = _pre_norm('input:norm2', 'param:gamma_1:channels_last',
                         'param:gamma_2:channels_last', _DROP_TWICE)

#: why a convolutional position encoding (x + dwconv(x) on the token grid) cannot be written
_CPE_UNWRITTEN = ('its f is formed as a (B, C, H, W) map and flattened back to tokens inside '
                  'the add: never a tensor of the state\'s shape; leave it out with '
                  "branches=('msa', 'mlp')")

SPECS = [
    BlockSpec(
        _BB + 'vision_transformer.TransformerEncoderLayer', 'ViT',
        steps=_pre_norm('input:ln2', 'layer_scale:attn.gamma1', 'layer_scale:ffn.gamma2',
                        _ATTN_FFN),
        note='x + attn(ln1(x)), then + ffn(ln2(.)); with layer scale (EVA, DINOv2 configs) the '
        'LayerScale gamma1 / gamma2 are Δ, without it (an nn.Identity there) Δ = 1'),
    BlockSpec(
        _BB + 'deit3.DeiT3TransformerEncoderLayer', 'DeiT3',
        steps=_pre_norm('kwarg:ffn:identity', 'layer_scale:attn.gamma1', 'layer_scale:ffn.gamma2',
                        _ATTN_FFN),
        note='both branches read ln1 (ln2 is never called): the middle state is the identity '
        'the FFN adds; LayerScale gamma1 / gamma2 are Δ'),
    BlockSpec(
        _BB + 'beit.BEiTTransformerEncoderLayer', 'BEiT',
        steps=_pre_norm('input:ln2', 'param:gamma_1:channels_last', 'param:gamma_2:channels_last',
                        _DROP_TWICE),
        note='x + gamma_1 * attn(ln1(x), rel_pos_bias), then + gamma_2 * ffn(ln2(.)): the '
        'gammas are Δ (None without layer scale: Δ = 1)'),
    BlockSpec(
        _BB + 'swin_transformer_v2.SwinBlockV2', 'SwinV2',
        steps=_pre_norm('input:ffn', branches=('output:norm1', 'output:norm2')),
        residual=lambda m: not m.extra_norm,
        note='post-norm branches: x + norm1(attn(x)), then + norm2(ffn(.)); the blocks with '
        'an extra norm3 after the second add (huge / giant archs) are not read: their second '
        'step ends at the input of norm3, which the block does not output'),
    BlockSpec(
        _BB + 'tnt.TransformerBlock', 'TNT',
        steps=_pre_norm('kwarg:ffn:identity',
                        branches=('input:attn.dropout_layer', 'input:ffn.dropout_layer')),
        note='the inner (pixel) and outer (patch) transformer blocks of a TNT layer, each two '
        'steps; the inner blocks run on B * patches sequences of pixels. The fusion of the '
        'pixels into the patch tokens between them (an in-place add on the patch tokens but the '
        'class token) is not read'),
    BlockSpec(
        _BB + 't2t_vit.T2TTransformerLayer', 'T2T-ViT',
        steps=_pre_norm('input:ln2', branches=_ATTN_FFN), residual=lambda m: not m.v_shortcut,
        note='the encoder layers; the two token-to-token layers (v_shortcut: the attention '
        'adds its own value projection, not its input, and changes the width) are not read'),
    BlockSpec(
        _BB + 'conformer.ConvBlock', 'Conformer', residual=lambda m: not m.with_residual_conv,
        steps=(Step(branch='output:bn3'), ),
        note='the CNN branch bottleneck, post-activation: x -> relu(x + branch(x)) (the '
        'fusion block adds the transformer features inside its branch); blocks with a '
        'projection shortcut are not read (x_t would be relu of the projection). The '
        'transformer branch is ViT layers'),
    BlockSpec(_BB + 'twins.GSAEncoderLayer', 'Twins', steps=_pre_norm('input:norm2',
                                                                      branches=_DROP_TWICE),
              note='pre-norm layer with globally sub-sampled attention (PCPVT, SVT)'),
    BlockSpec(_BB + 'twins.LSAEncoderLayer', 'Twins', steps=_pre_norm('input:norm2',
                                                                      branches=_DROP_TWICE),
              note='pre-norm layer with locally grouped attention (SVT)'),
    BlockSpec(
        'mmpretrain.models.utils.position_encoding.ConditionalPositionEncoding', 'Twins',
        residual=lambda m: m.stride == 1, unwritten=_CPE_UNWRITTEN,
        note='the position encoding generator after each stage\'s first layer: x + '
        'depthwise_conv(x) on the token grid (only at stride 1 does it add its input)'),
    BlockSpec(
        _BB + 'mvit.MultiScaleBlock', 'MViT', steps=_pre_norm('input:norm2', branches=_DROP_TWICE),
        residual=lambda m: m.proj is None and m.pool_skip is None,
        note='pre-norm, pooling attention (its residual pooling is inside the branch); the '
        'stage-transition blocks are not read: their shortcut is projected and max-pooled '
        'through a function, not a module whose output is the token state'),
    BlockSpec(
        _BB + 'davit.SpatialBlock', 'DaViT',
        steps=(Step('cpe1', 'in',
                    'input:norm1'), Step('msa', 'input:norm1', 'input:cpe2', branch='output:attn'),
               Step('cpe2', 'input:cpe2', 'input:norm2'),
               Step('mlp', 'input:norm2', 'out',
                    branch='input:ffn.dropout_layer')), unwritten=_CPE_UNWRITTEN,
        note='four steps: conv position encoding (x + dwconv(x)), window attention, conv '
        'position encoding, MLP'),
    BlockSpec(
        _BB + 'davit.ChannelBlock', 'DaViT',
        steps=(Step('cpe1', 'in',
                    'input:norm1'), Step('msa', 'input:norm1', 'input:cpe2', branch='output:attn'),
               Step('cpe2', 'input:cpe2', 'input:norm2'),
               Step('mlp', 'input:norm2', 'out',
                    branch='input:ffn.dropout_layer')), unwritten=_CPE_UNWRITTEN,
        note='four steps: conv position encoding, channel attention, conv position encoding, '
        'MLP'),
    BlockSpec(_BB + 'mixmim.MixMIMBlock', 'MixMIM',
              steps=_pre_norm('input:ln2', branches=('input:drop_path', 'input:ffn.dropout_layer')),
              note='pre-norm window-attention layer (a ViT layer subclass without layer scale)'),
    BlockSpec(
        _BB + 'tinyvit.TinyViTBlock', 'TinyViT', steps=(Step('mlp', 'input:mlp', 'out',
                                                             branch='input:drop_path#2'), ),
        note='only the MLP step: the attention step ends in token layout but is next seen '
        'as the (B, C, H, W) input of the local conv, which sits between the two adds'),
    BlockSpec(
        'mmpretrain.models.backbones.tinyvit.MBConvBlock', 'TinyViT',
        steps=(Step(branch='input:drop_path'), ),
        note='the conv stage\'s inverted residual, post-activation: x -> gelu(x + branch(x))'),
    BlockSpec(
        _BB + 'xcit.XCABlock', 'XCiT',
        steps=(Step('msa', 'in', 'input:norm3', 'param:gamma1:channels_last',
                    branch='input:drop_path'),
               Step('local', 'input:norm3', 'input:norm2', 'param:gamma3:channels_last',
                    branch='input:drop_path#2'),
               Step('mlp', 'input:norm2', 'out', 'param:gamma2:channels_last',
                    branch='input:drop_path#3')),
        note='three steps: cross-covariance attention, local patch interaction, MLP; the '
        'layer scales gamma1, gamma3, gamma2 are Δ'),
    BlockSpec(
        _BB + 'xcit.ClassAttentionBlock', 'XCiT', steps=_CLASS_ATTENTION_STEPS,
        unwritten='the class token alone takes its MLP step and its attention step updates the '
        'class token from a concatenation: neither f is one tensor of the state\'s shape',
        residual=lambda m: m.tokens_norm,
        note='class attention (the patch tokens add their own normalised values), gamma1 as '
        'Δ; norm2 of all tokens; then the class token adds gamma2 * mlp(itself) while the patch '
        'tokens add themselves (x + x, as upstream): gamma2 scales one token only, so Δ = 1 '
        'and gamma2 is inside f. Read only with tokens_norm: otherwise norm2 sees the class '
        'token alone and no module sees the state between the two steps'),
    BlockSpec(
        _BB + 'vit_sam.TransformerEncoderLayer', 'SAM', steps=_pre_norm('input:ln2'),
        unwritten='its states are (B, H, W, C) token grids; the adaptors pool (B, C, H, W) '
        'feature maps or (B, N, C) tokens',
        note='pre-norm layer on the (B, H, W, C) token grid, windowed or global attention'),
    BlockSpec(_BB + 'vit_eva02.EVA02EndcoderLayer', 'EVA-02',
              steps=_pre_norm('input:norm2', branches=_DROP_TWICE),
              note='pre-norm layer, rotary attention and a SwiGLU MLP'),
    BlockSpec(
        _BB + 'hivit.BlockWithRPE', 'HiViT', steps=_HIVIT_STEPS,
        residual=lambda m: m.attn is not None,
        note='pre-norm layer of the main stage, gamma_1 / gamma_2 (layer scale) as Δ; the '
        'MLP-only blocks of the first stages (one step each) are not read'),
    BlockSpec(
        'timm.models.vision_transformer.Block', 'timm ViT',
        steps=_pre_norm('input:norm2', 'param:ls1.gamma:channels_last',
                        'param:ls2.gamma:channels_last', ('input:drop_path1', 'input:drop_path2')),
        note='timm\'s pre-norm ViT block (TIMMBackbone with a vit_* / deit_* model); its '
        'LayerScale ls1 / ls2 (init_values) is Δ, Δ = 1 where they are nn.Identity'),
    BlockSpec(
        'timm.models.resnet.BasicBlock', 'timm ResNet', steps=(Step(), ),
        residual=lambda m: m.downsample is None,
        note='post-activation: x -> act2(x + branch(x)), the whole move as for ResNet; an SE '
        'module (timm SE-ResNets) stays inside f; blocks with a downsample shortcut are not '
        'read (x_t would be the activation of the projection)'),
    BlockSpec('timm.models.resnet.Bottleneck', 'timm ResNet', steps=(Step(), ),
              residual=lambda m: m.downsample is None,
              note='post-activation bottleneck x -> act3(x + branch(x)), read as BasicBlock'),
    BlockSpec(
        'timm.models.convnext.ConvNeXtBlock', 'timm ConvNeXt',
        steps=(Step('block', 'in', 'out', 'param:gamma:channels_first',
                    branch='input:drop_path'), ),
        residual=lambda m: type(m.shortcut).__name__ == 'Identity',
        note='x + gamma * mlp(norm(dwconv(x))), gamma (layer scale) as Δ; blocks whose '
        'shortcut is a downsampling module are not read'),
    BlockSpec(
        'timm.models._efficientnet_blocks.InvertedResidual', 'timm EfficientNet / MobileNet',
        steps=(Step(branch='input:drop_path'), ), residual='has_skip',
        note='x + branch(x) where it keeps its shape; the SE gates the expansion before the '
        'projection, so it is inside f (Δ = 1)'),
    BlockSpec(
        'timm.models._efficientnet_blocks.DepthwiseSeparableConv', 'timm EfficientNet / MobileNet',
        steps=(Step(branch='input:drop_path'), ), residual='has_skip',
        note='x + pw(se(dw(x))) where it keeps its shape; the SE is before the pointwise '
        'projection: inside f (Δ = 1)'),
    BlockSpec('timm.models._efficientnet_blocks.EdgeResidual', 'timm EfficientNet / MobileNet',
              steps=(Step(branch='input:drop_path'), ), residual='has_skip',
              note='fused-MBConv x + pwl(se(conv_exp(x))) where it keeps its shape; SE inside f'),
]

NON_RESIDUAL = {
    'mmpretrain.RevVisionTransformer':
    'its reversible layers move each of two streams by a function of the other '
    '(y1 = x1 + F(x2), y2 = x2 + G(y1)), so neither stream is an Euler step of its own state, '
    'and the layers pass the pair as two tensors',
}
