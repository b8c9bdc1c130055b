"""CaiT: equal to timm's Cait with the same weights, AttnScale / FeatScale checked against their
formulas written out independently from the weights (talking heads included)."""
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from script_modules import load_script  # tests/

from mmstiff.models.backbones import CaiT
from mmstiff.models.layers import record_attention_maps
from mmstiff.registry import MODELS

timm_cait = pytest.importorskip('timm.models.cait')

ARCH = dict(embed_dims=32, num_layers=3, num_heads=4)
SMALL = dict(arch=ARCH, img_size=32, patch_size=8)  # 16 patches, no class token before the end
TIMM_SMALL = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4)
NEW_PARAMS = ('attn_scale', 'feat_scale')
CONVERTER = (Path(__file__).parents[2] / 'tools' / 'model_converters' / 'timm_to_mmstiff_cait.py')


def timm_model(num_classes=0, global_pool='token', **kwargs):
    """A timm Cait with every parameter random and of order one in effect (weights of
    ~1/sqrt(fan-in), LayerScale, embeddings, norms, biases), so every branch matters."""
    torch.manual_seed(0)
    model = timm_cait.Cait(
        **dict(TIMM_SMALL, num_classes=num_classes, global_pool=global_pool, **kwargs))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('norm1.weight') or name.endswith('norm2.weight') or \
                    name == 'norm.weight':
                p.uniform_(0.5, 1.5)
            elif p.dim() == 1:  # biases, LayerScale γ
                p.normal_(std=0.3)
            else:
                p.normal_(std=p[0].numel()**-0.5 if p.dim() == 2 else 0.5)
    model.eval()
    return model


def ours_like(reference, **kwargs):
    model = CaiT(**dict(SMALL, **kwargs))
    state_dict = {k: v for k, v in reference.state_dict().items() if not k.startswith('head.')}
    result = model.load_state_dict(state_dict, strict=False)
    assert not result.unexpected_keys
    assert all(any(tag in k for tag in NEW_PARAMS) for k in result.missing_keys), \
        result.missing_keys
    model.eval()  # mmpretrain's BaseBackbone.train returns None: no chaining
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


