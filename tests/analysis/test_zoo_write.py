"""The write walk: every residual backbone of mmpretrain's and mmdet's registries gets StepNet and
SE steps from ``mmstiff.WithSteps``, or is refused with its reason.

A written backbone at ``start='identity'`` computes the upstream outputs bit for bit (Δ ≡ 1
multiplies f by one), its state dict is the upstream one plus adaptor keys, gradients reach
every adaptor, the recorders read the adaptor's Δ (times the layer scale) and the stiffness hook
logs a finite step size per written step. A backbone a later release adds fails the walk until
it is classified here or in the zoo tables.
"""
import copy
import math

import pytest
import torch
from zoo_walk import backbone_param, build_backbone, case_input, load_cases, registry_backbones

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.analysis.zoo import non_residual
from mmstiff.registry import MODELS

pytest.importorskip('mmpretrain')
CASES, _ = load_cases()
BACKBONES = registry_backbones()
STEPNET = dict(type='mmstiff.StepNetAdaptor', start='identity')
SE = dict(type='mmstiff.SEAdaptor', start='identity', ratio=4)

#: backbones refused with every step chosen -> (a phrase of the reason, the branches that can be
#: written on their own, or None)
REFUSED = {
    'mmpretrain.MlpMixer': ('transposed', 'mlp'),
    'mmpretrain.PCPVT': ('flattened back', ('msa', 'mlp')),
    'mmpretrain.SVT': ('flattened back', ('msa', 'mlp')),
    'mmpretrain.DaViT': ('flattened back', ('msa', 'mlp')),
    'mmpretrain.HorNet': ('read as one step', None),
    'mmpretrain.XCiT': ('class token', None),
    'mmpretrain.ViTSAM': ('(B, H, W, C)', None),
}

#: the SE-ResNets: their SE gate and the adaptor both scale f, and the recorded Δ (their
#: product) depends on the state, so it is compared with neither alone
SE_RESNETS = ('mmpretrain.SEResNet', 'mmpretrain.SEResNeXt')

pytestmark = pytest.mark.slow


def _case(key):
    case = CASES.get(key)
    if case is None:
        pytest.fail(f'{key} has no zoo case (tests/analysis/zoo_cases/): classify it')
    if case.get('skip'):
        pytest.skip(case['skip'])
    if key.startswith('mmdet.'):
        pytest.importorskip('mmdet.models')
    return case


def _backbone_type(key):
    """The registered name, or the class a package exports without registering it."""
    import importlib
    scope, _, name = key.partition('.')
    registry = importlib.import_module(f'{scope}.registry').MODELS
    if registry.get(key) is not None:
        return key
    package = {'mmpretrain': 'mmpretrain.models.backbones', 'mmdet': 'mmdet.models.backbones'}
    return getattr(importlib.import_module(package[scope]), name)


def _write(key, case, adaptor, **kwargs):
    torch.manual_seed(0)
    return MODELS.build(
        dict(type='mmstiff.WithSteps',
             backbone=dict(type=_backbone_type(key), **case.get('cfg', {})), adaptor=adaptor,
             probe_input=tuple(case['input']), **kwargs))


def _outputs(model, x):
    """Every tensor the backbone outputs (nested tuples and lists flattened)."""
    found, todo = [], [model(x)]
    while todo:
        value = todo.pop(0)
        if torch.is_tensor(value):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            todo = list(value) + todo
    return found


def _loss(outputs):
    """A fixed random projection of every output (a plain sum of a LayerNorm output has no
    gradient)."""
    gen = torch.Generator().manual_seed(5)
    return sum((o.float() * torch.randn(o.shape, generator=gen)).sum() for o in outputs)


def _adaptors(model):
    from mmstiff.models.steps import StepAdaptor
    return {name: m for name, m in model.named_modules() if isinstance(m, StepAdaptor)}


def _written(key, case, adaptor, upstream):
    """The written backbone with the upstream weights (and its prepared layer scales)."""
    kwargs = {}
    if key in REFUSED:
        phrase, branches = REFUSED[key]
        with pytest.raises(ValueError, match=phrase.replace('(', r'\(').replace(')', r'\)')):
            _write(key, case, adaptor)
        if branches is None:
            pytest.skip(f'{key} is refused: {phrase}')
        kwargs['branches'] = branches
    written = _write(key, case, adaptor, **kwargs)
    missing, unexpected = written.load_state_dict(upstream.state_dict(), strict=False)
    assert unexpected == [], unexpected
    adaptors = _adaptors(written)
    assert adaptors, f'{key}: no step written'
    # torch loads a BN without num_batches_tracked silently: the other new keys are missing,
    # besides what the upstream class itself drops from a state dict it loads (SwinV2's tables)
    own = copy.deepcopy(upstream).load_state_dict(upstream.state_dict(), strict=False).missing_keys
    assert set(missing) - set(own) == {
        k
        for k in written.state_dict()
        if k not in upstream.state_dict() and not k.endswith('num_batches_tracked')
    }
    assert all(any(k.startswith(name + '.') for name in adaptors) for k in set(missing) - set(own))
    written.eval()
    return written, adaptors


