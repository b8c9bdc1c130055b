"""StepSwin: equal to mmpretrain's SwinTransformer at initialisation; AttnScale with relative
position bias and shift masks checked against the explicit A_LP + (1 + ω) A_HP."""
import pytest
import torch
import torch.nn.functional as F
from mmpretrain.models.backbones import SwinTransformer
from mmpretrain.models.utils.attention import ShiftWindowMSA

from mmstiff.models.backbones.step_swin import StepSwin
from mmstiff.models.layers import record_attention_maps

# 64x64 images, patch 4: a 16x16 then an 8x8 token map; window 4, so the odd blocks of both
# stages shift their windows and use the additive shift mask
SMALL = dict(
    arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=64, window_size=4,
    out_indices=(0, 1), drop_path_rate=0.)


def upstream(**kwargs):
    torch.manual_seed(0)
    model = SwinTransformer(**dict(SMALL, **kwargs))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'relative_position_bias_table' in name:
                p.normal_(std=0.5)
    model.eval()
    return model


def ours_like(reference, **kwargs):
    model = StepSwin(**dict(SMALL, **kwargs))
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert all('attn_scale' in k or 'feat_scale' in k for k in result.missing_keys)
    model.eval()
    return model


def randomise(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split('.')[-1] in ('omega', 'dc_scale', 'hc_scale'):
                p.normal_(std=0.7)


def images(batch=2):
    torch.manual_seed(2)
    return torch.randn(batch, 3, 64, 64)


def test_switches_at_init_equal_mmpretrain():
    ref = upstream()
    x = images()
    expected = ref(x)
    for kwargs in (dict(), dict(attn_scale_layers='all', feat_scale_layers='all')):
        model = ours_like(ref, **kwargs)
        for out, exp in zip(model(x), expected):
            torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)


def test_shifted_blocks_really_use_masks():
    model = ours_like(upstream(), attn_scale_layers='all')
    randomise(model)
    shifts = [block.attn.shift_size for stage in model.stages for block in stage.blocks]
    assert shifts == [0, 2, 0, 2]
    attn = model.stages[0].blocks[1].attn
    passed = []  # the mask each call of the window attention receives

    def capture(module, args, kwargs):
        passed.append(kwargs.get('mask'))

    def drop_mask(module, args, kwargs):
        return args, dict(kwargs, mask=None)

    torch.manual_seed(5)
    tokens = torch.randn(2, 256, 16)
    unshifted = model.stages[0].blocks[0].attn
    handles = [
        m.w_msa.register_forward_pre_hook(capture, with_kwargs=True) for m in (attn, unshifted)
    ]
    with torch.no_grad():
        masked = attn(tokens, (16, 16))
        unshifted(tokens, (16, 16))
    for handle in handles:
        handle.remove()
    # the shifted block passes the shift mask: 0 within a region, -100 across regions; windows
    # inside the map hold one region (all 0), the windows at the wrapped-around edges several
    expected = ShiftWindowMSA.get_attn_mask((16, 16), window_size=4, shift_size=2)
    assert passed[1] is None  # the unshifted block has no mask
    torch.testing.assert_close(passed[0], expected)
    assert set(expected.unique().tolist()) == {0.0, -100.0}
    masked_windows = (expected == -100).flatten(1).any(1)
    assert not masked_windows[0] and masked_windows[-1] and masked_windows.sum() == 7
    # and the mask changes the output: the same block with the mask dropped differs exactly in
    # the tokens of the windows that hold several regions
    handle = attn.w_msa.register_forward_pre_hook(drop_mask, with_kwargs=True)
    with torch.no_grad():
        unmasked = attn(tokens, (16, 16))
    handle.remove()
    differs = (masked - unmasked).abs().amax(-1) > 1e-4  # (B, 256) tokens
    assert differs.sum() == 2 * 7 * 16  # 2 images, 7 windows of 16 tokens


