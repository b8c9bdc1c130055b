"""StepViT with ``replace_attention_layers`` (StepNet on ViT, reading B, docs/methods.md §13):
the MSA branch without its attention matrix, ``x + Δ ⊙ proj(V(LN x))``, checked against the
equation written out from the upstream weights and a StepNet step size computed by hand."""
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmpretrain.models.backbones import VisionTransformer

from mmstiff.analysis import AttentionRecorder, TrajectoryRecorder
from mmstiff.models.backbones.step_vit import StepViT
from mmstiff.models.layers.value_branch import ValueBranch
from mmstiff.registry import MODELS

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
C = 32
ARCH = dict(embed_dims=C, num_layers=3, num_heads=4, feedforward_channels=64)
SMALL = dict(arch=ARCH, img_size=32, patch_size=8)  # 16 patches (+ 1 class token)
STEPNET = dict(type='mmstiff.StepNetAdaptor')
READING_B_CONFIGS = ('vit-lite-7-p4-stepnet-replace_1xb128-200e_cifar10.py',
                     'vit-lite-7-p4-stepnet-replace_1xb128-200e_cifar100.py',
                     'vit-lite-7-p8-stepnet-replace_1xb128-200e_stl10.py')


def upstream():
    torch.manual_seed(0)
    model = VisionTransformer(**SMALL)
    with torch.no_grad():
        model.pos_embed.normal_(std=0.5)
        model.cls_token.normal_(std=0.5)
    model.eval()
    return model


def replaced(reference, layers='all', **kwargs):
    """A reading-B StepViT with the reference's weights and randomised StepNet adaptors."""
    kwargs = dict(dict(msa_adaptor=STEPNET, replace_attention_layers=layers), **kwargs)
    model = StepViT(**SMALL, **kwargs)
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert not result.unexpected_keys
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'msa_adaptor' in name:
                p.normal_(std=0.7)
        for name, b in model.named_buffers():
            if name.endswith('running_mean'):
                b.normal_(std=0.3)
            elif name.endswith('running_var'):
                b.uniform_(0.5, 2.0)
    model.eval()
    return model


def tokens(batch=3):
    torch.manual_seed(2)
    return torch.randn(batch, 17, C)


def value_path(layer, x):
    """``proj(V(LN1 x))`` from the upstream layer's weights: the value rows of ``qkv``."""
    h = F.layer_norm(x, (C, ), layer.ln1.weight, layer.ln1.bias, layer.ln1.eps)
    qkv = layer.attn.qkv
    v = h @ qkv.weight[2 * C:].T + qkv.bias[2 * C:]
    return v @ layer.attn.proj.weight.T + layer.attn.proj.bias


