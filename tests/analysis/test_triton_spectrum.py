"""A state's frequency sums in one Triton pass (``mmstiff/analysis/triton_spectrum.py``), on the
CPU in Triton's interpreter, against the formulas in float64 and against the PyTorch path of
:func:`frequency_summary`.

Triton reads ``TRITON_INTERPRET`` when it compiles a kernel's decorator: the interpreted tests
run in a process that set it before importing Triton (:func:`test_spectrum_in_the_interpreter`).
"""
import contextlib
import math

import pytest
import torch
from hook_scalars import hook_outputs  # tests/
from kernel_stand_ins import StandInKernel  # tests/
from triton_interpreter import driver, interpreted_in, run_interpreted  # tests/

from mmstiff.analysis import diagonal_end_bins, frequency_summary, triton_spectrum
from mmstiff.analysis.frequency import frequency_sums
from mmstiff.analysis.triton_spectrum import (high_frequency_ratio_of, spectrum_sums_apply,
                                              spectrum_sums_forced)
from mmstiff.utils.triton_launch import HAS_TRITON

interpreted = interpreted_in('test_spectrum_in_the_interpreter')


@driver
def test_spectrum_in_the_interpreter(repo_root):
    run_interpreted(__file__, repo_root, timeout=600)


def _state(shape, dtype=torch.float32, memory_format=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) + 0.5  # a DC component of its own
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    return x.to(dtype)


def _expected(x, num_extra_tokens=0):
    """The high-frequency ratio per sample and the end bins, in float64 by their definitions:
    ``||X - mean_tokens(X)|| / ||X||``, and ``F(0, 0)``, ``F(k, k)`` at the Nyquist bin of the
    2-D DFT of each channel's map (the patch tokens' map for a token state)."""
    x = x.double()
    if x.dim() == 4:
        maps = x
        flat = x.flatten(2)  # (B, C, N)
        mean = flat.mean(dim=2, keepdim=True)
    else:
        mean = x.mean(dim=1, keepdim=True)
        flat = x.transpose(1, 2)
        mean = mean.transpose(1, 2)
        patches = x[:, num_extra_tokens:]
        side = math.isqrt(patches.shape[1])
        maps = patches.transpose(1, 2).reshape(x.shape[0], x.shape[2], side, side)
    ratio = (flat - mean).flatten(1).norm(dim=1) / flat.flatten(1).norm(dim=1)
    spectrum = torch.fft.fft2(maps)
    k = maps.shape[-1] // 2
    # the weight rows are 1, cos θ and sin θ: the last column is -Im F(k, k)
    bins = torch.stack(
        [spectrum[..., 0, 0].real, spectrum[..., k, k].real, -spectrum[..., k, k].imag], dim=-1)
    return ratio, bins


#: (shape, memory format, extra tokens): maps contiguous and channels-last, an odd side, a
#: map longer than one tile, tokens with and without a class token
CASES = [((2, 5, 4, 4), None, 0), ((2, 5, 4, 4), torch.channels_last, 0), ((3, 3, 7, 7), None, 0),
         ((2, 70, 6, 6), torch.channels_last, 0), ((2, 2, 40, 40), None, 0), ((2, 17, 6), None, 1),
         ((2, 16, 9), None, 0)]


@interpreted
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('shape,memory_format,extra', CASES)
def test_the_kernel_gives_the_ratio_and_the_end_bins(shape, memory_format, extra, dtype):
    x = _state(shape, dtype, memory_format)
    with spectrum_sums_forced():
        assert spectrum_sums_apply(x)
        sums = frequency_sums(x, extra)
    ratio, bins = _expected(x, extra)
    b, c = shape[0], shape[1] if len(shape) == 4 else shape[2]
    assert sums.squares.shape == (2, b, c) and sums.end_bins.shape == (b, c, 3)
    torch.testing.assert_close(
        high_frequency_ratio_of(sums.squares).double(), ratio, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sums.end_bins.double(), bins, rtol=1e-4, atol=1e-3)


@interpreted
@pytest.mark.parametrize('shape,memory_format,extra', CASES)
def test_frequency_summary_on_the_kernel_equals_the_pytorch_path(shape, memory_format, extra):
    x = _state(shape, torch.float32, memory_format)
    expected = frequency_summary(x, extra)
    with spectrum_sums_forced():
        got = frequency_summary(x, extra)
    torch.testing.assert_close(got.hf_ratio, expected.hf_ratio, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.end_bins, expected.end_bins, rtol=1e-4, atol=1e-4)


@interpreted
def test_a_constant_map_has_no_high_frequencies_on_the_kernel():
    """The squares are taken about the mean in a second pass, not as Σx² - N mean²: a map
    that is nearly constant keeps its small ratio."""
    x = torch.full((2, 3, 8, 8), 1000.0)
    x[:, :, 0, 0] += 1.0  # Σx² - N mean² would lose it: Σx² is 6.4e7 per channel
    with spectrum_sums_forced():
        got = frequency_summary(x)
    expected, _ = _expected(x)
    torch.testing.assert_close(got.hf_ratio.double(), expected, rtol=1e-3, atol=0.0)


@pytest.fixture
def tiny_nets():
    """A CIFAR ResNet (maps of 16, 8, 4, 2 a side) and a ViT (16 patch tokens and a class
    token), each with a batch."""
    from mmpretrain.models.backbones import ResNet_CIFAR, VisionTransformer
    torch.manual_seed(0)
    resnet = ResNet_CIFAR(depth=18, stem_channels=4, base_channels=4)
    resnet.eval()  # (mmpretrain's ResNet.train returns None)
    vit = VisionTransformer(
        arch=dict(embed_dims=12, num_layers=2, num_heads=2, feedforward_channels=24), img_size=16,
        patch_size=4)
    vit.eval()
    images = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    return [(resnet, images), (vit, images)]