def explicit_window_attention(w_msa, x, mask, omega):
    """Upstream window attention written out, with Â = A_LP + (1 + ω)(A - A_LP)."""
    B_, N, C = x.shape
    H = w_msa.num_heads
    q, k, v = F.linear(x, w_msa.qkv.weight, w_msa.qkv.bias).view(B_, N, 3, H,
                                                                 C // H).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-2, -1) * (C // H)**-0.5
    table = w_msa.relative_position_bias_table
    bias = table[w_msa.relative_position_index.view(-1)].view(N, N, H).permute(2, 0, 1)
    logits = logits + bias
    if mask is not None:
        nW = mask.shape[0]
        logits = (logits.view(B_ // nW, nW, H, N, N) + mask[None, :, None]).view(B_, H, N, N)
    a = logits.softmax(-1)
    a_lp = torch.full((N, N), 1.0 / N)
    a_hat = a_lp + (1 + omega.view(H, 1, 1)) * (a - a_lp)
    out = (a_hat @ v).transpose(1, 2).reshape(B_, N, C)
    return F.linear(out, w_msa.proj.weight, w_msa.proj.bias), a, a_hat


@pytest.mark.parametrize('shift', [0, 2])
def test_attn_scale_closed_form_with_bias_and_shift_mask_equals_explicit(shift):
    model = ours_like(upstream(), attn_scale_layers='all')
    randomise(model)
    w_msa = model.stages[0].blocks[1 if shift else 0].attn.w_msa
    mask = ShiftWindowMSA.get_attn_mask((16, 16), window_size=4, shift_size=shift)
    assert (mask is None) == (shift == 0)
    torch.manual_seed(3)
    windows = torch.randn(2 * 16, 16, 16)  # 2 images x 16 windows, 16 tokens each
    expected, a, a_hat = explicit_window_attention(w_msa, windows, mask,
                                                   w_msa.attn_scale.omega.detach())
    torch.testing.assert_close(a.sum(-1), torch.ones(32, 2, 16))  # masked rows still sum to 1
    torch.testing.assert_close(w_msa(windows, mask=mask), expected, rtol=1e-5, atol=1e-5)
    with record_attention_maps(w_msa) as maps:
        torch.testing.assert_close(w_msa(windows, mask=mask), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(maps[''], a_hat, rtol=1e-5, atol=1e-6)


def test_feat_scale_uses_the_mean_over_the_whole_feature_map():
    ref = upstream()
    model = ours_like(ref, feat_scale_layers=[1])
    randomise(model)
    ours, theirs = model.stages[0].blocks[1].attn, ref.stages[0].blocks[1].attn
    torch.manual_seed(4)
    tokens = torch.randn(2, 256, 16)
    merged = theirs(tokens, (16, 16))
    s, t = ours.feat_scale.dc_scale.detach(), ours.feat_scale.hc_scale.detach()
    x_dc = merged.mean(1, keepdim=True)
    expected = x_dc * (1 + s) + (merged - x_dc) * (1 + t)
    torch.testing.assert_close(ours(tokens, (16, 16)), expected, rtol=1e-5, atol=1e-5)
    assert model.stages[0].blocks[0].attn.feat_scale is None


def test_attention_maps_on_request_do_not_change_outputs():
    model = ours_like(upstream(), attn_scale_layers=[0, 1, 3], feat_scale_layers='all')
    randomise(model)
    x = images()
    fast = model(x)
    with record_attention_maps(model) as maps:
        recorded = model(x)
    for out, exp in zip(recorded, fast):
        torch.testing.assert_close(out, exp, rtol=1e-5, atol=1e-5)
    shapes = {name: tuple(m.shape) for name, m in maps.items()}
    assert shapes == {
        'stages.0.blocks.0.attn.w_msa': (32, 2, 16, 16),
        'stages.0.blocks.1.attn.w_msa': (32, 2, 16, 16),
        'stages.1.blocks.0.attn.w_msa': (8, 4, 16, 16),
        'stages.1.blocks.1.attn.w_msa': (8, 4, 16, 16)
    }


def test_training_reaches_the_new_parameters_and_keeps_drop_path():
    model = StepSwin(**dict(SMALL, drop_path_rate=0.2), attn_scale_layers='all',
                     feat_scale_layers='all')
    ref = SwinTransformer(**dict(SMALL, drop_path_rate=0.2))
    drop = [b.attn.drop.drop_prob for s in model.stages for b in s.blocks]
    assert drop == [b.attn.drop.drop_prob for s in ref.stages for b in s.blocks]
    randomise(model)
    model.train()
    sum(out.pow(2).mean() for out in model(images(batch=2))).backward()
    for name, p in model.named_parameters():
        if 'attn_scale' in name or 'feat_scale' in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize('kwargs,message', [
    (dict(attn_scale_layers=[4]), 'attn_scale_layers holds 4'),
    (dict(feat_scale_layers='every'), "feat_scale_layers='every'"),
])
def test_bad_configuration_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StepSwin(**SMALL, **kwargs)
