"""The NSI's sums of squares in one Triton pass (``mmstiff/analysis/triton_sums.py``), on the CPU
in Triton's interpreter, against the formula in float64 and against the PyTorch path of
:func:`stiffness_norms`.

Triton reads ``TRITON_INTERPRET`` when it compiles a kernel's decorator: the interpreted tests
run in a process that set it before importing Triton (:func:`test_sums_in_the_interpreter`).
"""

import pytest
import torch
from hook_scalars import hook_scalars
from kernel_stand_ins import StandInKernel  # tests/
from triton_interpreter import driver, interpreted_in, run_interpreted  # tests/

from mmstiff.analysis import (kernel_step_sums, norms_of_pending, pending_norms, stiffness_norms,
                              triton_sums)
from mmstiff.analysis.triton_sums import state_sums, state_sums_apply, state_sums_forced
from mmstiff.utils.triton_launch import HAS_TRITON

interpreted = interpreted_in('test_sums_in_the_interpreter')
TOLERANCES = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-3}


@driver
def test_sums_in_the_interpreter(repo_root):
    run_interpreted(__file__, repo_root, timeout=600)


def _states(shape, dtype, memory_format=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_t = torch.randn(shape, generator=g)
    x_next = x_t + 0.3 * torch.randn(shape, generator=g)
    if memory_format is not None:
        x_t = x_t.contiguous(memory_format=memory_format)
    return x_t.to(dtype), x_next.to(dtype)


def _expected(x_t, x_next):
    """Σ (x_next - x_t)² and Σ x_t² per (sample, channel), in float64 from the stored values."""
    x, y = x_t.double(), x_next.double()
    pooled = (2, 3) if x.dim() == 4 else (1, )
    return ((y - x)**2).sum(dim=pooled), (x**2).sum(dim=pooled)


#: (shape, memory format of x_t): contiguous maps, channels-last, a width of one, tokens, a
#: longer map than one tile holds
CASES = [((2, 5, 3, 4), None), ((2, 5, 3, 4), torch.channels_last), ((3, 4, 33, 1), None),
         ((2, 7, 5), None), ((2, 3, 40, 40), None), ((2, 70, 6, 6), torch.channels_last)]


@interpreted
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('shape,memory_format', CASES)
def test_state_sums_equal_the_formula(shape, memory_format, dtype):
    x_t, x_next = _states(shape, dtype, memory_format)
    sums = state_sums(x_t, x_next)
    moved, state = _expected(x_t, x_next)
    assert sums.layout == ('nchw' if len(shape) == 4 else 'nlc')
    assert sums.moved.dtype == sums.state.dtype == torch.float32
    assert sums.moved.shape == sums.state.shape == (shape[0], shape[-1 if len(shape) == 3 else 1])
    tol = TOLERANCES[torch.float32]  # float32 sums of values stored in dtype: exact inputs
    torch.testing.assert_close(sums.moved.double(), moved, rtol=tol, atol=tol)
    torch.testing.assert_close(sums.state.double(), state, rtol=tol, atol=tol)


@interpreted
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_state_sums_of_a_float32_state_and_a_half_precision_one(dtype):
    """A recorder's x_t can be float32 (the ReLU of a projected shortcut) where x_{t+1} is the
    model's half-precision output under autocast: each is read in its own dtype."""
    x_t, x_next = _states((2, 6, 5, 5), torch.float32)
    x_next = x_next.to(dtype)
    sums = state_sums(x_t, x_next)
    moved, state = _expected(x_t, x_next)
    torch.testing.assert_close(sums.moved.double(), moved, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.state.double(), state, rtol=1e-5, atol=1e-5)


@interpreted
def test_state_sums_read_each_state_with_its_own_strides():
    """x_t channels-last, x_next contiguous; and a map whose H and W cannot be merged (a crop)."""
    x_t, x_next = _states((2, 6, 5, 7), torch.float32, torch.channels_last)
    x_next = x_next.contiguous()
    for a, b in ((x_t, x_next), (x_t[:, :, 1:4, 2:6], x_next[:, :, 1:4, 2:6])):
        sums = state_sums(a, b)
        moved, state = _expected(a, b)
        torch.testing.assert_close(sums.moved.double(), moved, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sums.state.double(), state, rtol=1e-5, atol=1e-5)


def _steps(x_t):
    """Step sizes the sums can divide: a number, per sample, per channel, shared by the batch;
    0 where nothing moved (0 / 0 counts as 0) is in the per-channel one."""
    b = x_t.shape[0]
    if x_t.dim() == 4:
        c = x_t.shape[1]
        per_channel = torch.rand(b, c, 1, 1) + 0.5
        return [
            None, 0.5, 1.0,
            torch.rand(b, 1, 1, 1) + 0.5, per_channel,
            torch.rand(1, c, 1, 1) + 0.5,
            torch.tensor(2.0)
        ]
    c = x_t.shape[2]
    return [None, 0.5, torch.rand(b, 1, c) + 0.5, torch.rand(b, 1, 1) + 0.5]


@interpreted
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('shape,memory_format', CASES)
def test_stiffness_norms_on_the_kernel_equal_the_pytorch_path(shape, memory_format, dtype):
    x_t, x_next = _states(shape, dtype, memory_format)
    for step in _steps(x_t):
        expected = stiffness_norms(x_t, x_next, step)
        with state_sums_forced():
            assert state_sums_apply(x_t, x_next)
            got = stiffness_norms(x_t, x_next, step)
        torch.testing.assert_close(got.slope, expected.slope, rtol=2e-5, atol=1e-6)
        torch.testing.assert_close(got.state, expected.state, rtol=2e-5, atol=1e-6)


@interpreted
def test_the_kernel_sums_of_many_steps_give_their_norms_together():
    """What a StiffnessHook does on the GPU: each step's sums from the kernel as it is recorded,
    the norms of all of them at once afterwards; each as the PyTorch path takes it."""
    items, expected = [], []
    for i, (shape, memory_format) in enumerate(CASES):
        x_t, x_next = _states(shape, torch.float32, memory_format, seed=i)
        for step in _steps(x_t):
            expected.append(stiffness_norms(x_t, x_next, step))
            with state_sums_forced():
                sums = kernel_step_sums(x_t, x_next, step)
            assert sums is not None
            items.append(pending_norms(sums, step))
    got = norms_of_pending(items)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.slope, e.slope, rtol=2e-5, atol=1e-6)
        torch.testing.assert_close(g.state, e.state, rtol=2e-5, atol=1e-6)


