"""StiffnessHook and FrequencyHook on the GPU, under autocast, and through ``train.py --amp``.

* float32 on CUDA gives the values float32 on the CPU gives (the NSI's norms from a Triton
  kernel on CUDA, PyTorch's passes on the CPU);
* a recorded forward pass queues its reductions on the device and never waits for it (CUDA's
  synchronisation debug mode raises on any synchronising call), and writing the recorded
  iterations brings them to the host in one transfer per hook;
* under autocast (float16 on CUDA, bfloat16 on CUDA and on the CPU) the recorded states are
  half-precision tensors; the values are finite and within that precision of float32's.
"""
import copy
import json
import math
import os.path as osp
import warnings

import pytest
import torch

from mmstiff.engine.hooks import FrequencyHook, StiffnessHook

SETTINGS = [
    pytest.param(('cuda', None), marks=pytest.mark.cuda, id='cuda-fp32'),
    pytest.param(('cuda', torch.float16), marks=pytest.mark.cuda, id='cuda-fp16'),
    pytest.param(('cuda', torch.bfloat16), marks=pytest.mark.cuda, id='cuda-bf16'),
    pytest.param(('cpu', torch.bfloat16), id='cpu-bf16'),
]


def _resnet():
    from mmstiff.models.backbones import StepResNet_CIFAR
    torch.manual_seed(0)
    net = StepResNet_CIFAR(depth=18, stem_channels=8, base_channels=8, zero_init_residual=False,
                           adaptor=dict(type='mmstiff.StepNetAdaptor'))
    with torch.no_grad():  # step sizes that depend on the sample
        for name, p in net.named_parameters():
            if 'adaptor' in name:
                p.add_(0.5 * torch.randn_like(p))
    return net, torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def _vit():
    from mmstiff.models.backbones import StepViT
    torch.manual_seed(0)
    net = StepViT(
        arch=dict(embed_dims=32, num_layers=3, num_heads=4, feedforward_channels=64), img_size=32,
        patch_size=4, attn_scale_layers=[1], feat_scale_layers=[2])
    return net, torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))


MODELS = {'stepnet-resnet': _resnet, 'vit-attnscale-featscale': _vit}


def _hooks():
    return [StiffnessHook(interval=1), FrequencyHook(interval=1, num_samples=4)]


def _record(backbone, images, hooks, device, dtype=None):
    """One recorded training forward pass (autograd on, batch statistics), each hook's rows."""
    backbone = backbone.to(device)
    backbone.train()  # (some backbones' train() returns None)
    images = images.to(device)
    recorders = [hook.build_recorders(backbone) for hook in hooks]
    for found in recorders:
        for recorder in found.values():
            recorder.start()
    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
        out = backbone(images)[-1]
    for found in recorders:
        for recorder in found.values():
            recorder.stop()
    out.float().sum().backward()  # a training iteration: the graph was kept
    return [[{role: r.outputs for role, r in found.items()}] for found in recorders]


def _summaries(build, device, dtype=None):
    backbone, images = build()
    hooks = _hooks()
    rows = _record(backbone, images, hooks, device, dtype)
    return [hook.summarise_rows(r)[0] for hook, r in zip(hooks, rows)]


#: relative tolerance per metric and precision (dlogamp: absolute, a difference of logs)
TOLERANCE = {None: 1e-4, torch.float16: 3e-2, torch.bfloat16: 1e-1}


def _assert_close(actual, expected, dtype):
    assert list(actual) == list(expected)
    tol = TOLERANCE[dtype]
    for key, value in expected.items():
        got = actual[key]
        if not math.isfinite(value):
            continue
        if key.startswith('adjoint') and dtype is not None:
            # this pass's loss, the sum of a LayerNorm output, has a gradient of rounding noise
            # only, which another precision rounds otherwise; the adjoint under autocast and a
            # loss scale is checked against autograd in tests/engine/test_adjoint.py
            continue
        assert math.isfinite(got), key
        if key.startswith('dlogamp/'):
            assert got == pytest.approx(value, abs=max(10 * tol, 1e-4)), key
        elif key.startswith(('tns/', 'nsi_step_corr/')):  # a max over blocks, a correlation
            assert got == pytest.approx(value, rel=3 * tol, abs=3 * tol), key
        else:
            assert got == pytest.approx(value, rel=tol, abs=1e-6), key


@pytest.mark.parametrize('setting', SETTINGS)
@pytest.mark.parametrize('model', list(MODELS))
def test_hook_values_on_the_device_and_under_autocast(model, setting):
    device, dtype = setting
    expected = _summaries(MODELS[model], 'cpu')
    actual = _summaries(MODELS[model], device, dtype)
    for got, want in zip(actual, expected):
        _assert_close(got, want, dtype)
    if dtype is not None:  # the states were half-precision indeed
        assert actual[0] != expected[0]


@pytest.mark.cuda
@pytest.mark.parametrize('model', list(MODELS))
def test_a_recorded_iteration_never_waits_for_the_device(model):
    backbone, images = MODELS[model]()
    backbone = backbone.cuda()
    backbone.train()
    images = images.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        backbone(images)[-1].float().sum().backward()  # the model alone
    except RuntimeError as error:
        pytest.skip(f'the model itself synchronises: {error}')
    finally:
        torch.cuda.set_sync_debug_mode('default')
    hooks = _hooks()
    torch.cuda.set_sync_debug_mode('error')
    try:
        rows = _record(copy.deepcopy(backbone), images, hooks, 'cuda')
    finally:
        torch.cuda.set_sync_debug_mode('default')
    for hook, hook_rows in zip(hooks, rows):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode('warn')
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter('always')
                hook.summarise_rows(hook_rows * 3)  # three recorded iterations
        finally:
            torch.cuda.set_sync_debug_mode('default')
        syncs = [w for w in caught if 'synchroniz' in str(w.message)]
        assert len(syncs) == 1, [str(w.message) for w in syncs]


