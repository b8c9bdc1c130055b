"""StepViT: equal to mmpretrain's VisionTransformer at initialisation, each switch checked
against its formula computed independently from the upstream modules."""
import pytest
import torch
import torch.nn.functional as F
from mmpretrain.models.backbones import VisionTransformer

from mmstiff.models.backbones.step_vit import StepViT
from mmstiff.models.layers import record_attention_maps
from mmstiff.models.utils import select_layers
from mmstiff.registry import MODELS

ARCH = dict(embed_dims=32, num_layers=3, num_heads=4, feedforward_channels=64)
SMALL = dict(arch=ARCH, img_size=32, patch_size=8)  # 16 patches (+ 1 class token)
NEW_PARAMS = ('attn_scale', 'feat_scale', 'adaptor', '_aug.')


def upstream(**kwargs):
    torch.manual_seed(0)
    model = VisionTransformer(**dict(SMALL, **kwargs))
    with torch.no_grad():  # non-trivial class token / position embedding
        for p in (model.pos_embed, model.cls_token):
            if p is not None:
                p.normal_(std=0.5)
    model.eval()
    return model


def ours_like(reference, **kwargs):
    model = StepViT(**dict(SMALL, **kwargs))
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert all(any(tag in k for tag in NEW_PARAMS) for k in result.missing_keys), \
        result.missing_keys
    model.eval()
    return model


def randomise(model, names=('omega', 'dc_scale', 'hc_scale')):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split('.')[-1] in names:
                p.normal_(std=0.7)


def images(batch=2, size=32):
    torch.manual_seed(2)
    return torch.randn(batch, 3, size, size)


@pytest.mark.parametrize('kwargs', [
    dict(),
    dict(out_type='avg_featmap', with_cls_token=False),
    dict(out_type='featmap', out_indices=(0, 2), layer_scale_init_value=0.1),
])
def test_every_switch_at_init_equals_mmpretrain(kwargs):
    ref = upstream(**kwargs)
    x = images()
    plain = ours_like(ref, **kwargs)
    switched = ours_like(ref, attn_scale_layers='all', feat_scale_layers='all', **kwargs)
    expected = ref(x)
    for model in (plain, switched):
        for out, exp in zip(model(x), expected):
            torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)


def test_no_switch_has_no_new_parameters():
    ref = upstream()
    assert StepViT(**SMALL).state_dict().keys() == ref.state_dict().keys()


