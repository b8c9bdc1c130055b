"""Zoo cases of mmpretrain's vision transformers: the smallest instance of each backbone, and
every step of their block classes recomputed from the block's own submodules."""
import importlib.util

import torch

_VIT = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
_TINY = dict(img_size=32, patch_size=8)

CASES = {
    'mmpretrain.VisionTransformer':
    dict(cfg=dict(arch=_VIT, layer_scale_init_value=0.1, **_TINY), input=(2, 3, 32, 32)),
    'mmpretrain.DistilledVisionTransformer':
    dict(cfg=dict(arch=_VIT, **_TINY), input=(2, 3, 32, 32)),
    'mmpretrain.DeiT3':
    dict(cfg=dict(arch=_VIT, **_TINY), input=(2, 3, 32, 32)),
    'mmpretrain.BEiTViT':
    dict(cfg=dict(arch=_VIT, **_TINY), input=(2, 3, 32, 32)),
    'mmpretrain.SwinTransformer':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, depths=[2, 2], num_heads=[1, 2]), img_size=32, window_size=4,
            out_indices=(1, )), input=(2, 3, 32, 32)),
    'mmpretrain.SwinTransformerV2':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, depths=[2, 2], num_heads=[1, 2], extra_norm_every_n_blocks=0),
            img_size=32, window_size=[4, 4], out_indices=(1, ), pretrained_window_sizes=[0, 0]),
        input=(2, 3, 32, 32)),
    'mmpretrain.TNT':
    dict(
        cfg=dict(
            arch=dict(embed_dims_outer=32, embed_dims_inner=8, num_layers=2, num_heads_outer=2,
                      num_heads_inner=2), img_size=32), input=(2, 3, 32, 32)),
    'mmpretrain.T2T_ViT':
    dict(
        cfg=dict(img_size=32, embed_dims=32, num_layers=2, t2t_cfg=dict(token_dims=16),
                 layer_cfgs=dict(num_heads=2)), input=(2, 3, 32, 32)),
    'mmpretrain.Conformer':
    dict(
        cfg=dict(
            arch=dict(embed_dims=32, channel_ratio=1, num_heads=2, depths=3), base_channels=16,
            out_indices=(2, )), input=(1, 3, 64, 64)),
    'mmpretrain.PCPVT':
    dict(
        cfg=dict(
            arch=dict(embed_dims=[16, 32], depths=[2, 1], num_heads=[1, 2], patch_sizes=[4, 2],
                      strides=[4, 2], mlp_ratios=[2, 2], sr_ratios=[2, 1]), out_indices=(1, )),
        input=(2, 3, 32, 32)),
    'mmpretrain.SVT':
    dict(
        cfg=dict(
            arch=dict(embed_dims=[16, 32], depths=[2, 2], num_heads=[1, 2], patch_sizes=[4, 2],
                      strides=[4, 2], mlp_ratios=[2, 2], sr_ratios=[2, 1], window_sizes=[4, 4]),
            out_indices=(1, )), input=(2, 3, 32, 32)),
    'mmpretrain.MViT':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, num_layers=3, num_heads=1, downscale_indices=[1]),
            img_size=32), input=(2, 3, 32, 32)),
    'mmpretrain.DaViT':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, depths=[1, 1], num_heads=[1, 2]), window_size=4,
            out_indices=(1, )), input=(2, 3, 32, 32)),
    'mmpretrain.RevVisionTransformer':
    dict(cfg=dict(arch=_VIT, **_TINY), input=(2, 3, 32, 32), non_residual_check=True),
    'mmpretrain.MixMIMTransformer':
    dict(
        cfg=dict(
            arch=dict(embed_dims=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), img_size=64,
            window_size=[4, 4, 4, 2]), input=(2, 3, 64, 64)),
    'mmpretrain.TinyViT':
    dict(
        cfg=dict(
            arch=dict(channels=[16, 32, 32, 32], num_heads=[1, 2, 2, 2], depths=[1, 1, 1, 1]),
            img_size=(64, 64), window_size=[4, 4, 4, 2]), input=(2, 3, 64, 64)),
    'mmpretrain.XCiT':
    dict(
        cfg=dict(img_size=32, patch_size=16, embed_dims=32, depth=2, cls_attn_layers=1, num_heads=2,
                 tokens_norm=True), input=(2, 3, 32, 32)),
    'mmpretrain.ViTSAM':
    dict(
        cfg=dict(
            arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64,
                      global_attn_indexes=[1]), img_size=64, patch_size=16, window_size=2,
            out_channels=16), input=(1, 3, 64, 64)),
    'mmpretrain.ViTEVA02':
    dict(cfg=dict(arch=_VIT, **_TINY), input=(2, 3, 32, 32)),
    'mmpretrain.HiViT':
    dict(
        cfg=dict(
            arch=dict(embed_dims=32, depths=[1, 1, 8], num_heads=2), img_size=64, out_indices=[7],
            layer_scale_init_value=0.1), input=(2, 3, 64, 64)),
    'mmpretrain.TIMMBackbone':
    dict(
        cfg=dict(model_name='vit_tiny_patch16_224', img_size=32, patch_size=8, embed_dim=32,
                 depth=2, num_heads=2, init_values=0.1), input=(2, 3, 32, 32))
    if importlib.util.find_spec('timm') is not None else dict(skip='needs timm (the tests extra)'),
}


