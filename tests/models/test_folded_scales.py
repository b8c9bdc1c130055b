"""AttnScale and FeatScale folded into the attention's output projection (``fused`` 'auto' and
True) against the layers applied on their own (``fused=False``): StepViT, CaiT, StepSwin."""
import copy

import pytest
import torch

from mmstiff.models.backbones.step_vit import StepViT
from mmstiff.models.layers import FeatScale
from mmstiff.models.layers.attn_scale import AttnScale
from mmstiff.models.steps import set_fused

ARCH = dict(embed_dims=32, num_layers=2, num_heads=4, feedforward_channels=64)
SMALL = dict(arch=ARCH, img_size=32, patch_size=8)  # 16 patches (+ 1 class token)


def randomise_scales(model):
    """``model`` with random ω, s and t (all 0 at init, where the fold is the plain
    projection)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split('.')[-1] in ('omega', 'dc_scale', 'hc_scale'):
                p.normal_(std=0.7)
    return model


def pair(**kwargs):
    """``(reference, folded)``: the same StepViT with random ω, s, t, unfolded and folded."""
    torch.manual_seed(0)
    folded = randomise_scales(StepViT(**SMALL, **kwargs))
    return set_fused(copy.deepcopy(folded), False), folded


def images(batch=3):
    torch.manual_seed(2)
    return torch.randn(batch, 3, 32, 32)


def layer_calls(model):
    """The names of the AttnScale and FeatScale layers of ``model`` whose forward runs from now
    on, one entry per call (filled as the model runs)."""
    calls = []
    for m in model.modules():
        if isinstance(m, (AttnScale, FeatScale)):
            forward = m.forward
            m.forward = lambda *a, _f=forward, _m=type(m).__name__: calls.append(_m) or _f(*a)
    return calls


def outputs_and_grads(model, x):
    out = model(x)[0]
    out.pow(2).mean().backward()
    return out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def assert_equal_in_float64(got, want, got_grads, want_grads):
    """Outputs and the same parameters' gradients equal to float64 rounding."""
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-9, atol=1e-12,
                                   msg=name)


@pytest.mark.parametrize('mode', ['train', 'eval'])
@pytest.mark.parametrize(
    'switches',
    [
        dict(attn_scale_layers='all'),
        dict(feat_scale_layers='all'),
        dict(attn_scale_layers='all', feat_scale_layers=[1], layer_scale_init_value=0.3),
        dict(feat_scale_layers='all', replace_attention_layers=[0],
             msa_adaptor=dict(type='mmstiff.StepNetAdaptor')),  # ValueBranch in layer 0
    ])
def test_folded_equals_the_layers_outputs_and_every_gradient(switches, mode):
    # in float64: in float32 the class token's small gradient (after two token means) differs
    # by rounding, 0.6 % of its largest entry
    reference, folded = (m.double() for m in pair(**switches, drop_path_rate=0.0))
    getattr(reference, mode)()
    getattr(folded, mode)()
    ref_calls, fold_calls = layer_calls(reference), layer_calls(folded)
    x = images().double()
    want, want_grads = outputs_and_grads(reference, x)
    got, got_grads = outputs_and_grads(folded, x)
    assert ref_calls and not fold_calls  # the folded model never ran the layers themselves
    assert_equal_in_float64(got, want, got_grads, want_grads)


def test_feat_scale_is_not_folded_across_an_active_dropout():
    reference, folded = pair(feat_scale_layers='all', attn_scale_layers='all', drop_rate=0.5)
    folded.train()
    calls = layer_calls(folded)
    torch.manual_seed(5)
    folded(images())
    assert calls.count('FeatScale') == 2 and 'AttnScale' not in calls  # AttnScale: before it
    folded.eval()
    reference.eval()
    calls.clear()
    torch.testing.assert_close(folded(images())[0], reference(images())[0])
    assert calls == []