def _check_identity(key, case, upstream, written):
    x = case_input(case)
    if case.get('setup') is not None:
        case['setup']()
    with torch.no_grad():
        expected, actual = _outputs(upstream, x), _outputs(written, x)
    assert len(expected) == len(actual)
    for a, b in zip(expected, actual):
        assert torch.equal(a, b), f'{key}: max |difference| {(a - b).abs().max().item():.3g}'


def _check_gradients(key, case, written, adaptors):
    """Every adaptor of a block the outputs depend on is in their autograd graph, and Δ moves
    some of them (a block whose f starts at zero, as TinyViT's zero-initialised last BN makes
    it, gives its adaptor a zero gradient; a block after the last output, as Conformer's last
    transformer block when only the convolutional branch is output, none)."""
    from mmstiff.analysis.spec_taps import first_tensor
    x = case_input(case)
    if case.get('setup') is not None:
        case['setup']()
    outputs = {}

    def keep(name):

        def hook(module, args, output):
            out = first_tensor(output)
            if out is not None and out.requires_grad:
                out.retain_grad()
                outputs[name] = out

        return hook

    blocks = {name.split('.step_adaptor')[0] for name in adaptors}
    handles = [written.get_submodule(b).register_forward_hook(keep(b)) for b in blocks]
    _loss(_outputs(written, x)).backward()
    for handle in handles:
        handle.remove()
    moved = 0
    for name, adaptor in adaptors.items():
        out = outputs.get(name.split('.step_adaptor')[0])
        if out is None or out.grad is None:
            continue  # the outputs do not depend on this block
        grads = [p.grad for p in adaptor.parameters() if p.requires_grad]
        assert any(g is not None for g in grads), f'{key}: {name} has no gradient'
        moved += any(g is not None and g.abs().sum() > 0 for g in grads)
    assert moved, f'{key}: every adaptor gradient is zero'


@pytest.mark.parametrize('key', [backbone_param(k) for k in BACKBONES if k not in non_residual()])
def test_written_backbone(key):
    """StepNet and SE at their identity start compute the upstream outputs bit for bit; with
    StepNet, gradients reach the adaptors and the recorders and the hook read their Δ."""
    case = _case(key)
    upstream = build_backbone(key, case)
    written, _ = _written(key, case, SE, upstream)
    _check_identity(key, case, upstream, written)
    written, adaptors = _written(key, case, STEPNET, upstream)
    _check_identity(key, case, upstream, written)
    _check_gradients(key, case, written, adaptors)
    _check_read(key, case, upstream, written, adaptors)


def _check_read(key, case, upstream, written, adaptors):
    """With the adaptors moved off Δ ≡ 1, every written step's recorded Δ is the adaptor's
    output times the block's own step size (layer scale), and the stiffness hook logs a finite
    step size for it."""
    from hook_scalars import hook_scalars
    x = case_input(case)
    x = torch.cat([x, x.flip(-1)])  # two samples: a per-sample gate tells itself apart
    if case.get('setup') is not None:
        case['setup']()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for adaptor in adaptors.values():
            adaptor.ie_bias.copy_(torch.randn(adaptor.ie_bias.shape, generator=gen))
    seen = {}
    handles = [
        a.register_forward_hook(lambda m, args, out, name=name: seen.setdefault(name, out))
        for name, a in adaptors.items()
    ]
    with torch.no_grad():
        records = {}
        for model in (upstream, written):
            with TrajectoryRecorder(model, level='branch') as recorder:
                model(x)
            records[model is written] = {k: v[0] for k, v in recorder.outputs.items()}
    for handle in handles:
        handle.remove()
    checked = 0
    for name, delta in seen.items():
        block, _, step = name.rpartition('.step_adaptor')
        record_name = block if not step else f'{block}.{step.lstrip("s.")}'
        record = records[True].get(record_name)
        own = records[False].get(record_name)
        own = None if own is None else own.step
        if own is not None and torch.is_tensor(own) and own.shape[0] == x.shape[0] > 1:
            continue  # a gate computed from the state (SE, a global perceptron): not comparable
        assert record is not None and record.step is not None, f'{key}: {record_name} not read'
        expected = delta if own is None else delta * own
        torch.testing.assert_close(record.step, expected, msg=lambda m: f'{key} {name}: {m}')
        checked += 1
    assert checked or key in SE_RESNETS, f'{key}: no recorded step compared'

    scalars = hook_scalars(written, x)
    steps = {k: v for k, v in scalars.items() if k.startswith('step/')}
    assert steps, f'{key}: no step size logged'
    assert all(math.isfinite(v) for v in steps.values()), steps