def stepnet_by_hand(adaptor, x, f, batch_statistics):
    """Δ = σ(W_IE ⊙ BN(w_c0 u_c + w_c1 v_c) + b_IE), u = mean_tokens x, v = u + mean_tokens f."""
    u = x.mean(dim=1)
    v = u + f.mean(dim=1)
    w = adaptor.conv.weight.view(C, 2)
    z = w[:, 0] * u + w[:, 1] * v
    bn = adaptor.norm
    if batch_statistics:
        mean, var = z.mean(dim=0), z.var(dim=0, unbiased=False)
    else:
        mean, var = bn.running_mean, bn.running_var
    z = (z - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias
    return torch.sigmoid(adaptor.ie_weight * z + adaptor.ie_bias).unsqueeze(1)


@pytest.mark.parametrize('training', [False, True])
def test_replaced_layer_is_the_value_path_stepped_by_stepnet(training):
    ref = upstream()
    model = replaced(ref, layers=[1])
    model.train(training)
    x = tokens()
    theirs = ref.layers[1]
    with torch.no_grad():
        f = value_path(theirs, x)
        delta = stepnet_by_hand(model.layers[1].msa_adaptor, x, f, batch_statistics=training)
        y = x + delta * f
        expected = theirs.ffn(theirs.ln2(y), identity=y)
        out = model.layers[1](x)
    assert delta.shape == (3, 1, C) and delta.std() > 0.05  # a step size that varies
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert isinstance(model.layers[1].attn, ValueBranch)
    assert not isinstance(model.layers[0].attn, ValueBranch)


def test_changing_query_and_key_weights_leaves_the_output_unchanged():
    ref = upstream()
    model = replaced(ref, layers=[0])
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        before = model(images)[0].clone()
        for layer in model.layers:
            layer.attn.qkv.weight[:2 * C].normal_(std=1.0)
            layer.attn.qkv.bias[:2 * C].normal_(std=1.0)
        after = model(images)[0]
        # layers 1 and 2 keep their attention (reading A): there q and k matter
        assert not torch.allclose(before, after, atol=1e-3)
        torch.manual_seed(3)
        x = tokens()
        out = model.layers[0](x)
        model.layers[0].attn.qkv.weight[:2 * C].normal_(std=1.0)
        model.layers[0].attn.qkv.bias[:2 * C].zero_()
        torch.testing.assert_close(model.layers[0](x), out, rtol=0, atol=0)
        model.layers[0].attn.qkv.weight[2 * C:].mul_(1.5)  # the value rows are used
        assert not torch.allclose(model.layers[0](x), out, atol=1e-3)


def test_upstream_checkpoint_loads_with_only_the_adaptors_missing(tmp_path):
    from mmengine.runner import load_checkpoint
    ref = upstream()
    path = str(tmp_path / 'vit.pth')
    torch.save({'state_dict': ref.state_dict()}, path)
    model = StepViT(**SMALL, msa_adaptor=STEPNET, replace_attention_layers='all')
    result = model.load_state_dict(torch.load(path, weights_only=True)['state_dict'], strict=False)
    # conv, BN affine and running statistics, W_IE, b_IE (BN tolerates a missing
    # num_batches_tracked)
    adaptor_keys = ('conv.weight', 'norm.weight', 'norm.bias', 'norm.running_mean',
                    'norm.running_var', 'ie_weight', 'ie_bias')
    expected = {f'layers.{i}.msa_adaptor.{k}' for i in range(3) for k in adaptor_keys}
    assert set(result.missing_keys) == expected
    assert not result.unexpected_keys
    for name, value in ref.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    # the q, k and v rows all travel: a reading-B checkpoint is a ViT checkpoint plus adaptors
    assert model.layers[2].attn.qkv.weight.shape == (3 * C, C)
    # a reading-A checkpoint has exactly the same keys
    reading_a = StepViT(**SMALL, msa_adaptor=STEPNET)
    assert reading_a.state_dict().keys() == model.state_dict().keys()
    # through mmengine's loader and init_cfg=Pretrained, as a config would load it
    load_checkpoint(
        StepViT(**SMALL, msa_adaptor=STEPNET, replace_attention_layers='all'), path, strict=False)
    pretrained = StepViT(**SMALL, msa_adaptor=STEPNET, replace_attention_layers='all',
                         init_cfg=dict(type='Pretrained', checkpoint=path))
    pretrained.init_weights()
    for name, value in ref.state_dict().items():
        assert torch.equal(pretrained.state_dict()[name], value), name


def test_trajectory_recorder_sees_the_two_steps_and_the_step_size():
    ref = upstream()
    model = replaced(ref, layers='all')
    inputs = {}
    model.layers[0].register_forward_pre_hook(lambda m, a: inputs.update(x=a[0]))
    with torch.no_grad(), TrajectoryRecorder(model, level='branch') as recorder:
        model(torch.randn(3, 3, 32, 32))
    names = list(recorder.outputs)
    assert names == [f'layers.{i}.{step}' for i in range(3) for step in ('msa', 'mlp')]
    x = inputs['x']
    msa = recorder.outputs['layers.0.msa'][0]
    with torch.no_grad():
        f = value_path(ref.layers[0], x)
        delta = stepnet_by_hand(model.layers[0].msa_adaptor, x, f, batch_statistics=False)
    torch.testing.assert_close(msa.x_t, x)
    torch.testing.assert_close(msa.step, delta, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(msa.x_next, x + delta * f, rtol=1e-5, atol=1e-5)
    mlp = recorder.outputs['layers.0.mlp'][0]
    assert mlp.step is None  # Δ ≡ 1 on the MLP branch
    torch.testing.assert_close(mlp.x_t, msa.x_next)


def test_no_attention_map_is_recorded_for_a_replaced_layer():
    model = replaced(upstream(), layers=[0, 2])
    with torch.no_grad(), AttentionRecorder(model) as recorder:
        model(torch.randn(2, 3, 32, 32))
    assert list(recorder.outputs) == ['layers.1']


def test_training_reaches_the_value_rows_and_not_the_query_and_key_rows():
    model = replaced(upstream(), layers='all', drop_path_rate=0.1)
    model.train()
    model(torch.randn(4, 3, 32, 32))[0].pow(2).mean().backward()
    for layer in model.layers:
        grad = layer.attn.qkv.weight.grad
        assert grad[:2 * C].abs().sum() == 0 and layer.attn.qkv.bias.grad[:2 * C].abs().sum() == 0
        assert grad[2 * C:].abs().sum() > 0 and layer.attn.proj.weight.grad.abs().sum() > 0
        assert layer.msa_adaptor.ie_weight.grad.abs().sum() > 0


def test_feat_scale_and_layer_scale_on_the_value_path():
    ref = upstream()
    model = replaced(ref, layers=[0], feat_scale_layers=[0])
    with torch.no_grad():
        model.layers[0].attn.feat_scale.dc_scale.normal_()
        model.layers[0].attn.feat_scale.hc_scale.normal_()
    x = tokens()
    branch = model.layers[0].attn
    with torch.no_grad():
        f = value_path(ref.layers[0], x)
        s, t = branch.feat_scale.dc_scale, branch.feat_scale.hc_scale
        f_dc = f.mean(dim=1, keepdim=True)
        expected = f_dc * (1 + s) + (f - f_dc) * (1 + t)
        torch.testing.assert_close(branch(model.layers[0].ln1(x)), expected, rtol=1e-5, atol=1e-5)
    scaled = StepViT(**SMALL, msa_adaptor=STEPNET, replace_attention_layers='all',
                     layer_scale_init_value=0.25)
    scaled.eval()
    layer = scaled.layers[0]
    with torch.no_grad():
        h = layer.ln1(x)
        torch.testing.assert_close(layer.attn(h), 0.25 * layer.attn.proj(layer.attn.value(h)))


def test_constant_step_gives_the_attention_free_control():
    ref = upstream()
    model = StepViT(**SMALL, msa_adaptor=dict(type='mmstiff.ConstantStep'),
                    replace_attention_layers='all')
    model.load_state_dict(ref.state_dict())
    model.eval()
    x = tokens()
    theirs = ref.layers[2]
    with torch.no_grad():
        y = x + value_path(theirs, x)
        torch.testing.assert_close(model.layers[2](x), theirs.ffn(theirs.ln2(y), identity=y),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kwargs,message', [
    (dict(replace_attention_layers=[0]), r'layers \[0\], which have no msa_adaptor'),
    (dict(msa_adaptor=STEPNET, msa_adaptor_layers=[0],
          replace_attention_layers=[0, -1]), r'layers \[2\], which have no msa_adaptor'),
    (dict(msa_adaptor=STEPNET, attn_scale_layers=[1],
          replace_attention_layers='all'), r'share the layers \[1\]'),
    (dict(msa_adaptor=STEPNET, replace_attention_layers='some'), "replace_attention_layers='some'"),
    (dict(msa_adaptor=STEPNET, replace_attention_layers=[3]), 'replace_attention_layers holds 3'),
])
def test_bad_configuration_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StepViT(**SMALL, **kwargs)


def test_layer_alone_refuses_a_replaced_attention_without_a_step_size():
    from mmstiff.models.backbones.step_vit import StepTransformerEncoderLayer
    with pytest.raises(ValueError, match='replace_attention=True needs an msa_adaptor'):
        StepTransformerEncoderLayer(C, 4, 64, replace_attention=True)


@pytest.mark.parametrize('name', READING_B_CONFIGS)
def test_reading_b_configs_replace_every_attention_and_keep_the_rest(name):
    cfg = Config.fromfile(osp.join(REPO, 'configs', 'vit', name))
    reading_a = Config.fromfile(
        osp.join(REPO, 'configs', 'vit', name.replace('-stepnet-replace', '-stepnet')))
    backbone = dict(cfg.model.backbone)
    assert backbone.pop('replace_attention_layers') == 'all'
    assert backbone == reading_a.model.backbone and backbone['msa_adaptor'] == STEPNET
    for field in ('train_dataloader', 'optim_wrapper', 'param_scheduler', 'train_cfg'):
        assert cfg[field] == reading_a[field], field
    model = MODELS.build(cfg.model.backbone)
    assert all(isinstance(layer.attn, ValueBranch) for layer in model.layers)
    assert all(layer.msa_adaptor is not None for layer in model.layers)