def _arg(args, kwargs, index, name):
    """The block's forward argument ``name`` (positional ``index``), None if not passed."""
    return args[index] if len(args) > index else kwargs.get(name)


def _weight(scale):
    """Δ of a layer-scale module (its per-channel weight; channels last), None (Δ = 1) for the
    ``nn.Identity`` that stands in its place without layer scale."""
    weight = getattr(scale, 'weight', getattr(scale, 'gamma', None))
    return weight if torch.is_tensor(weight) else None


def _gamma(value):
    """Δ of a raw layer-scale attribute: the tensor, None (Δ = 1) for None or the float 1."""
    return value if torch.is_tensor(value) else None


def _mha(attn, h):
    """mmpretrain ``MultiheadAttention`` of ``h`` before its layer scale (eval mode)."""
    B, N, _ = h.shape
    qkv = attn.qkv(h).reshape(B, N, 3, attn.num_heads, attn.head_dims).permute(2, 0, 3, 1, 4)
    y = attn.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
    return attn.proj(y.transpose(1, 2).reshape(B, N, attn.embed_dims))


def _mmcv_mha(attn, h):
    """mmcv ``MultiheadAttention`` of ``h`` without the identity it adds."""
    q = h.transpose(0, 1) if attn.batch_first else h
    out = attn.attn(q, q, q)[0]
    return attn.proj_drop(out.transpose(0, 1) if attn.batch_first else out)


def _grid_conv(conv, x, size):
    """``conv`` of the (B, N, C) tokens ``x`` laid out on their (H, W) grid, back as tokens."""
    B, N, C = x.shape
    return conv(x.transpose(1, 2).reshape(B, C, *size)).flatten(2).transpose(1, 2)


def _conformer_block(b, x, args, kwargs):
    """The whole move of Conformer's post-activation bottleneck: relu(x + branch(x)) - x (the
    fusion block adds the transformer's features to its branch)."""
    fusion = _arg(args, kwargs, 1, 'fusion_features')
    h = b.act1(b.bn1(b.conv1(x)))
    h = b.act2(b.bn2(b.conv2(h if fusion is None else h + fusion)))
    return b.act3(x + b.bn3(b.conv3(h))) - x


def _mixmim_attn(b, x):
    """MixMIM's window attention of ln1(x) (no attention mask, as the backbone calls it)."""
    H, W = b.input_resolution
    B, L, C = x.shape
    windows = b.window_partition(b.ln1(x).view(B, H, W, C), b.window_size)
    out = b.attn(windows.view(-1, b.window_size * b.window_size, C))
    out = out.view(-1, b.window_size, b.window_size, C)
    return b.window_reverse(out, H, W, b.window_size).view(B, H * W, C)


def _sam_attn(b, x):
    """SAM's (windowed) attention of ln1(x) on the (B, H, W, C) grid."""
    from mmpretrain.models.backbones.vit_sam import window_partition, window_unpartition
    h = b.ln1(x)
    if b.window_size == 0:
        return b.attn(h)
    windows, pad_hw = window_partition(h, b.window_size)
    return window_unpartition(b.attn(windows), b.window_size, pad_hw, h.shape[1:3])


def _beit_msa(b, x, args, kwargs):
    return _gamma(b.gamma_1), b.attn(b.ln1(x), rel_pos_bias=_arg(args, kwargs, 1, 'rel_pos_bias'))


def _hivit_msa(b, x, args, kwargs):
    rpe_index, mask = _arg(args, kwargs, 1, 'rpe_index'), _arg(args, kwargs, 2, 'mask')
    return _gamma(b.gamma_1), b.attn(b.norm1(x), rpe_index, mask)


