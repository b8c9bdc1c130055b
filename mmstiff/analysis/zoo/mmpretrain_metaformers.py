"""The Euler steps of mmpretrain's ConvNeXt-like, MetaFormer-like, MLP and graph backbones.

ConvNeXt, SparseConvNeXt, ConvMixer, EdgeNeXt, RepLKNet, RepMLPNet, PoolFormer, RIFormer, VAN,
HorNet, MobileViT, EfficientFormer, MLP-Mixer, LeViT, ViG and Pyramid ViG. Layer scale (a learned
per-channel factor on the branch, right before the add) is read as the step size Δ.
"""
from ..step_specs import BlockSpec, Step

_PB = 'mmpretrain.models.backbones.'

#: a block that adds twice: token mixer (its mid state is the input of ``norm2``), then MLP.
_MIXER_THEN_MLP = 'input:norm2'
#: where the two f of a block that drops both paths through one ``drop_path`` are formed
_DROP_1, _DROP_2 = 'input:drop_path', 'input:drop_path#2'

SPECS = [
    BlockSpec(
        _PB + 'convnext.ConvNeXtBlock', 'ConvNeXt',
        steps=(Step('block', 'in', 'out', 'param:gamma:channels_first', branch='input:drop_path',
                    state='input:depthwise_conv'), ),
        note='x + gamma * (pwconv2 . act . pwconv1 . norm . dwconv)(x); gamma (layer scale) is Δ'),
    BlockSpec(
        _PB + 'sparse_convnext.SparseConvNeXtBlock', 'SparseConvNeXt',
        steps=(Step('block', 'in', 'out', 'param:gamma:channels_first',
                    branch='input:drop_path'), ),
        note='as ConvNeXt, the branch masked by the active map of the sparse pass; gamma is Δ'),
    BlockSpec(
        _PB + 'convmixer.Residual', 'ConvMixer', steps=(Step(branch='output:fn'), ),
        note='x + (norm . act . depthwise conv)(x); the pointwise conv after it is not residual'),
    BlockSpec(
        _PB + 'edgenext.SDTAEncoder', 'EdgeNeXt',
        steps=(Step('block', 'in', 'out', 'param:gamma:channels_first', branch=_DROP_2), ),
        note='x + gamma * MLP(SDTA(x)): one step; the inner channel-attention add acts on a '
        'token-layout copy, so it is part of the branch; gamma is Δ (gamma_csa is not)'),
    BlockSpec(_PB + 'replknet.RepLKBlock', 'RepLKNet', steps=(Step(branch='input:drop_path'), ),
              note='x + (pw2 . act . large kernel . pw1 . bn)(x), Δ = 1'),
    BlockSpec(_PB + 'replknet.ConvFFN', 'RepLKNet', steps=(Step(branch='input:drop_path'), ),
              note='x + (pw2 . act . pw1 . bn)(x), Δ = 1'),
    BlockSpec(
        _PB + 'repmlp.RepMLPNetUnit', 'RepMLPNet',
        steps=(Step('msa', 'in', _MIXER_THEN_MLP, 'output:repmlp_block.gp',
                    branch='output:repmlp_block'),
               Step('mlp', _MIXER_THEN_MLP, 'out', branch='output:ffn_block')),
        note='y = x + gp(norm1 x) * RepMLP(norm1 x), then y + ConvFFN(norm2 y); the global '
        'perceptron (a sigmoid gate on the branch output right before the add) is Δ'),
    BlockSpec(
        _PB + 'poolformer.PoolFormerBlock', 'PoolFormer',
        steps=(Step('msa', 'in', _MIXER_THEN_MLP, 'param:layer_scale_1:channels_first',
                    branch=_DROP_1),
               Step('mlp', _MIXER_THEN_MLP, 'out', 'param:layer_scale_2:channels_first',
                    branch=_DROP_2)),
        note='pooling token mixer then MLP, each scaled by its layer scale (Δ)'),
    BlockSpec(
        _PB + 'riformer.RIFormerBlock', 'RIFormer',
        steps=(Step('msa', 'in', _MIXER_THEN_MLP, 'param:layer_scale_1:channels_first',
                    branch=_DROP_1),
               Step('mlp', _MIXER_THEN_MLP, 'out', 'param:layer_scale_2:channels_first',
                    branch=_DROP_2)),
        note='affine token mixer (or its re-parameterised norm) then MLP; layer scales are Δ'),
    BlockSpec(
        _PB + 'van.VANBlock', 'VAN',
        steps=(Step('msa', 'in', _MIXER_THEN_MLP, 'param:layer_scale_1:channels_first',
                    branch=_DROP_1),
               Step('mlp', _MIXER_THEN_MLP, 'out', 'param:layer_scale_2:channels_first',
                    branch=_DROP_2)),
        note='large-kernel attention then MixFFN, each scaled by its layer scale (Δ); the add '
        'inside the attention is part of the branch'),
    BlockSpec(
        _PB + 'hornet.HorNetBlock', 'HorNet',
        unwritten='its two adds are read as one step (the state between them is seen only '
        'permuted to channels-last), and one step cannot be written as two',
        note='two adds (gnConv then MLP) read as one step with Δ = 1: the state between them '
        'reaches a submodule only permuted to channels-last (norm2), so gamma1 and gamma2 '
        'cannot be read as the steps of their own adds'),
    BlockSpec(
        _PB + 'efficientformer.Meta4D', 'EfficientFormer',
        steps=(Step('msa', 'in', 'input:mlp', 'layer_scale:ls1', branch=_DROP_1),
               Step('mlp', 'input:mlp', 'out', 'layer_scale:ls2', branch=_DROP_2)),
        note='pooling token mixer then conv MLP on (B, C, H, W), LayerScale ls1 / ls2 are Δ'),
    BlockSpec(
        _PB + 'efficientformer.Meta3D', 'EfficientFormer',
        steps=(Step('msa', 'in', _MIXER_THEN_MLP, 'layer_scale:ls1', branch=_DROP_1),
               Step('mlp', _MIXER_THEN_MLP, 'out', 'layer_scale:ls2', branch=_DROP_2)),
        note='attention with bias then linear MLP on (B, N, C), LayerScale ls1 / ls2 are Δ'),
    BlockSpec(
        _PB + 'mlp_mixer.MixerBlock', 'MLP-Mixer',
        steps=(Step('msa', 'in', 'kwarg:channel_mix:identity'),
               Step('mlp', 'kwarg:channel_mix:identity', 'out',
                    branch='input:channel_mix.dropout_layer')),
        unwritten='the token-mixing f exists only transposed ((B, C, N)) and is transposed back '
        'inside the add; write the channel MLP alone with branches=\'mlp\'',
        note='token-mixing MLP (on the transposed tokens) then the channel MLP, whose FFN makes '
        'the second add with identity=x; Δ = 1'),
    BlockSpec(
        _PB + 'levit.Residual', 'LeViT', steps=(Step(branch='input:drop_path'), ),
        note='x + block(x) around each attention and MLP; Δ = 1 (the attention-subsample '
        'stages between them are not residual)'),
    BlockSpec(_PB + 'vig.Grapher', 'ViG', steps=(Step(branch='output:drop_path'), ),
              note='x + (fc2 . graph conv . fc1)(x), Δ = 1'),
    BlockSpec(_PB + 'vig.FFN', 'ViG', steps=(Step(branch='output:drop_path'), ),
              note='x + (fc2 . act . fc1)(x), Δ = 1'),
]

# backbones (registry scope + registered name) that have no residual step, with the reason
NON_RESIDUAL = {}

__all__ = ['SPECS', 'NON_RESIDUAL']