def talking_heads_explicit(attn_module, x, omega=None):
    """The projected output and the map ``Â`` of a talking-heads layer, written out by hand:
    L = W_l·(q kᵀ/√d) + b_l over heads, A = W_w·softmax(L) + b_w, Â = A_LP + (1+ω)(A - A_LP)."""
    B, N, C = x.shape
    H = attn_module.num_heads
    q, k, v = F.linear(x, attn_module.qkv.weight,
                       attn_module.qkv.bias).view(B, N, 3, H, C // H).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-2, -1) / (C // H)**0.5
    wl, bl = attn_module.proj_l.weight, attn_module.proj_l.bias
    ww, bw = attn_module.proj_w.weight, attn_module.proj_w.bias
    logits = torch.einsum('hg,bgij->bhij', wl, logits) + bl.view(1, H, 1, 1)
    a = torch.einsum('hg,bgij->bhij', ww, logits.softmax(-1)) + bw.view(1, H, 1, 1)
    if omega is not None:
        a_lp = torch.full((N, N), 1.0 / N)
        a = a_lp + (1 + omega.view(H, 1, 1)) * (a - a_lp)
    out = (a @ v).transpose(1, 2).reshape(B, N, C)
    return F.linear(out, attn_module.proj.weight, attn_module.proj.bias), a


@pytest.mark.parametrize('out_type,global_pool', [('cls_token', 'token'), ('avg_featmap', 'avg')])
def test_plain_cait_equals_timm(out_type, global_pool):
    ref = timm_model(global_pool=global_pool)
    model = ours_like(ref, out_type=out_type)
    x = images()
    assert set(model.state_dict()) == {k for k in ref.state_dict() if not k.startswith('head.')}
    (out, ) = model(x)
    torch.testing.assert_close(out, ref(x), rtol=1e-5, atol=1e-5)
    raw = ours_like(ref, out_type='raw')
    torch.testing.assert_close(raw(x)[0], ref.forward_features(x), rtol=1e-5, atol=1e-5)


def test_switches_at_their_initial_values_equal_timm():
    ref = timm_model()
    model = ours_like(ref, attn_scale_layers='all', feat_scale_layers=[0, -1])
    missing = set(model.state_dict()) - set(ref.state_dict())
    assert missing == {f'blocks.{i}.attn.attn_scale.omega'
                       for i in range(3)} | {
                           f'blocks.{i}.attn.feat_scale.{n}'
                           for i in (0, 2)
                           for n in ('dc_scale', 'hc_scale')
                       }
    x = images()
    torch.testing.assert_close(model(x)[0], ref(x), rtol=1e-5, atol=1e-5)
    with record_attention_maps(model):  # the explicit-matrix path, ω = 0
        torch.testing.assert_close(model(x)[0], ref(x), rtol=1e-5, atol=1e-5)


def test_attn_scale_matches_the_explicit_matrix_after_head_mixing():
    ref = timm_model()
    model = ours_like(ref, attn_scale_layers=[1])
    randomise(model)
    attn = model.blocks[1].attn
    omega = attn.attn_scale.omega.detach()
    torch.manual_seed(3)
    tokens = torch.randn(2, 16, 32)
    expected, a_hat = talking_heads_explicit(attn, tokens, omega)
    plain, _ = talking_heads_explicit(attn, tokens)
    assert (expected - plain).abs().max() > 1e-2  # ω really changes the layer
    torch.testing.assert_close(attn(tokens), expected, rtol=1e-5, atol=1e-5)
    with record_attention_maps(model) as maps:
        recorded = attn(tokens)
    torch.testing.assert_close(recorded, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(maps['blocks.1.attn'], a_hat, rtol=1e-5, atol=1e-6)
    # and through the whole backbone: ω != 0 moves the class token away from timm's
    x = images()
    assert (model(x)[0] - ref(x)).abs().max() > 1e-3


def test_feat_scale_acts_on_the_projected_attention_output():
    ref = timm_model()
    model = ours_like(ref, feat_scale_layers='all')
    randomise(model)
    layer, theirs = model.blocks[2], ref.blocks[2]
    s, t = layer.attn.feat_scale.dc_scale.detach(), layer.attn.feat_scale.hc_scale.detach()
    torch.manual_seed(4)
    tokens = torch.randn(2, 16, 32)
    projected = theirs.attn(tokens)
    x_dc = projected.mean(1, keepdim=True)
    scaled = x_dc * (1 + s) + (projected - x_dc) * (1 + t)
    torch.testing.assert_close(layer.attn(tokens), scaled, rtol=1e-5, atol=1e-5)
    y = tokens + theirs.gamma_1 * _feat_scaled(theirs, tokens, s, t)  # FeatScale before γ₁
    expected = y + theirs.gamma_2 * theirs.mlp(theirs.norm2(y))
    torch.testing.assert_close(layer(tokens), expected, rtol=1e-5, atol=1e-5)


def _feat_scaled(timm_block, tokens, s, t):
    out = timm_block.attn(timm_block.norm1(tokens))
    dc = out.mean(1, keepdim=True)
    return dc * (1 + s) + (out - dc) * (1 + t)


def test_outputs_of_intermediate_and_last_layers():
    ref = timm_model()
    model = ours_like(ref, out_indices=(0, -1), out_type='featmap')
    x = images()
    first, last = model(x)
    assert first.shape == last.shape == (2, 32, 4, 4)
    outs = ours_like(ref, out_indices=(0, 1, 2), out_type='raw')(x)
    assert [o.shape for o in outs] == [(2, 16, 32), (2, 16, 32), (2, 17, 32)]
    # featmap of the last layer: the normed patches after class attention, as a grid
    torch.testing.assert_close(last, outs[2][:, 1:].transpose(1, 2).reshape(2, 32, 4, 4))
    torch.testing.assert_close(first, outs[0].transpose(1, 2).reshape(2, 32, 4, 4))


def test_other_input_sizes_get_a_resized_position_embedding():
    from mmpretrain.models.utils import resize_pos_embed
    model = ours_like(timm_model(), out_type='raw')
    x = images(size=48)
    seen = {}
    hook = model.blocks[0].register_forward_pre_hook(lambda m, a: seen.update(x=a[0]))
    model(x)
    hook.remove()
    tokens, _ = model.patch_embed(x)
    pos = resize_pos_embed(model.pos_embed, (4, 4), (6, 6), 'bicubic', num_extra_tokens=0)
    torch.testing.assert_close(seen['x'], tokens + pos)

    bigger = CaiT(**dict(SMALL, img_size=64))  # 8 x 8 patches from a 4 x 4 checkpoint
    bigger.load_state_dict(model.state_dict())
    expected = resize_pos_embed(model.pos_embed, (4, 4), (8, 8), 'bicubic', num_extra_tokens=0)
    torch.testing.assert_close(bigger.pos_embed, expected)


def test_training_step_reaches_every_new_parameter():
    model = CaiT(**SMALL, attn_scale_layers='all', feat_scale_layers='all', drop_path_rate=0.1,
                 drop_rate=0.1)
    model.init_weights()
    randomise(model)
    model.train()
    model(images(batch=4))[0].pow(2).mean().backward()
    checked = 0
    for name, p in model.named_parameters():
        if any(tag in name for tag in NEW_PARAMS):
            checked += 1
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert checked == 3 * 3


def test_attention_dropout_with_attn_scale_uses_the_explicit_matrix():
    model = CaiT(**SMALL, attn_scale_layers='all', attn_drop_rate=0.5)
    model.train()
    attn = model.blocks[0].attn
    seen = []
    original = attn.attn_scale.scale_matrix
    attn.attn_scale.scale_matrix = lambda a: seen.append(a.shape) or original(a)
    attn(torch.randn(2, 16, 32))
    assert seen == [(2, 4, 16, 16)]


def test_init_weights_follows_timm():
    model = CaiT(**SMALL, attn_scale_layers='all', layer_scale_init_value=1e-3)
    model.init_weights()
    assert model.pos_embed.std() > 0.005 and model.cls_token.abs().sum() > 0
    assert torch.all(model.blocks[0].gamma_1 == 1e-3)
    assert torch.all(model.blocks[0].attn.attn_scale.omega == 0)
    assert torch.all(model.blocks[0].attn.proj_l.bias == 0)
    assert abs(model.blocks[0].mlp.fc1.weight.std() - 0.02) < 0.002  # N(0, 0.02²), 4096 draws
    assert model.blocks[0].attn.proj_l.weight.abs().max() < 0.1  # not PyTorch's U(-1/2, 1/2)
    assert torch.all(model.norm.weight == 1)


def test_built_from_the_registry_with_scoped_type():
    model = MODELS.build(dict(type='mmstiff.CaiT', **SMALL, feat_scale_layers=[1]))
    assert isinstance(model, CaiT)
    assert model.blocks[1].attn.feat_scale is not None and model.blocks[0].attn.feat_scale is None
    assert model.blocks[1].attn.attn_scale is None


@pytest.mark.parametrize('kwargs,message', [
    (dict(arch='l24'), "arch='l24'"),
    (dict(arch=dict(embed_dims=32, num_layers=3)), 'arch='),
    (dict(attn_scale_layers=[3]), 'attn_scale_layers holds 3'),
    (dict(feat_scale_layers=True), 'feat_scale_layers=True'),
    (dict(out_type='cls'), "out_type='cls'"),
    (dict(out_indices=[0]), "out_indices=\\[0\\] is not supported with out_type='cls_token'"),
    (dict(out_indices=[5], out_type='raw'), 'out_indices holds 5'),
    (dict(drop_path_rate=1.5), 'drop_path_rate=1.5'),
    (dict(layer_scale_init_value=0), 'layer_scale_init_value=0'),
    (dict(patch_size=5), 'patch_size=5'),
    (dict(frozen_stages=4), r'frozen_stages=4 is not supported; expected an int in \[-1, 3\]'),
    (dict(frozen_stages=True), 'frozen_stages=True'),
])
def test_bad_configuration_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CaiT(**dict(SMALL, **kwargs))


def _converter():
    return load_script(str(CONVERTER))


def test_converted_official_layout_reproduces_timm_logits(tmp_path):
    from mmpretrain.models import ImageClassifier
    ref = timm_model(num_classes=5)
    src, dst = tmp_path / 'cait.pth', tmp_path / 'cait_mmstiff.pth'
    # the official files: under 'model', every key prefixed with 'module.'
    torch.save({'model': {f'module.{k}': v for k, v in ref.state_dict().items()}}, src)
    _converter().main([str(src), str(dst)])
    state_dict = torch.load(dst, weights_only=True)['state_dict']
    classifier = ImageClassifier(
        backbone=dict(type='mmstiff.CaiT', **SMALL, attn_scale_layers='all'),
        head=dict(type='VisionTransformerClsHead', num_classes=5, in_channels=32)).eval()
    missing = classifier.load_state_dict(state_dict, strict=False).missing_keys
    assert sorted(missing) == [f'backbone.blocks.{i}.attn.attn_scale.omega' for i in range(3)]
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(classifier(x, mode='tensor'), ref(x), rtol=1e-5, atol=1e-5)


def test_converter_rejects_keys_of_other_models():
    with pytest.raises(ValueError, match="key 'fc.weight'"):
        _converter().convert_cait({'fc.weight': torch.zeros(1)})
    backbone = _converter().convert_cait(timm_model(num_classes=5).state_dict(), backbone_only=True)
    assert set(backbone) == set(CaiT(**SMALL).state_dict())


@pytest.mark.slow
@pytest.mark.parametrize('arch,factory', [('xxs24', 'cait_xxs24_224'), ('s24', 'cait_s24_224'),
                                          ('s36', 'cait_s36_384')])
def test_presets_have_timm_shapes_and_layer_scale(arch, factory):
    ref = getattr(timm_cait, factory)(num_classes=0)
    img_size = ref.patch_embed.img_size
    ours = CaiT(arch=arch, img_size=img_size)
    theirs = ref.state_dict()
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.items()}
    torch.testing.assert_close(ours.blocks[0].gamma_1, theirs['blocks.0.gamma_1'])
    torch.testing.assert_close(ours.blocks_token_only[1].gamma_2,
                               theirs['blocks_token_only.1.gamma_2'])


def test_recorders_see_the_patch_layers_as_two_steps():
    from mmstiff.analysis import AttentionRecorder, TrajectoryRecorder
    ref = timm_model()
    model = ours_like(ref, attn_scale_layers=[0])
    randomise(model)
    x = images()
    with torch.no_grad(), TrajectoryRecorder(model, level='branch') as recorder:
        model(x)
    names = [f'blocks.{i}.{step}' for i in range(3) for step in ('msa', 'mlp')]
    assert list(recorder.outputs) == names  # the class-attention layers step another state
    msa, mlp = recorder.outputs['blocks.1.msa'][0], recorder.outputs['blocks.1.mlp'][0]
    layer = ref.blocks[1]
    with torch.no_grad():
        mid = msa.x_t + layer.gamma_1 * layer.attn(layer.norm1(msa.x_t))
        torch.testing.assert_close(msa.x_next, mid, rtol=1e-5, atol=1e-5)
        out = mid + layer.gamma_2 * layer.mlp(layer.norm2(mid))
        torch.testing.assert_close(mlp.x_next, out, rtol=1e-5, atol=1e-5)
    with torch.no_grad(), AttentionRecorder(model) as attention:
        model(x)
    assert list(attention.outputs) == ['blocks.0', 'blocks.1', 'blocks.2']
    maps = attention.outputs['blocks.0'][0]
    _, expected = talking_heads_explicit(
        model.blocks[0].attn, model.blocks[0].norm1(recorder.outputs['blocks.0.msa'][0].x_t),
        model.blocks[0].attn.attn_scale.omega.detach())
    torch.testing.assert_close(maps, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('frozen', [1, 3])
def test_frozen_stages_stop_training_and_keep_eval_mode(frozen):
    torch.manual_seed(0)
    # LayerScale 1: every trainable parameter gets a gradient large enough to move it
    net = CaiT(**SMALL, frozen_stages=frozen, layer_scale_init_value=1.).train()
    frozen_prefixes = ['patch_embed.', 'pos_embed'] + [f'blocks.{i}.' for i in range(frozen)]
    if frozen == 3:  # all patch layers: the class token, class attention and norm too
        frozen_prefixes += ['cls_token', 'blocks_token_only.', 'norm.']
    before = {k: v.clone() for k, v in net.state_dict().items()}
    trainable = [p for p in net.parameters() if p.requires_grad]
    if trainable:
        net(torch.randn(2, 3, 32, 32))[-1].pow(2).sum().backward()
        torch.optim.SGD(trainable, lr=0.1).step()
    for name, param in net.named_parameters():
        is_frozen = name.startswith(tuple(frozen_prefixes))
        assert param.requires_grad != is_frozen, name
        if is_frozen:
            assert param.grad is None and torch.equal(param, before[name]), name
        else:  # reached by the loss
            assert param.grad is not None, name
    # frozen layers stay in eval mode after .train() (no dropout, no drop path); others train
    net = CaiT(**SMALL, drop_path_rate=0.5, frozen_stages=frozen).train()
    assert not net.blocks[0].training and not net.patch_embed.training
    assert net.blocks[-1].training == (frozen < 3)
    x = torch.randn(2, 16, 32)
    assert torch.equal(net.blocks[0](x), net.blocks[0](x))
