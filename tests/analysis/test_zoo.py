"""The registry walk: every backbone class of mmpretrain's and mmdet's registries is either read
step by step, each step checked against the block's own computation, or declared non-residual
with its reason. A backbone a later release adds fails here until it is classified."""
import math

import pytest
import torch
from zoo_walk import (BlockCalls, backbone_param, build_backbone, case_input, load_cases,
                      registry_backbones)

from mmstiff.analysis import TrajectoryRecorder, find_blocks
from mmstiff.analysis.zoo import non_residual, zoo_specs

pytest.importorskip('mmpretrain')
CASES, BRANCHES = load_cases()
BACKBONES = registry_backbones()


def _case(key):
    case = CASES.get(key)
    if case is None:
        pytest.fail(f'{key} is neither in a zoo case table (tests/analysis/zoo_cases/) nor '
                    'declared non-residual (mmstiff/analysis/zoo/): classify it')
    if case.get('skip'):
        pytest.skip(case['skip'])
    if key.startswith('mmdet.'):
        pytest.importorskip('mmdet')
    return case


def _full_name(module):
    cls = type(module)
    return f'{cls.__module__}.{cls.__qualname__}'


def _close(actual, expected, what, move=None):
    """``actual == expected`` within float32 rounding of the state, and, where ``move`` (the
    step ``Δ ⊙ f``) is given, within 1e-4 of its size: a small layer scale makes the step
    small beside the state, and an f wrong by a factor must still show."""
    assert actual.shape == expected.shape, f'{what}: shape {actual.shape} != {expected.shape}'
    scale = expected.abs().max().item() or 1.0
    err = (actual - expected).abs().max().item()
    bound = 1e-6 * scale + 1e-7
    if move is not None:
        bound += 1e-4 * move.abs().max().item()
    else:
        bound += 1e-5 * scale
    assert err <= bound, f'{what}: max |difference| {err:.3g} (scale {scale:.3g})'


def test_every_registered_backbone_is_classified():
    assert len(BACKBONES) >= 66, BACKBONES  # mmpretrain 1.2 registers 66 backbones
    table = non_residual()
    missing = [key for key in BACKBONES if key not in table and key not in CASES]
    assert not missing, f'unclassified backbones: {missing}'
    both = [
        key for key in BACKBONES
        if key in table and key in CASES and not CASES[key].get('non_residual_check')
    ]
    assert not both, f'declared non-residual and given a residual case: {both}'


@pytest.mark.parametrize('key', [backbone_param(k) for k in BACKBONES if k in non_residual()])
def test_non_residual_backbones_have_no_block_and_say_why(key):
    case = CASES.get(key)
    if case is None or case.get('skip'):
        pytest.skip('no case to build it from')
    model = build_backbone(key, case)
    assert find_blocks(model) == []
    with pytest.raises(ValueError, match='has no residual step to record') as error:
        TrajectoryRecorder(model)
    assert non_residual()[key] in str(error.value)


def _records(model, x):
    outputs = {}
    recorder = TrajectoryRecorder(model, level='both')
    with torch.no_grad(), recorder:
        model(x)
    for name, calls in recorder.outputs.items():
        outputs[name] = calls
    return recorder, outputs


def _check_step(key, block, cls, step_name, record, call, branches, first, last):
    args, kwargs, out = call
    if first:
        _close(record.x_t, args[0], f'{key} {block.name}: x_t of {step_name} (the block input)')
    if last:
        _close(record.x_next, out, f'{key} {block.name}: x_next of {step_name} (the block output)')
    branch = branches.get(step_name)
    if branch is None:
        assert block.spec is None, f'{cls}: no BRANCHES entry for its step {step_name!r}'
        return
    with torch.no_grad():
        delta, f = branch(block.module, record.x_t, args, kwargs)
    if delta is None:
        assert record.step is None, f'{key} {block.name}.{step_name}: Δ recorded, none expected'
        move = f
    else:
        assert record.step is not None, f'{key} {block.name}.{step_name}: no Δ recorded'
        full = torch.broadcast_tensors(record.x_t, delta)[1]
        _close(
            torch.broadcast_tensors(record.x_t, record.step)[1], full,
            f'{key} {block.name}.{step_name}: Δ')
        move = delta * f
    _close(record.x_next, record.x_t + move, f'{key} {block.name}.{step_name}: x_t + Δ ⊙ f',
           move=move)


@pytest.mark.parametrize('key', [backbone_param(k) for k in BACKBONES if k not in non_residual()])
def test_recognised_backbones_record_their_steps_exactly(key):
    case = _case(key)
    model = build_backbone(key, case)
    x = case_input(case)
    blocks = find_blocks(model)
    assert blocks, f'{key}: no residual block found'
    calls = BlockCalls(blocks)
    try:
        recorder, outputs = _records(model, x)
    finally:
        calls.remove()
    specs = zoo_specs()
    checked = 0
    for block in blocks:
        cls = _full_name(block.module)
        block_calls = calls.calls[block.name]
        if not block_calls:
            continue  # a block the forward pass did not reach (e.g. an unused branch)
        call = block_calls[0]
        branches = BRANCHES.get(cls, {})
        if block.spec is None:
            assert cls not in specs or specs[cls].kind
            _check_step(key, block, cls, 'block', outputs[block.name][0], call, branches,
                        first=False, last=True)
            checked += 1
            continue
        steps = block.spec.steps
        for i, step in enumerate(steps):
            name = block.name if len(steps) == 1 else f'{block.name}.{step.name}'
            record = outputs[name][0]
            _check_step(key, block, cls, step.name, record, call, branches,
                        first=step.start == 'in', last=step.end == 'out')
            checked += 1
        if len(steps) > 1 and block.name in outputs:  # the block as one move
            whole = outputs[block.name][0]
            _close(whole.x_t, outputs[f'{block.name}.{steps[0].name}'][0].x_t, f'{block.name}')
            _close(whole.x_next, outputs[f'{block.name}.{steps[-1].name}'][0].x_next,
                   f'{block.name}')
    assert checked, f'{key}: no step checked'
    missing = [n for n in recorder.record_names if n not in outputs and not _unreached(n, calls)]
    assert not missing, f'{key}: records promised but not made: {missing}'


def _unreached(name, calls):
    block = name if name in calls.calls else name.rpartition('.')[0]
    return not calls.calls.get(block)


@pytest.mark.parametrize('key', [backbone_param(k) for k in BACKBONES if k not in non_residual()])
def test_hooks_log_finite_per_block_scalars(key):
    from hook_scalars import hook_outputs

    from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
    case = _case(key)
    model = build_backbone(key, case)
    x = case_input(case)
    hooks = ((StiffnessHook(interval=1), 'nsi/'), (FrequencyHook(interval=1,
                                                                 attention=False), 'hf_ratio/'))
    for hook, prefix in hooks:
        scalars = hook.summarise(hook_outputs(hook, model, x))
        per_block = {k: v for k, v in scalars.items() if k.startswith(prefix)}
        assert per_block, f'{key}: {type(hook).__name__} logged no {prefix}<block> key'
        assert all(math.isfinite(v) for v in per_block.values()), per_block
