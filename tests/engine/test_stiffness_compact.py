"""StiffnessHook: where a step's sums of squares are there, its NSI norms wait for compact(),
which takes those of the whole recorded iteration at once; the scalars are those of the
reference step, whose norms come from the states."""
import copy

import pytest
import torch
from hook_scalars import hook_outputs  # tests/
from torch.utils._python_dispatch import TorchDispatchMode

from mmstiff.engine.hooks import StiffnessHook
from mmstiff.engine.hooks.diagnostic_hook import TRAJECTORY
from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import set_fused

VIEWS = {'unsqueeze', 'unbind', 'slice', 'select', 'view', 'reshape', 'detach', 'alias', 'expand'}


class OpCounter(TorchDispatchMode):
    """The aten ops run while it is active (views left out)."""

    def __init__(self):
        super().__init__()
        self.ops = []
        self.active = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split('.')[0]
        if self.active and name not in VIEWS:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def recorded(net, images, hook, counter=None):
    """The hook's recorders' outputs of one pass; ``counter`` counts the ops of reduce_step."""
    if counter is not None:
        reduce = hook.reduce_step

        def counted(record):
            counter.active = True
            try:
                return reduce(record)
            finally:
                counter.active = False

        hook.reduce_step = counted
    return hook_outputs(hook, net, images)


def pair(adaptor):
    torch.manual_seed(0)
    reference = StepResNet(18, base_channels=4, stem_channels=4, adaptor=adaptor)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.3 * torch.randn_like(p))  # Δ varies over the samples
    fused = copy.deepcopy(reference)
    return set_fused(reference, False).train(), set_fused(fused, True).train()


@pytest.mark.parametrize('adaptor', [None, dict(type='mmstiff.StepNetAdaptor')])
def test_the_norms_wait_for_compact_and_equal_those_from_the_states(adaptor):
    reference, fused = pair(adaptor)
    images = torch.randn(4, 3, 32, 32)
    hook = StiffnessHook(interval=1)
    counter = OpCounter()
    with counter:
        outputs = recorded(fused, images, hook, counter)
    calls = [c for steps in outputs[TRAJECTORY].values() for c in steps]
    assert len(calls) == 8 and all(c.sums is not None and c.slope is None for c in calls)
    # what the recorded forward pass launches for the NSI: nothing, plain step or adapted (the
    # norms and Δ's per-sample means of all steps wait)
    assert counter.ops == []
    # compact(): one stacked computation per shape (ResNet-18's four stages)
    counter.ops, counter.active = [], True
    with counter:
        compacted = hook.compact(outputs)
    counter.active = False
    per_group = 3 if adaptor is None else 10  # adapted: the norms' 9 and Δ's mean
    assert len(counter.ops) == 4 * per_group, counter.ops
    steps = [c for calls in compacted[TRAJECTORY].values() for c in calls]
    assert all(c.resolved and c.slope.shape == (4, ) for c in steps)
    assert hook.compact(compacted) is compacted  # nothing left to take
    # the scalars of the fused model (norms from its sums) are those of the reference step
    # (norms from the states), up to float32 rounding through the train-mode BNs
    from_sums = hook.summarise(compacted)
    assert hook.summarise(outputs) == from_sums  # summarise compacts what it is given
    from_states = StiffnessHook(interval=1).summarise(
        recorded(reference, images, StiffnessHook(interval=1)))
    assert list(from_sums) == list(from_states)
    for key, value in from_states.items():
        tol = dict(abs=1e-4) if key.startswith('nsi_step_corr/') else dict(rel=1e-4)
        assert from_sums[key] == pytest.approx(value, **tol), key


def test_a_reference_step_off_cuda_keeps_its_norms_from_the_states():
    reference, _ = pair(None)
    outputs = recorded(reference, torch.randn(2, 3, 32, 32), StiffnessHook(interval=1))
    calls = [c for steps in outputs[TRAJECTORY].values() for c in steps]
    assert calls and all(c.sums is None and c.slope is not None for c in calls)
