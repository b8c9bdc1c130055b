"""The NSI's norms of many steps from their sums of squares, taken together (norms_of_pending).

Expected values come from the states themselves, with PyTorch's operators
(:func:`stiffness_norms` off CUDA), not from the sums.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmstiff.analysis import (StiffnessNorms, mean_step_size, norms_of_pending, pending_norms,
                              stiffness_norms, stiffness_norms_from_sums)
from mmstiff.utils.step_sums import StepSums

#: aten ops that launch no kernel (views)
VIEWS = {'unsqueeze', 'unbind', 'slice', 'select', 'view', 'reshape', 'detach', 'alias', 'expand'}


def sums_of(x_t, x_next, layout):
    """Per-(sample, channel) sums of squares over the pooled axes, by their definition."""
    axes = (2, 3) if layout == 'nchw' else (1, )
    return StepSums(((x_next - x_t)**2).sum(axes), (x_t**2).sum(axes), layout)


def state_pair(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x_t = torch.randn(shape, generator=g)
    return x_t, x_t + 0.3 * torch.randn(shape, generator=g)


def steps_for(shape, layout, seed):
    """Every form of Δ_t the sums can divide, for states of ``shape``."""
    g = torch.Generator().manual_seed(seed)
    b, c = shape[0], shape[1] if layout == 'nchw' else shape[2]
    pooled = (1, 1) if layout == 'nchw' else (1, )

    def rand(*size):
        return 0.2 + torch.rand(size, generator=g)

    if layout == 'nchw':
        per_sample, per_channel, both = rand(b, 1, *pooled), rand(1, c,
                                                                  *pooled), rand(b, c, *pooled)
    else:
        per_sample, per_channel, both = rand(b, 1, 1), rand(1, 1, c), rand(b, 1, c)
    return [None, 1.0, 0.5, torch.tensor(0.7), per_sample, per_channel, both]


CASES = [((3, 4, 5, 5), 'nchw'), ((3, 8, 2, 2), 'nchw'), ((3, 6, 4), 'nlc'), ((2, 4, 5, 5), 'nchw')]


def test_the_norms_of_many_steps_together_equal_those_from_their_states():
    """Steps of four shapes and seven forms of Δ_t, interleaved: each step's norms in the
    order given, as stiffness_norms takes them from the states."""
    items, expected = [], []
    for seed in range(3):  # steps of a shape and Δ form recur (a stage's blocks)
        for case, (shape, layout) in enumerate(CASES):
            x_t, x_next = state_pair(shape, 10 * seed + case)
            for step in steps_for(shape, layout, seed):
                items.append(pending_norms(sums_of(x_t, x_next, layout), step))
                expected.append(stiffness_norms(x_t, x_next, step))
    got = norms_of_pending(items)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert isinstance(g, StiffnessNorms)
        torch.testing.assert_close(g.slope, e.slope, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g.state, e.state, rtol=1e-5, atol=1e-6)


def test_the_step_means_taken_with_the_norms_equal_mean_step_size():
    """With ``step_means``, each tensor Δ_t's per-sample mean over its channels, as
    mean_step_size takes it from the step alone (a shared Δ broadcast to the batch); None for
    no Δ or a number; the norms as without."""
    items, steps = [], []
    for seed in range(2):
        for case, (shape, layout) in enumerate(CASES):
            x_t, x_next = state_pair(shape, 10 * seed + case)
            for step in steps_for(shape, layout, seed):
                items.append(pending_norms(sums_of(x_t, x_next, layout), step))
                steps.append((step, shape[0]))
    plain = norms_of_pending(items)
    got = norms_of_pending(items, step_means=True)
    assert len(got) == len(items)
    for (norms, mean), alone, (step, batch) in zip(got, plain, steps):
        assert torch.equal(norms.slope, alone.slope) and torch.equal(norms.state, alone.state)
        if not torch.is_tensor(step):
            assert mean is None
            continue
        assert mean.shape == (batch, )
        torch.testing.assert_close(mean, mean_step_size(step, batch), rtol=1e-6, atol=1e-7)


def test_one_step_alone_gives_the_same_norms():
    x_t, x_next = state_pair((3, 4, 5, 5), 0)
    sums = sums_of(x_t, x_next, 'nchw')
    for step in steps_for((3, 4, 5, 5), 'nchw', 1):
        alone = stiffness_norms_from_sums(sums, step)
        together = norms_of_pending([pending_norms(sums, step)] * 3)
        for norms in together:
            assert torch.equal(norms.slope, alone.slope) and torch.equal(norms.state, alone.state)


class OpCounter(TorchDispatchMode):

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split('.')[0]
        if name not in VIEWS:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def test_each_group_of_equal_shapes_costs_one_stacked_computation():
    """16 steps in 4 shapes, Δ_t = 1 (ResNet-50's plain blocks): 3 kernels a group (stack,
    sum, sqrt), where each step alone took 3 (its own stack of two, sum, sqrt)."""
    shapes = [(2, 8, 4, 4)] * 3 + [(2, 16, 2, 2)] * 4 + [(2, 32, 2, 2)] * 6 + [(2, 64, 1, 1)] * 3
    items = [pending_norms(sums_of(*state_pair(s, i), 'nchw')) for i, s in enumerate(shapes)]
    with OpCounter() as counter:
        norms_of_pending(items)
    assert sorted(counter.ops) == sorted(['stack', 'sum', 'sqrt'] * 4)
    steps = [torch.rand(2, s[1], 1, 1) for s in shapes]
    items = [pending_norms(p.sums, step) for p, step in zip(items, steps)]
    with OpCounter() as counter:
        norms_of_pending(items)
    # per group: stack, sum, sqrt of the states; stack of the sums, sqrt, stack of the steps,
    # div, nan_to_num_, norm
    assert len(counter.ops) == 4 * 9, counter.ops
    with OpCounter() as counter:
        norms_of_pending(items, step_means=True)
    # and Δ's per-sample means: one mean of the stacked steps per group, not one per step
    assert len(counter.ops) == 4 * 10 and counter.ops.count('mean') == 4, counter.ops


def test_a_saturated_step_counts_zero_and_a_per_element_step_is_refused():
    x_t, x_next = state_pair((3, 4, 2, 2), 0)
    step = torch.rand(3, 4, 1, 1)
    step[0, 1] = 0.0  # underflowed
    x_next[0, 1] = x_t[0, 1]  # and the channel did not move: 0 / 0 counts as 0
    got = norms_of_pending([pending_norms(sums_of(x_t, x_next, 'nchw'), step)])[0]
    expected = stiffness_norms(x_t, x_next, step)
    torch.testing.assert_close(got.slope, expected.slope)
    assert torch.isfinite(got.slope).all()
    assert pending_norms(sums_of(x_t, x_next, 'nchw'), torch.rand(3, 4, 2, 2)) is None
    with pytest.raises(ValueError, match="step='one'"):
        pending_norms(sums_of(x_t, x_next, 'nchw'), 'one')
    with pytest.raises(ValueError, match='step=True'):
        pending_norms(sums_of(x_t, x_next, 'nchw'), True)


def test_a_step_of_one_is_the_plain_step():
    x_t, x_next = state_pair((2, 3, 2, 2), 0)
    sums = sums_of(x_t, x_next, 'nchw')
    assert pending_norms(sums, 1).step is None and pending_norms(sums, 1.0).step is None
    assert pending_norms(sums, torch.tensor(1.0)).step.shape == (1, 1)  # not read on the host