@interpreted
@pytest.mark.parametrize('compacted', [False, True])
def test_the_frequency_hook_reads_the_same_values_on_the_kernel(tiny_nets, compacted, monkeypatch):
    """A FrequencyHook's scalars with the kernel and with PyTorch's passes; ``compacted``: the
    waiting iteration's sums reduced early, as when many iterations wait for a write."""
    from mmstiff.engine.hooks import FrequencyHook, frequency_hook
    from mmstiff.engine.hooks.diagnostic_hook import TRAJECTORY
    if compacted:
        monkeypatch.setattr(frequency_hook, 'PENDING_BINS_BYTES', 0)
    for net, images in tiny_nets:

        def scalars(forced):
            hook = FrequencyHook(interval=1, num_samples=2)
            with spectrum_sums_forced() if forced else contextlib.nullcontext():
                outputs = hook_outputs(hook, net, images)
            states = [
                m for calls in outputs[TRAJECTORY].values() for call in calls
                for m in call.values()
            ]
            assert all((m.hf_squares is not None) == forced for m in states)
            return hook.summarise_rows([hook.compact(outputs)])[0]

        expected, got = scalars(False), scalars(True)
        assert got.keys() == expected.keys()
        assert any(k.startswith('hf_ratio/') for k in got)
        assert any(k.startswith('dlogamp/') for k in got)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch)')
def test_a_map_state_costs_the_kernel_alone(monkeypatch):
    """The FrequencyHook's reduction of a map state on the kernel (a stand-in that launches
    nothing): one launch and its two outputs' allocations, where the PyTorch path runs six
    operators (the bins' product, the DC, the difference, two norms, their ratio) and writes a
    temporary of the state's size."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from mmstiff.engine.hooks import FrequencyHook

    class Ops(TorchDispatchMode):

        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__.split('.')[0])
            return func(*args, **(kwargs or {}))

    kernel = StandInKernel()
    monkeypatch.setattr(triton_spectrum, '_spectrum_sums_kernel', kernel)
    hook = FrequencyHook(interval=1)
    x = _state((2, 8, 6, 6))
    with spectrum_sums_forced():
        hook._state_metrics(x)  # the weight rows made and cached
        with Ops() as ops:
            metrics = hook._state_metrics(x)
    assert kernel.launches == 2
    assert metrics.hf_ratio is None and metrics.hf_squares.shape == (2, 2, 8)
    assert sorted(name for name in ops.names if name not in ('view', 'alias')) == ['empty'] * 2
    with Ops() as ops:
        hook._state_metrics(x)  # the PyTorch path
    computing = [n for n in ops.names if n not in ('view', 'alias', 'slice', 'expand', '_to_copy')]
    assert len(computing) >= 6, ops.names


def test_the_kernel_is_left_to_cuda_and_to_states_with_a_square_map(monkeypatch):

    def refuse(*args):
        raise AssertionError('the kernel was called')

    monkeypatch.setattr('mmstiff.analysis.frequency.try_spectrum_sums', refuse)
    x = _state((2, 3, 4, 4))
    assert not spectrum_sums_apply(x) and frequency_sums(x) is None
    expected = diagonal_end_bins(x)
    torch.testing.assert_close(frequency_summary(x).end_bins, expected)
    with spectrum_sums_forced():
        assert spectrum_sums_apply(x) is HAS_TRITON
        assert frequency_sums(_state((2, 3, 4, 5))) is None  # no square map
        assert frequency_sums(_state((2, 3, 1, 1))) is None  # a 1 × 1 map
        assert frequency_sums(_state((2, 7, 3))) is None  # no square grid of patches
        frequency_summary(_state((2, 3, 4, 5)))
    assert not triton_spectrum.KERNEL.is_forced


@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch)')
def test_a_kernel_that_cannot_be_built_leaves_the_summary_to_pytorch(monkeypatch):
    kernel = StandInKernel(fails=True)
    monkeypatch.setattr(triton_spectrum, '_spectrum_sums_kernel', kernel)
    monkeypatch.setattr(triton_spectrum.KERNEL, 'failure', None)
    x = _state((2, 3, 4, 4))
    expected = frequency_summary(x)
    with spectrum_sums_forced():
        with pytest.warns(RuntimeWarning, match='C compiler.*PyTorch operators'):
            got = frequency_summary(x)
        assert not spectrum_sums_apply(x)
        again = frequency_summary(x)  # not tried again, no second warning
    assert kernel.launches == 1
    for summary in (got, again):
        torch.testing.assert_close(summary.hf_ratio, expected.hf_ratio)
        torch.testing.assert_close(summary.end_bins, expected.end_bins)


def test_the_hook_asks_for_the_kernel_once_per_state(monkeypatch):
    """Where the kernel gives no sums (here: off CUDA), the FrequencyHook takes PyTorch's path
    without asking a second time, and gets frequency_summary's values."""
    from mmstiff.analysis import frequency
    from mmstiff.engine.hooks import FrequencyHook
    asked = []

    def counted(x):
        asked.append(tuple(x.shape))
        return spectrum_sums_apply(x)

    monkeypatch.setattr(frequency, 'spectrum_sums_apply', counted)
    x = _state((2, 3, 4, 4))
    metrics = FrequencyHook(interval=1)._state_metrics(x)
    assert asked == [(2, 3, 4, 4)]
    expected = frequency_summary(x)
    assert metrics.hf_squares is None
    torch.testing.assert_close(metrics.hf_ratio, expected.hf_ratio)
    torch.testing.assert_close(metrics.end_bins, expected.end_bins)