@interpreted
def test_a_saturated_step_that_did_not_move_counts_as_zero_on_the_kernel():
    x_t, x_next = _states((2, 3, 4, 4), torch.float32)
    x_next[:, 1] = x_t[:, 1]  # channel 1 did not move, and its Δ underflowed to 0
    step = torch.full((2, 3, 1, 1), 0.5)
    step[:, 1] = 0.0
    expected = stiffness_norms(x_t, x_next, step)
    with state_sums_forced():
        got = stiffness_norms(x_t, x_next, step)
    assert torch.isfinite(got.slope).all()
    torch.testing.assert_close(got.slope, expected.slope, rtol=2e-5, atol=1e-6)


@interpreted
def test_the_stiffness_hook_reads_the_same_values_on_the_kernel(tiny_resnet):
    """A whole network's NSI scalars (post-activation blocks with projected shortcuts, whose
    x_t is the recorder's ReLU of the shortcut) with the kernel and with PyTorch's passes."""
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    expected = hook_scalars(tiny_resnet, images)
    with state_sums_forced():
        got = hook_scalars(tiny_resnet, images)
    assert got.keys() == expected.keys() and any(k.startswith('nsi/') for k in got)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.fixture
def tiny_resnet():
    from mmpretrain.models.backbones import ResNet_CIFAR
    torch.manual_seed(0)
    net = ResNet_CIFAR(depth=18, stem_channels=4, base_channels=4)
    net.eval()  # (mmpretrain's ResNet.train returns None)
    return net


def test_the_kernel_is_left_to_cuda_and_to_steps_it_can_divide(monkeypatch):
    """Off CUDA the PyTorch passes run (the kernel is not called), as they do for a step per
    element and for states that are not maps or tokens."""

    def refuse(*args):
        raise AssertionError('the kernel was called')

    monkeypatch.setattr('mmstiff.analysis.stiffness.try_state_sums', refuse)
    x_t, x_next = _states((2, 3, 4, 4), torch.float32)
    expected = stiffness_norms(x_t, x_next)  # a CPU tensor, not forced
    torch.testing.assert_close(expected.state, x_t.flatten(1).norm(dim=1))
    assert not state_sums_apply(x_t, x_next)
    assert kernel_step_sums(x_t, x_next) is None  # what a hook asks for: none off CUDA either
    with state_sums_forced():
        assert triton_sums.KERNEL.is_forced and state_sums_apply(x_t, x_next) is HAS_TRITON
        step = torch.rand(2, 3, 4, 4) + 0.5  # Δ per element
        assert kernel_step_sums(x_t, x_next, step) is None
        got = stiffness_norms(x_t, x_next, step)
        torch.testing.assert_close(got.slope, ((x_next - x_t) / step).flatten(1).norm(dim=1))
        assert not state_sums_apply(x_t.flatten(1), x_next.flatten(1))  # (B, D): no channels
        stiffness_norms(x_t.flatten(1), x_next.flatten(1))
    assert not triton_sums.KERNEL.is_forced


@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch)')
def test_a_kernel_that_cannot_be_built_leaves_the_norms_to_pytorch(monkeypatch):
    """The first failed launch is warned about once; the norms are those of the PyTorch passes,
    and the kernel is not tried again."""
    kernel = StandInKernel(fails=True)
    monkeypatch.setattr(triton_sums, '_state_sums_kernel', kernel)
    monkeypatch.setattr(triton_sums.KERNEL, 'failure', None)
    x_t, x_next = _states((2, 3, 4, 4), torch.float32)
    step = torch.rand(2, 3, 1, 1) + 0.5
    expected = [stiffness_norms(x_t, x_next, s) for s in (None, step)]
    with state_sums_forced():
        with pytest.warns(RuntimeWarning, match='C compiler.*PyTorch operators'):
            got = [stiffness_norms(x_t, x_next, s) for s in (None, step)]
        assert not state_sums_apply(x_t, x_next)
    assert kernel.launches == 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.slope, e.slope)
        torch.testing.assert_close(g.state, e.state)
