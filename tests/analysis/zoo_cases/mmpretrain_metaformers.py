"""The smallest instances of mmpretrain's ConvNeXt-like, MetaFormer-like, MLP and graph backbones,
and their steps recomputed by hand.

``CASES['mmpretrain.<Name>']``: the config (without ``type``) and the input shape of a backbone
small enough to run one forward pass on a CPU quickly (``setup``, where given, is called before
the pass: SparseConvNeXt reads the mask of its sparse pass from a class attribute).
``BRANCHES[cls][step]``: ``(block, x, args, kwargs) -> (delta, f)``, the branch of each step of
the classes :mod:`mmstiff.analysis.zoo.mmpretrain_metaformers` describes, written from the
block's own submodules the way the upstream forward computes it (eval mode: dropout and drop
path are identities), so that the step's end is ``x + delta * f``.
"""
import torch

_PB = 'mmpretrain.models.backbones.'


def _sparse_mask_all_active(batch=1, size=1):
    """Mark every position active for SparseConvNeXt's sparse pass (a (B, 1, h, w) map at the
    resolution of its last stage), as a masked-image-modelling algorithm does before its
    forward; with every position active the sparse pass equals the dense one."""
    from mmpretrain.models.utils import SparseHelper
    SparseHelper._cur_active = torch.ones(batch, 1, size, size, dtype=torch.bool)


CASES = {
    'mmpretrain.ConvNeXt':
    dict(cfg=dict(arch='atto'), input=(1, 3, 32, 32)),
    'mmpretrain.SparseConvNeXt':
    dict(cfg=dict(arch='atto'), input=(1, 3, 32, 32), setup=_sparse_mask_all_active),
    'mmpretrain.ConvMixer':
    dict(
        cfg=dict(arch=dict(embed_dims=16, depth=2, patch_size=4, kernel_size=3)),
        input=(1, 3, 32, 32)),
    'mmpretrain.EdgeNeXt':
    dict(
        cfg=dict(arch=dict(channels=[8, 16, 24, 32], depths=[1, 2, 2, 2], num_heads=[2, 2, 2, 2])),
        input=(1, 3, 64, 64)),
    'mmpretrain.RepLKNet':
    dict(
        cfg=dict(
            arch=dict(large_kernel_sizes=[7, 5, 3, 3], layers=[1, 1, 1, 1],
                      channels=[8, 16, 24, 32], small_kernel=3, dw_ratio=1)), input=(1, 3, 64, 64)),
    'mmpretrain.RepMLPNet':
    dict(
        cfg=dict(
            arch=dict(channels=[8, 16, 32, 64], depths=[1, 1, 1, 1], sharesets_nums=[1, 2, 4, 8]),
            img_size=32), input=(1, 3, 32, 32)),
    'mmpretrain.PoolFormer':
    dict(
        cfg=dict(
            arch=dict(layers=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32], mlp_ratios=[2, 2, 2, 2],
                      layer_scale_init_value=1e-5)), input=(1, 3, 64, 64)),
    'mmpretrain.RIFormer':
    dict(
        cfg=dict(
            arch=dict(layers=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32], mlp_ratios=[2, 2, 2, 2],
                      layer_scale_init_value=1e-5)), input=(1, 3, 64, 64)),
    'mmpretrain.VAN':
    dict(
        cfg=dict(
            arch=dict(embed_dims=[8, 16, 24, 32], depths=[1, 1, 1, 1], ffn_ratios=[2, 2, 2, 2])),
        input=(1, 3, 64, 64)),
    'mmpretrain.HorNet':
    dict(
        cfg=dict(
            arch=dict(base_dim=16, depths=[1, 1, 1, 1], orders=[2, 3, 4, 5],
                      dw_cfg=[dict(type='DW', kernel_size=3)] * 4)), input=(1, 3, 64, 64)),
    # 128 x 128: the last stage's transformer layers see 2 x 2 patches (a token state needs two)
    'mmpretrain.MobileViT':
    dict(cfg=dict(arch='xx_small'), input=(1, 3, 128, 128)),
    # the attention of the last stage has a bias table for 7 x 7 tokens: 224 x 224 input
    'mmpretrain.EfficientFormer':
    dict(
        cfg=dict(
            arch=dict(layers=[1, 1, 1, 2], embed_dims=[8, 16, 24, 32],
                      downsamples=[False, True, True, True], vit_num=1)), input=(1, 3, 224, 224)),
    'mmpretrain.MlpMixer':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, num_layers=2, tokens_mlp_dims=8, channels_mlp_dims=32),
            img_size=32, patch_size=8), input=(1, 3, 32, 32)),
    # its arch dicts are rejected upstream (a key-name mismatch): the smallest named arch, at
    # 128 x 128 so that the last stage keeps 2 x 2 tokens
    'mmpretrain.LeViT':
    dict(cfg=dict(arch='128s', img_size=128), input=(1, 3, 128, 128)),
    # named archs only, and a position embedding of the 224 x 224 grid
    'mmpretrain.Vig':
    dict(cfg=dict(arch='tiny'), input=(1, 3, 224, 224)),
    'mmpretrain.PyramidVig':
    dict(cfg=dict(arch='tiny'), input=(1, 3, 224, 224)),
}