@pytest.mark.cuda
@pytest.mark.parametrize('shape,memory_format', [((4, 16, 9, 9), None),
                                                 ((4, 16, 9, 9), torch.channels_last),
                                                 ((4, 17, 32), None)])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_stiffness_norms_take_the_sums_kernel_on_cuda(shape, memory_format, dtype, monkeypatch):
    """On CUDA the norms come from the one-pass Triton kernel (for Δ per channel too), equal to
    the CPU's PyTorch passes on the same stored values."""
    from mmstiff.analysis import stiffness, stiffness_norms, triton_sums
    calls = []
    kernel = stiffness.try_state_sums
    monkeypatch.setattr(stiffness, 'try_state_sums', lambda *a: calls.append(1) or kernel(*a))
    g = torch.Generator().manual_seed(0)
    x_t = torch.randn(shape, generator=g)
    x_next = (x_t + 0.2 * torch.randn(shape, generator=g)).to(dtype)
    if memory_format is not None:
        x_t = x_t.contiguous(memory_format=memory_format)
    channels = shape[1] if len(shape) == 4 else shape[2]
    step = torch.rand(*((shape[0], channels, 1, 1) if len(shape) == 4 else
                        (shape[0], 1, channels)), generator=g) + 0.5
    for delta in (None, 0.5, step):
        want = stiffness_norms(x_t, x_next, delta)
        got = stiffness_norms(x_t.cuda(), x_next.cuda(),
                              delta.cuda() if torch.is_tensor(delta) else delta)
        torch.testing.assert_close(got.slope.cpu(), want.slope, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got.state.cpu(), want.state, rtol=1e-5, atol=1e-6)
    assert len(calls) == 3 and triton_sums.KERNEL.failure is None  # the kernel ran each time


@pytest.mark.cuda
@pytest.mark.parametrize('shape,memory_format,extra', [((4, 16, 9, 9), None, 0),
                                                       ((4, 16, 9, 9), torch.channels_last, 0),
                                                       ((4, 17, 32), None, 1)])
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_frequency_summary_takes_the_spectrum_kernel_on_cuda(shape, memory_format, extra, dtype,
                                                             monkeypatch):
    """On CUDA a state's frequency summary comes from the Triton kernel, equal to the CPU's
    PyTorch operators on the same stored values."""
    from mmstiff.analysis import frequency, frequency_summary, triton_spectrum
    calls = []
    kernel = frequency.try_spectrum_sums
    monkeypatch.setattr(frequency, 'try_spectrum_sums', lambda *a: calls.append(1) or kernel(*a))
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) + 0.5).to(dtype)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    want = frequency_summary(x, extra)
    got = frequency_summary(x.cuda(), extra)
    torch.testing.assert_close(got.hf_ratio.cpu(), want.hf_ratio, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.end_bins.cpu(), want.end_bins, rtol=1e-4, atol=1e-4)
    assert len(calls) == 1 and triton_spectrum.KERNEL.failure is None  # the kernel ran


@pytest.mark.cuda
@pytest.mark.slow
def test_train_with_amp_and_the_hooks(tiny_data, run_tool, tmp_path):
    root = tiny_data('cifar10')
    work = tmp_path / 'work'
    run_tool(
        'tools/train.py', 'tests/data/configs/cifar10_resnet18_tiny_diagnostics.py', '--amp',
        '--work-dir', str(work), '--cfg-options', *[
            f'{loader}.dataset.data_root={root}'
            for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
        ])
    (scalars, ) = work.glob('*/vis_data/scalars.json')
    lines = [json.loads(line) for line in open(scalars)]
    losses = [line['loss'] for line in lines if 'loss' in line]
    diagnostics = [
        line for line in lines if any(k.startswith(('stiffness/', 'freq/')) for k in line)
    ]
    assert losses and all(math.isfinite(v) for v in losses)
    assert len(diagnostics) == 4  # both hooks, iterations 1 and 2
    for line in diagnostics:
        values = {k: v for k, v in line.items() if k not in ('step', 'iter', 'epoch')}
        assert values and all(math.isfinite(v) for v in values.values())
    assert any('stiffness/nsi/layer1.0' in line for line in diagnostics)
    assert osp.isfile(work / 'iter_2.pth')


@pytest.mark.cuda
def test_bench_hooks_busy_profiles_the_kernels_of_each_setting(run_tool):
    """``bench_hooks.py --busy``: each setting's kernel time per iteration, the hooks' above the
    plain iteration's (their own kernels run on the device)."""
    proc = run_tool('tools/benchmark/bench_hooks.py', '--device', 'cuda', '--busy',
                    '--base-channels', '4', '--batch-size', '2', '--repeats', '1', '--iters', '2',
                    '--warmup', '1', '--only', '@1', '--log-interval', '2', timeout=900)
    busy = proc.stdout.split('device busy:')[1].split('peak (MiB)')[0]
    rows = {}
    for line in busy.splitlines():
        for name in ('no hook', 'StiffnessHook @1', 'FrequencyHook @1'):
            if line.startswith(name + '  '):
                rows[name] = [float(v) for v in line[len(name):].split()]
    assert rows['no hook'][0] > 0 and rows['no hook'][1] == 1.0
    for name in ('StiffnessHook @1', 'FrequencyHook @1'):
        assert rows[name][1] > 1.0, rows  # the hooks' own kernels add device time