def explicit_attention(attn_module, x, omega=None):
    """Â V through the projection, written out from the upstream weights."""
    B, N, C = x.shape
    H = attn_module.num_heads
    q, k, v = F.linear(x, attn_module.qkv.weight,
                       attn_module.qkv.bias).view(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-2, -1) / (C // H)**0.5, dim=-1)
    if omega is not None:
        a_lp = torch.full((N, N), 1.0 / N)
        a = a_lp + (1 + omega.view(H, 1, 1)) * (a - a_lp)
    out = (a @ v).transpose(1, 2).reshape(B, N, C)
    return F.linear(out, attn_module.proj.weight, attn_module.proj.bias), a


@pytest.mark.parametrize('with_cls_token', [True, False])
def test_attn_scale_closed_form_equals_explicit_matrix(with_cls_token):
    kwargs = dict(with_cls_token=with_cls_token,
                  out_type='cls_token' if with_cls_token else 'avg_featmap')
    model = ours_like(upstream(**kwargs), attn_scale_layers='all', **kwargs)
    randomise(model)
    attn = model.layers[1].attn
    torch.manual_seed(3)
    tokens = torch.randn(2, 17 if with_cls_token else 16, 32)
    expected, _ = explicit_attention(attn, tokens, attn.attn_scale.omega.detach())
    torch.testing.assert_close(attn(tokens), expected, rtol=1e-5, atol=1e-5)


def test_attention_maps_on_request_do_not_change_outputs():
    model = ours_like(upstream(), attn_scale_layers=[0, 2], feat_scale_layers=[1])
    randomise(model)
    x = images()
    fast = model(x)[0]
    inputs = {}
    hook = model.layers[2].register_forward_pre_hook(lambda m, a: inputs.update(x=a[0]))
    with record_attention_maps(model) as maps:
        recorded = model(x)[0]
    hook.remove()
    torch.testing.assert_close(recorded, fast, rtol=1e-5, atol=1e-5)
    assert sorted(maps) == [f'layers.{i}.attn' for i in range(3)]
    assert all(m.shape == (2, 4, 17, 17) for m in maps.values())
    layer = model.layers[2]
    _, expected = explicit_attention(layer.attn, layer.ln1(inputs['x']),
                                     layer.attn.attn_scale.omega.detach())
    torch.testing.assert_close(maps['layers.2.attn'], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(maps['layers.1.attn'].sum(-1), torch.ones(2, 4, 17))
    assert not model.layers[0].attn.keep_attn_map


def test_feat_scale_acts_on_the_projected_msa_output():
    ref = upstream(layer_scale_init_value=0.5)
    model = ours_like(ref, feat_scale_layers='all', layer_scale_init_value=0.5)
    randomise(model)
    torch.manual_seed(4)
    tokens = torch.randn(2, 17, 32)
    ours, theirs = model.layers[0].attn, ref.layers[0].attn
    s, t = ours.feat_scale.dc_scale.detach(), ours.feat_scale.hc_scale.detach()
    projected, _ = explicit_attention(theirs, tokens)
    x_dc = projected.mean(1, keepdim=True)
    scaled = x_dc * (1 + s) + (projected - x_dc) * (1 + t)
    expected = theirs.gamma1(scaled)
    torch.testing.assert_close(ours(tokens), expected, rtol=1e-5, atol=1e-5)


def test_constant_adaptor_scales_both_branches():
    ref = upstream()
    step = dict(type='mmstiff.ConstantStep', step=0.5)
    model = ours_like(ref, msa_adaptor=step, mlp_adaptor=step, mlp_adaptor_layers=[-1])
    torch.manual_seed(5)
    x = torch.randn(2, 17, 32)
    for i, layer in enumerate(ref.layers):
        mlp_step = 0.5 if i == 2 else 1.0
        y = x + 0.5 * layer.attn(layer.ln1(x))
        expected = y + mlp_step * (layer.ffn(layer.ln2(y)) - layer.ln2(y))
        torch.testing.assert_close(model.layers[i](x), expected, rtol=1e-5, atol=1e-5)
    assert model.layers[0].mlp_adaptor is None and model.layers[2].mlp_adaptor is not None


def test_stepnet_adaptor_gives_one_step_size_per_block():
    ref = upstream()
    model = ours_like(ref, msa_adaptor=dict(type='mmstiff.StepNetAdaptor'))
    adaptors = [layer.msa_adaptor for layer in model.layers]
    assert len({id(a) for a in adaptors}) == 3
    steps, calls = {}, []
    layer = model.layers[1]

    def record(module, args, out):
        calls.append(1)
        steps.update(x=args[0], f=args[1], delta=out)

    layer.msa_adaptor.register_forward_hook(record)
    torch.manual_seed(6)
    x = torch.randn(2, 17, 32)
    out = layer(x)
    assert len(calls) == 1
    assert steps['delta'].shape == (2, 1, 32)
    torch.testing.assert_close(steps['x'], x)
    f = ref.layers[1].attn(ref.layers[1].ln1(x))
    torch.testing.assert_close(steps['f'], f, rtol=1e-5, atol=1e-5)
    y = x + steps['delta'] * f
    expected = ref.layers[1].ffn(ref.layers[1].ln2(y), identity=y)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('scale', [1.0, 0.75])
def test_augmented_shortcuts_match_the_block_equation(scale):
    ref = upstream()
    model = ours_like(ref, aug_shortcut=dict(num_paths=2, num_blocks=4, scale=scale),
                      aug_shortcut_layers=[0])
    layer, theirs = model.layers[0], ref.layers[0]
    assert model.layers[1].msa_aug is None

    def aug(paths, h):  # Σ_i GELU(h Θ_iᵀ + b_i) from the expanded circulant matrices
        return sum(F.gelu(F.linear(h, p.weight, p.bias)) for p in paths)

    torch.manual_seed(7)
    x = torch.randn(2, 17, 32)
    h = theirs.ln1(x)
    y = scale * (x + theirs.attn(h) + aug(layer.msa_aug.paths, h))
    h = theirs.ln2(y)
    expected = scale * (theirs.ffn(h, identity=y) + aug(layer.mlp_aug.paths, h))
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_training_step_reaches_every_new_parameter():
    # the StepNet adaptor's IE weight starts at 0, so only its IE parameters get a gradient on
    # the first step; everything else new must be reached
    model = StepViT(**SMALL, attn_scale_layers='all', feat_scale_layers='all',
                    msa_adaptor=dict(type='mmstiff.StepNetAdaptor'), aug_shortcut=dict(num_paths=2),
                    drop_path_rate=0.1)
    randomise(model)
    model.train()
    model(images(batch=4))[0].pow(2).mean().backward()
    reached = ('attn_scale', 'feat_scale', '_aug.', '_adaptor.ie_')
    checked = 0
    for name, p in model.named_parameters():
        if any(tag in name for tag in reached):
            checked += 1
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert checked == 3 * (1 + 2 + 2 * 2 * 2 + 2)


def test_attention_dropout_with_attn_scale_uses_the_explicit_path():
    model = StepViT(**SMALL, attn_scale_layers='all', layer_cfgs=dict(attn_drop_rate=0.5))
    model.train()
    attn = model.layers[0].attn
    torch.manual_seed(8)
    tokens = torch.randn(2, 17, 32)
    seen = []
    original = attn._explicit_attention
    attn._explicit_attention = lambda *a: seen.append(1) or original(*a)
    attn(tokens)
    assert seen == [1]


def test_built_from_the_registry_with_scoped_type():
    model = MODELS.build(dict(type='mmstiff.StepViT', **SMALL, attn_scale_layers=[1]))
    assert isinstance(model, StepViT)
    assert model.layers[1].attn.attn_scale is not None and model.layers[0].attn.attn_scale is None


@pytest.mark.parametrize('kwargs,message', [
    (dict(attn_scale_layers='some'), "attn_scale_layers='some'"),
    (dict(feat_scale_layers=[3]), 'feat_scale_layers holds 3'),
    (dict(attn_scale_layers=True), 'attn_scale_layers=True'),
    (dict(aug_shortcut=dict(paths=2)), "unknown keys \\['paths'\\]"),
    (dict(aug_shortcut=dict(scale=0)), "aug_shortcut\\['scale'\\]=0"),
    (dict(aug_shortcut=dict(branches=['ffn'])), "aug_shortcut\\['branches'\\]"),
    (dict(msa_adaptor=dict(step=0.5)), 'adaptor='),
])
def test_bad_configuration_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StepViT(**SMALL, **kwargs)


def test_select_layers():
    assert select_layers('f', None, 4) == frozenset()
    assert select_layers('f', 'all', 3) == {0, 1, 2}
    assert select_layers('f', [0, -1], 4) == {0, 3}


@pytest.mark.slow
def test_deit_small_checkpoint_loads_with_only_new_parameters_missing(tmp_path):
    from mmengine.runner import load_checkpoint
    torch.manual_seed(0)
    deit = VisionTransformer(arch='deit-small')
    with torch.no_grad():
        deit.pos_embed.normal_()
    path = str(tmp_path / 'deit-small.pth')
    torch.save({'state_dict': deit.state_dict()}, path)

    switches = dict(attn_scale_layers='all', feat_scale_layers='all',
                    msa_adaptor=dict(type='mmstiff.StepNetAdaptor'), msa_adaptor_layers=[-1])
    ours = StepViT(arch='deit-small', **switches)
    state_dict = torch.load(path, weights_only=True)['state_dict']
    missing = ours.load_state_dict(state_dict, strict=False).missing_keys
    expected = {
        f'layers.{i}.attn.{name}'
        for i in range(12)
        for name in ('attn_scale.omega', 'feat_scale.dc_scale', 'feat_scale.hc_scale')
    }
    assert {k for k in missing if 'msa_adaptor' not in k} == expected
    assert all(k.startswith('layers.11.msa_adaptor.') for k in missing if 'msa_adaptor' in k)

    # through init_cfg=Pretrained, as a config would do it
    ours = StepViT(arch='deit-small', init_cfg=dict(type='Pretrained', checkpoint=path), **switches)
    ours.init_weights()
    for name, value in deit.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name
    # and with mmengine's loader, which reports the missing keys without failing
    load_checkpoint(StepViT(arch='deit-small', **switches), path, strict=False)


def test_frozen_stages_freeze_the_rebuilt_layers():
    model = StepViT(**SMALL, frozen_stages=2, attn_scale_layers='all', feat_scale_layers=[0])
    ref = VisionTransformer(**SMALL, frozen_stages=2)
    ours = dict(model.named_parameters())
    for name, p in ref.named_parameters():  # the same parameters frozen as upstream
        assert ours[name].requires_grad == p.requires_grad, name
    for i, layer in enumerate(model.layers):  # new parameters included
        assert all(p.requires_grad == (i >= 2) for p in layer.parameters()), i
