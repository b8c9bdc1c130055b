"""The smallest instance of every mmdet 3.3 backbone, and its steps recomputed by hand.

``CASES['mmdet.<Name>']``: the config (without ``type``) and the input shape of a backbone small
enough to run one forward pass on a CPU in well under a second (``non_residual_check``: built
to check that a backbone declared non-residual has no block). ``BRANCHES[cls][step]``:
``(block, x, args, kwargs) -> (delta, f)``, the branch of each step of the classes
:mod:`mmstiff.analysis.zoo.mmdet` describes, written from the block's own submodules the way
the upstream forward computes it (eval mode: dropout and drop path are identities).
"""
import torch


def _hrnet_stage(block, channels):
    """One module of one block per branch, a branch per entry of ``channels``."""
    branches = len(channels)
    return dict(num_modules=1, num_branches=branches, block=block, num_blocks=(1, ) * branches,
                num_channels=channels)


_HRNET_EXTRA = dict(
    stage1=_hrnet_stage('BOTTLENECK', (8, )), stage2=_hrnet_stage('BASIC', (8, 16)),
    stage3=_hrnet_stage('BASIC', (8, 16, 32)), stage4=_hrnet_stage('BASIC', (8, 16, 32, 64)))
# the transformers take 64x64 images: 2x2 tokens in their last stage (the token similarity the
# frequency hook logs needs two)
_PVT = dict(pretrain_img_size=64, embed_dims=8, num_layers=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
            mlp_ratios=[2, 2, 2, 2], drop_path_rate=0.)


def _det(**cfg):
    """A backbone config built from mmdet's registry whatever the default scope (mmpretrain
    registers ResNet, RegNet, HRNet, ... under the same names)."""
    return dict(_scope_='mmdet', **cfg)


def _init_trident_convs(model):
    """TridentConv allocates its weight with ``torch.Tensor(...)`` and no init of its own
    (mmdet initialises it from a checkpoint): whatever memory held, NaN included. Draw it."""
    for module in model.modules():
        if type(module).__name__ == 'TridentConv':
            torch.nn.init.kaiming_normal_(module.weight, generator=torch.Generator().manual_seed(3))


CASES = {
    'mmdet.RegNet':
    dict(cfg=_det(arch='regnetx_400mf'), input=(2, 3, 32, 32)),
    'mmdet.ResNet':
    dict(cfg=_det(depth=18, base_channels=16), input=(2, 3, 32, 32)),
    'mmdet.ResNetV1d':
    dict(cfg=_det(depth=18, base_channels=16), input=(2, 3, 32, 32)),
    'mmdet.ResNeXt':
    dict(cfg=_det(depth=50, base_channels=16, groups=4, base_width=4), input=(2, 3, 32, 32)),
    'mmdet.SSDVGG':
    dict(
        cfg=_det(depth=11, out_feature_indices=(13, 24)), input=(2, 3, 32, 32),
        non_residual_check=True),
    'mmdet.HRNet':
    dict(cfg=_det(extra=_HRNET_EXTRA), input=(2, 3, 32, 32)),
    'mmdet.MobileNetV2':
    dict(cfg=_det(widen_factor=0.35), input=(2, 3, 32, 32)),
    'mmdet.Res2Net':
    dict(cfg=_det(depth=50, base_channels=16, scales=4, base_width=4), input=(2, 3, 32, 32)),
    'mmdet.HourglassNet':
    dict(
        cfg=_det(downsample_times=2, num_stacks=2, stage_channels=(16, 16, 32),
                 stage_blocks=(1, 1, 1), feat_channel=16), input=(2, 3, 32, 32)),
    'mmdet.DetectoRS_ResNet':
    dict(
        cfg=_det(depth=50, base_channels=16, sac=dict(type='SAC', use_deform=False),
                 stage_with_sac=(False, True, True, False)),
        input=(2, 3, 64, 64)),  # SAC pads by 2 (reflect): at least 3x3 maps where it runs
    'mmdet.DetectoRS_ResNeXt':
    dict(cfg=_det(depth=50, base_channels=16, groups=4, base_width=4), input=(2, 3, 32, 32)),
    'mmdet.Darknet':
    dict(cfg=_det(depth=53), input=(2, 3, 32, 32)),  # its only depth
    'mmdet.ResNeSt':
    dict(cfg=_det(depth=50, base_channels=16, radix=2, reduction_factor=4), input=(2, 3, 32, 32)),
    'mmdet.TridentResNet':
    dict(
        cfg=_det(depth=50, base_channels=16, num_branch=3, test_branch_idx=1,
                 trident_dilations=(1, 2, 3), num_stages=3, strides=(1, 2, 2), dilations=(1, 1, 1),
                 out_indices=(2, )), input=(2, 3, 32, 32), prepare=_init_trident_convs),
    'mmdet.CSPDarknet':
    dict(cfg=_det(deepen_factor=0.33, widen_factor=0.125), input=(2, 3, 64, 64)),
    'mmdet.SwinTransformer':
    dict(
        cfg=_det(pretrain_img_size=64, embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 2, 4),
                 window_size=2, drop_path_rate=0.), input=(2, 3, 64, 64)),
    'mmdet.PyramidVisionTransformer':
    dict(cfg=_det(**_PVT), input=(2, 3, 64, 64)),
    'mmdet.PyramidVisionTransformerV2':
    dict(cfg=_det(**_PVT), input=(2, 3, 64, 64)),
    'mmdet.EfficientNet':
    dict(cfg=_det(arch='es'), input=(2, 3, 32, 32)),  # EdgeResidual and InvertedResidual blocks
    'mmdet.CSPNeXt':
    dict(cfg=_det(deepen_factor=0.167, widen_factor=0.125), input=(2, 3, 64, 64)),
}