def _tinyvit_mbconv(b, x):
    """TinyViT's post-activation inverted residual, the whole move: gelu(x + branch(x)) - x."""
    return b.act(x + b.conv3(b.act(b.conv2(b.act(b.conv1(x)))))) - x


def _ca_msa(b, x):
    """XCiT class attention: attention of the class token, the patch tokens' own norm1."""
    h = b.norm1(x)
    return torch.cat([b.attn(h), h[:, 1:]], dim=1)


def _ca_mlp(b, x):
    """XCiT class attention's second branch: gamma2 * mlp of the class token, and the patch
    tokens themselves (upstream adds them to themselves)."""
    return torch.cat([b.gamma2 * b.ffn.layers(x[:, :1]), x[:, 1:]], dim=1)


def _timm_basic(b, x):
    """timm's post-activation basic block, the whole move: act2(x + branch(x)) - x."""
    h = b.aa(b.act1(b.drop_block(b.bn1(b.conv1(x)))))
    h = b.bn2(b.conv2(h))
    return b.act2(x + (h if b.se is None else b.se(h))) - x


def _timm_bottleneck(b, x):
    """timm's post-activation bottleneck, the whole move: act3(x + branch(x)) - x."""
    h = b.act1(b.bn1(b.conv1(x)))
    h = b.aa(b.act2(b.drop_block(b.bn2(b.conv2(h)))))
    h = b.bn3(b.conv3(h))
    return b.act3(x + (h if b.se is None else b.se(h))) - x


def _timm_convnext(b, x):
    """(Δ, f) of timm's ConvNeXt block: its gamma (channels first), mlp(norm(dwconv(x)))."""
    delta = None if b.gamma is None else b.gamma.reshape(1, -1, 1, 1)
    h = b.conv_dw(x)
    if b.use_conv_mlp:
        return delta, b.mlp(b.norm(h))
    return delta, b.mlp(b.norm(h.permute(0, 2, 3, 1))).permute(0, 3, 1, 2)


def _timm_inverted_residual(b, x):
    h = x if b.conv_s2d is None else b.bn_s2d(b.conv_s2d(x))
    h = b.se(b.aa(b.bn2(b.conv_dw(b.bn1(b.conv_pw(h))))))
    return b.bn3(b.conv_pwl(h))


def _timm_depthwise_separable(b, x):
    h = x if b.conv_s2d is None else b.bn_s2d(b.conv_s2d(x))
    return b.bn2(b.conv_pw(b.se(b.aa(b.bn1(b.conv_dw(h))))))


_BB = 'mmpretrain.models.backbones.'
_TIMM_EFFICIENTNET = 'timm.models._efficientnet_blocks.'
_LN_STEPS = {
    'msa': lambda b, x, a, k: (_weight(b.attn.gamma1), _mha(b.attn, b.ln1(x))),
    'mlp': lambda b, x, a, k: (_weight(b.ffn.gamma2), b.ffn.layers(b.ln2(x))),
}
_TWINS_STEPS = {
    'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x), a[1])),
    'mlp': lambda b, x, a, k: (None, b.ffn(b.norm2(x))),
}
_DAVIT_CPE = {
    'cpe1': lambda b, x, a, k: (None, _grid_conv(b.cpe1.proj, x, a[1])),
    'cpe2': lambda b, x, a, k: (None, _grid_conv(b.cpe2.proj, x, a[1])),
    'mlp': lambda b, x, a, k: (None, b.ffn.layers(b.norm2(x))),
}