def _channels(v):
    """A per-channel vector laid out for (B, C, H, W) states."""
    return v.view(1, -1, 1, 1)


def _layer_scale(ls, layout):
    """The step size of an mmpretrain ``LayerScale`` (None where the block uses an Identity)."""
    if not hasattr(ls, 'weight'):
        return None
    return ls.weight.view(-1, 1, 1) if layout == 'channels_first' else ls.weight


def _convnext_branch(b, x):
    y = b.depthwise_conv(x)
    if b.linear_pw_conv:
        y = y.permute(0, 2, 3, 1)
        y = b.norm(y, data_format='channel_last')
        y = b.act(b.pointwise_conv1(y))
        if b.grn is not None:
            y = b.grn(y, data_format='channel_last')
        return b.pointwise_conv2(y).permute(0, 3, 1, 2)
    y = b.norm(y, data_format='channel_first')
    y = b.act(b.pointwise_conv1(y))
    if b.grn is not None:
        y = b.grn(y, data_format='channel_first')
    return b.pointwise_conv2(y)


def _gamma(b):
    return None if b.gamma is None else _channels(b.gamma)


def _sparse_convnext_branch(b, x):
    from mmpretrain.models.utils import SparseHelper
    y = _convnext_branch(b, x)
    return y * SparseHelper._get_active_map_or_index(H=y.shape[2], returning_active_map=True)


def _sdta_branch(b, x):
    spx = torch.split(x, b.conv_channels, dim=1)
    convs, sp = [], 0
    for i in range(b.num_convs):
        sp = b.conv_modules[i](spx[i] + sp)
        convs.append(sp)
    y = torch.cat(convs + [spx[b.num_convs]], 1)
    B, C, H, W = y.shape
    y = y.reshape(B, C, H * W).permute(0, 2, 1)
    if b.pos_embed:
        y = y + b.pos_embed((B, H, W)).reshape(B, -1, y.shape[1]).permute(0, 2, 1)
    y = y + b.gamma_csa * b.csa(b.norm_csa(y))
    y = b.norm(y.reshape(B, H, W, C))
    y = b.pointwise_conv2(b.act(b.pointwise_conv1(y)))
    return y.permute(0, 3, 1, 2)


def _repmlp_branch(b, x):
    """RepMLPBlock's output before its global-perceptron gate (the gate is Δ)."""
    rb = b.repmlp_block
    inputs = b.norm1(x)
    h_parts, w_parts = inputs.shape[2] // rb.path_h, inputs.shape[3] // rb.path_w
    partitions = rb.partition(inputs, h_parts, w_parts)
    fc3_out = rb.partition_affine(partitions, h_parts, w_parts)
    if rb.reparam_conv_kernels is not None and not rb.deploy:
        conv_inputs = partitions.reshape(-1, rb.num_sharesets, rb.path_h, rb.path_w)
        conv_out = sum(getattr(rb, f'repconv{k}')(conv_inputs) for k in rb.reparam_conv_kernels)
        fc3_out = fc3_out + conv_out.reshape(-1, h_parts, w_parts, rb.num_sharesets, rb.path_h,
                                             rb.path_w)
    return fc3_out.permute(0, 3, 1, 4, 2, 5).reshape(*inputs.shape)


def _riformer_mixer(b, x):
    if hasattr(b, 'norm_reparam'):
        return b.norm_reparam(x)
    return b.token_mixer(b.norm1(x))


