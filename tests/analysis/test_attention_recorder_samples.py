"""AttentionRecorder(num_samples=n) rebuilds the maps of the first n samples only: the same maps
as a recorder of the whole batch, cut; window attention keeps every window."""
import pytest
import torch

from mmstiff.analysis.attention import AttentionRecorder


def _maps(model, images, **kwargs):
    recorder = AttentionRecorder(model, **kwargs)
    with torch.no_grad(), recorder:
        model(images)
    return recorder.outputs


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['mmpretrain', 'stepvit'])
def test_first_samples_only(kind):
    torch.manual_seed(0)
    arch = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
    if kind == 'mmpretrain':
        from mmpretrain.models.backbones import VisionTransformer
        model = VisionTransformer(arch=arch, img_size=16, patch_size=4)
    else:  # AttnScale's explicit map, handed out by the module
        from mmstiff.models.backbones import StepViT
        model = StepViT(arch=arch, img_size=16, patch_size=4, attn_scale_layers='all')
    model.eval()
    images = torch.randn(5, 3, 16, 16)
    whole, first = _maps(model, images), _maps(model, images, num_samples=2)
    assert list(whole) == list(first) == ['layers.0', 'layers.1']
    for name in whole:
        (full, ), (cut, ) = whole[name], first[name]
        assert full.shape[0] == 5 and cut.shape[0] == 2
        torch.testing.assert_close(cut, full[:2])


def test_window_attention_keeps_every_window():
    from mmstiff.models.backbones import StepSwin
    torch.manual_seed(0)
    swin = StepSwin(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=32, window_size=4,
        out_indices=(0, 1))
    swin.eval()  # (mmpretrain's SwinTransformer.train returns None)
    images = torch.randn(3, 3, 32, 32)
    whole, first = _maps(swin, images), _maps(swin, images, num_samples=1)
    for name in whole:
        torch.testing.assert_close(first[name][0], whole[name][0])
    assert whole['stages.0.blocks.0'][0].shape[0] == 3 * 4  # batch · windows


def test_num_samples_is_checked():
    from mmpretrain.models.backbones import VisionTransformer
    model = VisionTransformer(
        arch=dict(embed_dims=8, num_layers=1, num_heads=2, feedforward_channels=8), img_size=8,
        patch_size=4)
    with pytest.raises(ValueError, match='num_samples=0'):
        AttentionRecorder(model, num_samples=0)