BRANCHES = {
    _BB + 'vision_transformer.TransformerEncoderLayer': _LN_STEPS,
    _BB + 'deit3.DeiT3TransformerEncoderLayer': {
        'msa': lambda b, x, a, k: (_weight(b.attn.gamma1), _mha(b.attn, b.ln1(x))),
        'mlp': lambda b, x, a, k: (_weight(b.ffn.gamma2), b.ffn.layers(b.ln1(x))),
    },
    _BB + 'beit.BEiTTransformerEncoderLayer': {
        'msa': _beit_msa,
        'mlp': lambda b, x, a, k: (_gamma(b.gamma_2), b.ffn(b.ln2(x))),
    },
    _BB + 'swin_transformer.SwinBlock': {
        'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x), a[1])),
        'mlp': lambda b, x, a, k: (None, b.ffn.layers(b.norm2(x))),
    },
    _BB + 'swin_transformer_v2.SwinBlockV2': {
        'msa': lambda b, x, a, k: (None, b.norm1(b.attn(x, a[1]))),
        'mlp': lambda b, x, a, k: (None, b.norm2(b.ffn(x))),
    },
    _BB + 'tnt.TransformerBlock': {
        'msa': lambda b, x, a, k: (None, _mmcv_mha(b.attn, b.norm_attn(x))),
        'mlp': lambda b, x, a, k: (None, b.ffn.layers(b.norm_ffn(x))),
    },
    _BB + 't2t_vit.T2TTransformerLayer': _LN_STEPS,
    _BB + 'conformer.ConvBlock': {
        'block': lambda b, x, a, k: (None, _conformer_block(b, x, a, k)),
    },
    _BB + 'twins.GSAEncoderLayer': _TWINS_STEPS,
    _BB + 'twins.LSAEncoderLayer': _TWINS_STEPS,
    'mmpretrain.models.utils.position_encoding.ConditionalPositionEncoding': {
        'block': lambda b, x, a, k: (None, _grid_conv(b.proj, x, a[1])),
    },
    _BB + 'mvit.MultiScaleBlock': {
        'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x), a[1])[0]),
        'mlp': lambda b, x, a, k: (None, b.mlp(b.norm2(x))),
    },
    _BB + 'davit.SpatialBlock': {
        'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x), a[1])),
        **_DAVIT_CPE
    },
    _BB + 'davit.ChannelBlock': {
        'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x))),
        **_DAVIT_CPE
    },
    _BB + 'mixmim.MixMIMBlock': {
        'msa': lambda b, x, a, k: (None, _mixmim_attn(b, x)),
        'mlp': lambda b, x, a, k: (None, b.ffn.layers(b.ln2(x))),
    },
    _BB + 'tinyvit.TinyViTBlock': {
        'mlp': lambda b, x, a, k: (None, b.mlp(x)),
    },
    _BB + 'tinyvit.MBConvBlock': {
        'block': lambda b, x, a, k: (None, _tinyvit_mbconv(b, x)),
    },
    _BB + 'xcit.XCABlock': {
        'msa': lambda b, x, a, k: (b.gamma1, b.attn(b.norm1(x))),
        'local': lambda b, x, a, k: (b.gamma3, b.local_mp(b.norm3(x), a[1], a[2])),
        'mlp': lambda b, x, a, k: (b.gamma2, b.ffn.layers(b.norm2(x))),
    },
    _BB + 'xcit.ClassAttentionBlock': {
        'msa': lambda b, x, a, k: (_gamma(b.gamma1), _ca_msa(b, x)),
        'mlp': lambda b, x, a, k: (None, _ca_mlp(b, x)),
    },
    _BB + 'vit_sam.TransformerEncoderLayer': {
        'msa': lambda b, x, a, k: (None, _sam_attn(b, x)),
        'mlp': lambda b, x, a, k: (None, b.ffn.layers(b.ln2(x))),
    },
    _BB + 'vit_eva02.EVA02EndcoderLayer': {
        'msa': lambda b, x, a, k: (None, b.attn(b.norm1(x), a[1])),
        'mlp': lambda b, x, a, k: (None, b.mlp(b.norm2(x))),
    },
    _BB + 'hivit.BlockWithRPE': {
        'msa': _hivit_msa,
        'mlp': lambda b, x, a, k: (_gamma(b.gamma_2), b.mlp(b.norm2(x))),
    },
    'timm.models.vision_transformer.Block': {
        'msa': lambda b, x, a, k: (_weight(b.ls1), b.attn(b.norm1(x))),
        'mlp': lambda b, x, a, k: (_weight(b.ls2), b.mlp(b.norm2(x))),
    },
    'timm.models.resnet.BasicBlock': {
        'block': lambda b, x, a, k: (None, _timm_basic(b, x)),
    },
    'timm.models.resnet.Bottleneck': {
        'block': lambda b, x, a, k: (None, _timm_bottleneck(b, x)),
    },
    'timm.models.convnext.ConvNeXtBlock': {
        'block': lambda b, x, a, k: _timm_convnext(b, x),
    },
    _TIMM_EFFICIENTNET + 'InvertedResidual': {
        'block': lambda b, x, a, k: (None, _timm_inverted_residual(b, x)),
    },
    _TIMM_EFFICIENTNET + 'DepthwiseSeparableConv': {
        'block': lambda b, x, a, k: (None, _timm_depthwise_separable(b, x)),
    },
    _TIMM_EFFICIENTNET + 'EdgeResidual': {
        'block': lambda b, x, a, k: (None, b.bn2(b.conv_pwl(b.se(b.aa(b.bn1(b.conv_exp(x))))))),
    },
}