def _tokens_to_map(x, hw_shape):
    """(B, H*W, C) tokens as a (B, C, H, W) map."""
    height, width = hw_shape
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], height, width)


def _inverted_residual(block, x):
    out = block.expand_conv(x) if block.with_expand_conv else x
    out = block.depthwise_conv(out)
    if block.with_se:
        out = block.se(out)
    return block.drop_path(block.linear_conv(out))


def _edge_residual(block, x):
    out = block.conv1(x)
    if block.with_se:
        out = block.se(out)
    return block.drop_path(block.conv2(out))


def _two_convs(block, x):
    return block.conv2(block.conv1(x))


def _spatial_reduction_attention(block, x, hw_shape):
    """The attention branch of a PVT layer: SRA(norm1(x)) without its identity."""
    attn = block.attn
    x_q = block.norm1(x)
    x_kv = x_q
    if attn.sr_ratio > 1:
        x_kv = attn.sr(_tokens_to_map(x_q, hw_shape)).flatten(2).transpose(1, 2)
        x_kv = attn.norm(x_kv)
    out = attn.attn(
        query=x_q.transpose(0, 1), key=x_kv.transpose(0, 1),
        value=x_kv.transpose(0, 1))[0].transpose(0, 1)
    return attn.dropout_layer(attn.proj_drop(out))


def _mix_ffn(block, x, hw_shape):
    """The MLP branch of a PVT layer: MixFFN(norm2(x)) without its identity."""
    ffn = block.ffn
    out = ffn.layers(_tokens_to_map(block.norm2(x), hw_shape))
    return ffn.dropout_layer(out.flatten(2).transpose(1, 2))


BRANCHES = {
    'mmdet.models.layers.inverted_residual.InvertedResidual': {
        'block': lambda b, x, a, k: (None, _inverted_residual(b, x)),
    },
    'mmdet.models.backbones.efficientnet.EdgeResidual': {
        'block': lambda b, x, a, k: (None, _edge_residual(b, x)),
    },
    'mmdet.models.backbones.darknet.ResBlock': {
        'block': lambda b, x, a, k: (None, _two_convs(b, x)),
    },
    'mmdet.models.layers.csp_layer.DarknetBottleneck': {
        'block': lambda b, x, a, k: (None, _two_convs(b, x)),
    },
    'mmdet.models.layers.csp_layer.CSPNeXtBlock': {
        'block': lambda b, x, a, k: (None, _two_convs(b, x)),
    },
    'mmdet.models.backbones.pvt.PVTEncoderLayer': {
        'msa': lambda b, x, a, k: (None, _spatial_reduction_attention(b, x, a[1])),
        'mlp': lambda b, x, a, k: (None, _mix_ffn(b, x, a[1])),
    },
}

__all__ = ['CASES', 'BRANCHES']
