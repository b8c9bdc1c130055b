"""The start an adaptor was trained with travels with its weights, and a mismatch is refused
(docs/methods.md §3, "Starting from a plain checkpoint"; docs/reliability.md).

``start='paper'`` computes Δ = σ(z), ``start='identity'`` Δ = 2σ(z): the same weights under the
other start are another network. Before, a ``'paper'`` checkpoint evaluated under an
``'identity'`` config computed Δ = 2σ(z) silently, and an adaptor whose checkpoint entry had
another shape kept the entries that happened to fit (Δ = 2σ(-1) ≈ 0.54 instead of 1).
"""
from collections import OrderedDict

import pytest
import torch

from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import StepAdaptor
from mmstiff.models.steps.starts import AdaptorStartError
from mmstiff.utils.checkpoint import CheckpointError, load_checkpoint_into

NARROW = dict(stem_channels=8, base_channels=8)


def stepnet_resnet(start, **adaptor):
    return StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor', start=start, **adaptor),
                      **NARROW)


def steps(model, x):
    """Every adaptor's Δ for ``x`` (eval mode)."""
    found = []
    handles = [
        m.register_forward_hook(lambda mod, i, out: found.append(out)) for m in model.modules()
        if isinstance(m, StepAdaptor)
    ]
    model.eval()
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return found


def without_starts(state_dict):
    """A state dict as written before the start was recorded."""
    old = OrderedDict(state_dict)
    old._metadata = OrderedDict((k, {
        n: v
        for n, v in meta.items() if n != 'start'
    }) for k, meta in state_dict._metadata.items())
    return old


def test_state_dict_records_each_adaptors_start():
    state = stepnet_resnet('paper').state_dict()
    adaptor_entries = {k: v for k, v in state._metadata.items() if k.endswith('step_adaptor')}
    assert len(adaptor_entries) == 8
    assert all(meta['start'] == 'paper' for meta in adaptor_entries.values())
    assert 'start' not in state._metadata['layer1.0']  # only the adaptors record one


@pytest.mark.parametrize('saved, built', [('paper', 'identity'), ('identity', 'paper')])
def test_loading_another_start_is_refused_naming_both(saved, built):
    state = stepnet_resnet(saved).state_dict()
    model = stepnet_resnet(built)
    with pytest.raises(
            AdaptorStartError, match=rf"checkpoint entry 'layer1.0.step_adaptor' was trained with "
            rf"start='{saved}', but the config builds that adaptor with "
            rf"start='{built}'.*expected the adaptor's start='{saved}'"):
        model.load_state_dict(state)
    stepnet_resnet(saved).load_state_dict(state)  # the same start loads
    stepnet_resnet(built).load_state_dict(without_starts(state))  # an old checkpoint too


def test_start_survives_a_checkpoint_file_and_the_tools_loader(tmp_path):
    path = str(tmp_path / 'paper.pth')
    torch.save({'state_dict': stepnet_resnet('paper').state_dict()}, path)
    with pytest.raises(CheckpointError, match="trained with start='paper'"):
        load_checkpoint_into(stepnet_resnet('identity'), path)
    model = StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor', start='identity'),
                       init_cfg=dict(type='Pretrained', checkpoint=path), **NARROW)
    with pytest.raises(AdaptorStartError):
        model.init_weights()


def test_adaptor_entry_of_another_shape_gets_its_start_back(tmp_path):
    """A ``'paper'`` checkpoint with ``groups=1`` (an old one, no start recorded) grafted as
    ``init_cfg`` onto identity adaptors with ``groups=C``: the convolution does not fit, so the
    adaptor counts as not loaded and starts at Δ ≡ 1, not at 2σ(-1)."""
    torch.manual_seed(0)
    path = str(tmp_path / 'groups1.pth')
    source = stepnet_resnet('paper', groups=1)
    torch.save({'state_dict': without_starts(source.state_dict())}, path)
    model = StepResNet(18, adaptor=dict(type='mmstiff.StepNetAdaptor', start='identity'),
                       init_cfg=dict(type='Pretrained', checkpoint=path), **NARROW)
    model.init_weights()
    mismatched = [m for m in model.modules() if isinstance(m, StepAdaptor) and m.load_mismatch]
    assert len(mismatched) == 8
    key, saved, own = mismatched[0].load_mismatch[0]
    assert key == 'layer1.0.step_adaptor.conv.weight' and saved == (8, 16, 1, 1) \
        and own == (8, 2, 1, 1)
    found = steps(model, torch.randn(2, 3, 32, 32))
    assert len(found) == 8 and all(torch.equal(s, torch.ones_like(s)) for s in found)