def _hornet_branch(b, x):
    """Both adds of a HorNet block as one move: out - x."""
    first = b.gamma1(b.gnconv(b.norm1(x)))
    mid = x + first
    y = b.norm2(mid.permute(0, 2, 3, 1))
    y = b.gamma2(b.pwconv2(b.act(b.pwconv1(y))))
    return first + y.permute(0, 3, 1, 2)


def _ffn_branch(ffn, x):
    """mmcv's FFN without its identity add."""
    return ffn.gamma2(ffn.layers(x))


def _grapher_branch(b, x):
    relative_pos = b._get_relative_pos(b.relative_pos, x.shape[2], x.shape[3])
    return b.fc2(b.graph_conv(b.fc1(x), relative_pos))


BRANCHES = {
    _PB + 'convnext.ConvNeXtBlock': {
        'block': lambda b, x, a, k: (_gamma(b), _convnext_branch(b, x)),
    },
    _PB + 'sparse_convnext.SparseConvNeXtBlock': {
        'block': lambda b, x, a, k: (_gamma(b), _sparse_convnext_branch(b, x)),
    },
    _PB + 'convmixer.Residual': {
        'block': lambda b, x, a, k: (None, b.fn(x)),
    },
    _PB + 'edgenext.SDTAEncoder': {
        'block': lambda b, x, a, k: (_gamma(b), _sdta_branch(b, x)),
    },
    _PB + 'replknet.RepLKBlock': {
        'block':
        lambda b, x, a, k: (None, b.pw2(b.lk_nonlinear(b.large_kernel(b.pw1(b.prelkb_bn(x)))))),
    },
    _PB + 'replknet.ConvFFN': {
        'block': lambda b, x, a, k: (None, b.pw2(b.nonlinear(b.pw1(b.preffn_bn(x))))),
    },
    _PB + 'repmlp.RepMLPNetUnit': {
        'msa': lambda b, x, a, k: (b.repmlp_block.gp(b.norm1(x)), _repmlp_branch(b, x)),
        'mlp': lambda b, x, a, k: (None, b.ffn_block(b.norm2(x))),
    },
    _PB + 'poolformer.PoolFormerBlock': {
        'msa': lambda b, x, a, k: (_channels(b.layer_scale_1), b.token_mixer(b.norm1(x))),
        'mlp': lambda b, x, a, k: (_channels(b.layer_scale_2), b.mlp(b.norm2(x))),
    },
    _PB + 'riformer.RIFormerBlock': {
        'msa': lambda b, x, a, k: (_channels(b.layer_scale_1), _riformer_mixer(b, x)),
        'mlp': lambda b, x, a, k: (_channels(b.layer_scale_2), b.mlp(b.norm2(x))),
    },
    _PB + 'van.VANBlock': {
        'msa':
        lambda b, x, a, k:
        (None if b.layer_scale_1 is None else _channels(b.layer_scale_1), b.attn(b.norm1(x))),
        'mlp':
        lambda b, x, a, k:
        (None if b.layer_scale_2 is None else _channels(b.layer_scale_2), b.mlp(b.norm2(x))),
    },
    _PB + 'hornet.HorNetBlock': {
        'block': lambda b, x, a, k: (None, _hornet_branch(b, x)),
    },
    _PB + 'efficientformer.Meta4D': {
        'msa': lambda b, x, a, k: (_layer_scale(b.ls1, 'channels_first'), b.token_mixer(x)),
        'mlp': lambda b, x, a, k: (_layer_scale(b.ls2, 'channels_first'), b.mlp(x)),
    },
    _PB + 'efficientformer.Meta3D': {
        'msa': lambda b, x, a, k: (_layer_scale(b.ls1, 'channels_last'), b.token_mixer(b.norm1(x))),
        'mlp': lambda b, x, a, k: (_layer_scale(b.ls2, 'channels_last'), b.mlp(b.norm2(x))),
    },
    _PB + 'mlp_mixer.MixerBlock': {
        'msa': lambda b, x, a, k: (None, b.token_mix(b.norm1(x).transpose(1, 2)).transpose(1, 2)),
        'mlp': lambda b, x, a, k: (None, _ffn_branch(b.channel_mix, b.norm2(x))),
    },
    _PB + 'levit.Residual': {
        'block': lambda b, x, a, k: (None, b.block(x)),
    },
    _PB + 'vig.Grapher': {
        'block': lambda b, x, a, k: (None, _grapher_branch(b, x)),
    },
    _PB + 'vig.FFN': {
        'block': lambda b, x, a, k: (None, b.fc2(b.act(b.fc1(x)))),
    },
}