def test_a_hooked_projection_is_called_as_itself():
    reference, folded = pair(attn_scale_layers='all', feat_scale_layers='all')
    seen = []
    folded.layers[0].attn.proj.register_forward_hook(lambda m, a, out: seen.append(out.shape))
    torch.testing.assert_close(folded(images())[0], reference(images())[0])
    assert seen == [(3, 17, 32)]


def test_set_fused_switches_the_fold_both_ways():
    model = StepViT(**SMALL, feat_scale_layers='all', fused=False)
    assert [layer.attn.fold_scales for layer in model.layers] == [False, False]
    set_fused(model, 'auto')
    assert [layer.attn.fold_scales for layer in model.layers] == ['auto', 'auto']


def saved_token_tensors(model, x):
    """The distinct storages of (B, N, C) token tensors the forward pass keeps for the backward
    pass."""
    storages = set()

    def pack(t):
        if t.shape == (3, 17, 32):
            storages.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)[0].sum()
    return len(storages)


def test_folded_feat_scale_keeps_no_copy_of_its_input_for_the_backward_pass():
    reference, folded = pair(feat_scale_layers='all')
    reference.train()
    folded.train()
    x = images()
    # one token tensor per layer fewer: FeatScale's input, the projection's output
    assert saved_token_tensors(reference, x) - saved_token_tensors(folded, x) == 2


@pytest.mark.parametrize('fused, folds', [('auto', False), (True, True)])
def test_without_a_graph_auto_keeps_the_layers(fused, folds):
    # forward alone the fold saves no pass over the tokens: 'auto' folds only for training
    reference, model = pair(attn_scale_layers='all', feat_scale_layers='all')
    set_fused(model, fused)
    model.eval()
    reference.eval()
    calls = layer_calls(model)
    with torch.no_grad():
        torch.testing.assert_close(model(images())[0], reference(images())[0])
    assert (calls == []) == folds


def test_cait_talking_heads_fold_the_scales_too():
    from mmstiff.models.backbones.cait import CaiT
    torch.manual_seed(0)
    folded = CaiT(
        arch=dict(embed_dims=32, num_layers=2, num_heads=4), img_size=32, patch_size=8,
        attn_scale_layers='all', feat_scale_layers=[1], layer_scale_init_value=0.5)
    folded = randomise_scales(folded).double().train()
    reference = set_fused(copy.deepcopy(folded), False)
    ref_calls, fold_calls = layer_calls(reference), layer_calls(folded)
    x = images().double()
    want, want_grads = outputs_and_grads(reference, x)
    got, got_grads = outputs_and_grads(folded, x)
    assert sorted(ref_calls) == ['AttnScale', 'AttnScale', 'FeatScale'] and fold_calls == []
    assert_equal_in_float64(got, want, got_grads, want_grads)
    with pytest.raises(ValueError, match="fused='yes'"):
        CaiT(
            arch=dict(embed_dims=32, num_layers=2, num_heads=4), img_size=32, patch_size=8,
            fused='yes')


def test_swin_window_attention_folds_attn_scale():
    # shifted windows (the additive mask) in the odd blocks; FeatScale stays a layer in Swin
    from mmstiff.models.backbones.step_swin import StepSwin
    torch.manual_seed(0)
    folded = StepSwin(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=64, window_size=4,
        out_indices=(0, 1), drop_path_rate=0., attn_scale_layers='all', feat_scale_layers=[1])
    folded = randomise_scales(folded).double().train()
    reference = set_fused(copy.deepcopy(folded), False)
    ref_calls, fold_calls = layer_calls(reference), layer_calls(folded)
    torch.manual_seed(3)
    x = torch.randn(2, 3, 64, 64, dtype=torch.double)

    def run(model):  # both stages' outputs in the loss: every block gets a gradient
        outs = model(x)
        sum(o.pow(2).mean() for o in outs).backward()
        return outs, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    want, want_grads = run(reference)
    got, got_grads = run(folded)
    assert ref_calls.count('AttnScale') == 4 and 'AttnScale' not in fold_calls
    assert fold_calls == ['FeatScale']
    assert sum('omega' in name for name in want_grads) == 4
    assert_equal_in_float64(got, want, got_grads, want_grads)
