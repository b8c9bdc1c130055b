"""The fused step's Triton kernels on a GPU against the reference step (docs/methods.md §0,
"The fused step"): float32, AMP (float16 with a gradient scaler, bfloat16), channels-last."""
import contextlib
import copy

import pytest
import torch
import torch.nn as nn
from float64_reference import assert_no_farther  # tests/
from hook_scalars import hook_scalars  # tests/
from step_calls import residual_update  # tests/

from mmstiff.models.backbones import StepResNet, StepViT
from mmstiff.models.steps import (SEAdaptor, StepNetAdaptor, choose_step, forced_step_kernels,
                                  reference_step, set_fused, step_from_means)
from mmstiff.models.steps.fused import FusedPhi
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.models.steps.fused.triton_step import TritonStepKernels

pytestmark = pytest.mark.cuda
STEPNET = dict(type='mmstiff.StepNetAdaptor')
SE = dict(type='mmstiff.SEAdaptor')


def test_true_takes_the_triton_kernels_on_cuda_and_auto_the_reference():
    net = StepResNet(18, base_channels=4, stem_channels=4, fused=True).cuda()
    assert isinstance(net.layer1[0].take_step.kernels, TritonStepKernels)  # chosen at the move
    cuda = torch.device('cuda')
    assert isinstance(choose_step(True, cuda).kernels, TritonStepKernels)
    assert choose_step('auto', cuda) is reference_step  # measured faster on an H200
    assert choose_step(False, cuda) is reference_step


@pytest.mark.parametrize('layout, shape', [('nchw', (8, 64, 14, 14)), ('nchw', (4, 256, 7, 7)),
                                           ('nlc', (4, 197, 96))])
@pytest.mark.parametrize('channels_last', [False, True])
def test_triton_step_equals_reference(layout, shape, channels_last):
    if channels_last and layout == 'nlc':
        pytest.skip('tokens have no channels-last format')
    channels = shape[1] if layout == 'nchw' else shape[2]
    adaptor = StepNetAdaptor(channels, layout=layout).cuda().train()
    torch.manual_seed(0)
    x, f = torch.randn(shape, device='cuda'), torch.randn(shape, device='cuda')
    if channels_last:
        x, f = (t.contiguous(memory_format=torch.channels_last) for t in (x, f))
    results = []
    for fused in (False, True):
        xx, ff = x.clone().requires_grad_(), f.clone().requires_grad_()
        out = residual_update(xx, ff, adaptor, layout, fused,
                              act=nn.ReLU() if layout == 'nchw' else None)
        grads = torch.autograd.grad(out.square().sum(), [xx, ff, *adaptor.parameters()])
        results.append([out, *grads])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def _pair(build):
    torch.manual_seed(0)
    reference = build(fused=False).cuda()
    fused = build(fused=True).cuda()
    fused.load_state_dict(reference.state_dict())
    return reference, fused


def _train_step(net, images, dtype, channels_last):
    net.train()
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    scaler = torch.amp.GradScaler('cuda') if dtype == torch.float16 else None
    with torch.autocast('cuda', dtype=dtype, enabled=dtype is not None):
        out = net(images)[-1]
        out = out[0] if isinstance(out, (tuple, list)) else out
        wide = torch.promote_types(out.dtype, torch.float32)  # float64 stays float64
        loss = out.to(wide).square().mean()
    (scaler.scale(loss) if scaler else loss).backward()
    grads = [
        p.grad.to(wide) / (scaler.get_scale() if scaler else 1.0) for p in net.parameters()
        if p.grad is not None
    ]
    return out.to(wide), grads


@pytest.mark.parametrize('adaptor', [STEPNET, SE, None])
@pytest.mark.parametrize('channels_last', [False, True])
def test_fused_resnet_equals_reference(adaptor, channels_last):
    """The output and each gradient no farther from the float64 result (on the CPU) than the
    reference's; running statistics within 1e-4. In float32 train mode an SE-ResNet-50's stem
    gradient is ill-conditioned, both steps about 1 % of it from float64 and 1e-3 apart (CPU
    test: tests/models/test_fused_backbones.py)."""
    reference, fused = _pair(lambda fused: StepResNet(50, adaptor=adaptor, fused=fused))
    images = torch.randn(4, 3, 64, 64, device='cuda')
    exact = _train_step(
        copy.deepcopy(reference).cpu().double(),
        images.cpu().double(), None, channels_last)
    ref = _train_step(reference, images, None, channels_last)
    got = _train_step(fused, images, None, channels_last)
    tol = 1e-4
    assert_no_farther([got[0], *got[1]], [ref[0], *ref[1]], [exact[0], *exact[1]])
    for (key, a), b in zip(reference.state_dict().items(), fused.state_dict().values()):
        if 'running' in key:
            torch.testing.assert_close(b, a, rtol=tol, atol=tol, msg=key)


def _relative_error(got, exact):
    """``||got − exact|| / ||exact||`` over a list of tensors (outputs or gradients)."""
    diff = sum((g - e).float().square().sum() for g, e in zip(got, exact))
    return (diff / sum(e.float().square().sum() for e in exact)).sqrt().item()


@pytest.mark.parametrize('adaptor', [STEPNET, SE, None])
@pytest.mark.parametrize('dtype, channels_last', [(torch.float16, False), (torch.bfloat16, True)])
def test_fused_resnet_under_amp_is_as_close_to_float32_as_the_reference(
        adaptor, dtype, channels_last):
    """Under autocast both paths round differently (the fused step forms f in float32), so
    each is compared with the float32 network: the fused step is no farther from it."""
    reference, fused = _pair(lambda fused: StepResNet(50, adaptor=adaptor, fused=fused))
    images = torch.randn(4, 3, 64, 64, device='cuda')
    exact = _train_step(copy.deepcopy(reference), images, None, channels_last)
    ref = _train_step(reference, images, dtype, channels_last)
    got = _train_step(fused, images, dtype, channels_last)
    parts = {'output': lambda run: [run[0]], 'gradients': lambda run: run[1]}
    for name, part in parts.items():
        reference_error = _relative_error(part(ref), part(exact))
        fused_error = _relative_error(part(got), part(exact))
        assert fused_error <= 1.25 * reference_error + 1e-3, (name, fused_error, reference_error)


@pytest.mark.parametrize('adaptor', [STEPNET, SE])
@pytest.mark.parametrize('channels_last', [False, True])
def test_both_cuda_steps_equal_the_cpu_reference(adaptor, channels_last):
    """float32 on the GPU, the reference, the fused step on Triton's kernels and on PyTorch's
    passes, each against the same network in float64 on the CPU: the output and each
    gradient no farther from it than the CPU's float32 reference step is. Where the CUDA
    paths disagree, this names the one that is off."""
    torch.manual_seed(0)
    cpu = StepResNet(50, adaptor=adaptor, fused=False)
    images = torch.randn(4, 3, 64, 64)
    exact = _train_step(copy.deepcopy(cpu).double(), images.double(), None, channels_last)
    expected = _train_step(copy.deepcopy(cpu), images, None, channels_last)
    for fused, kernels in ((False, None), (True, None), (True, TorchStepKernels)):
        net = set_fused(copy.deepcopy(cpu).cuda(), fused)
        with forced_step_kernels(kernels, net) if kernels else contextlib.nullcontext():
            got = _train_step(net, images.cuda(), None, channels_last)
        what = f'fused={fused}, kernels={kernels and kernels.name}, channels_last={channels_last}'
        assert_no_farther([got[0], *got[1]], [expected[0], *expected[1]], [exact[0], *exact[1]],
                          names=[f'{what}: output'] +
                          [f'{what}: gradient {i}' for i in range(len(got[1]))])


@pytest.mark.parametrize('dtype', [None, torch.bfloat16])
def test_fused_vit_equals_reference(dtype):
    arch = dict(embed_dims=96, num_layers=2, num_heads=2, feedforward_channels=192)

    def build(fused):
        return StepViT(arch, img_size=64, patch_size=16, msa_adaptor=STEPNET, mlp_adaptor=SE,
                       fused=fused)

    reference, fused = _pair(build)
    images = torch.randn(4, 3, 64, 64, device='cuda')
    tol = 1e-4 if dtype is None else 8e-2
    ref = _train_step(reference, images, dtype, False)
    got = _train_step(fused, images, dtype, False)
    torch.testing.assert_close(got[0], ref[0], rtol=tol, atol=tol)
    for a, b in zip(ref[1], got[1]):
        torch.testing.assert_close(b, a, rtol=tol, atol=tol * max(1.0, a.abs().max().item()))


@pytest.mark.parametrize('momentum', [0.1, None])
def test_stepnet_phi_kernels_equal_the_adaptor_modules(momentum):
    import copy

    from mmstiff.models.steps.fused.triton_stepnet_phi import TritonPhiKernels
    torch.manual_seed(0)
    reference = StepNetAdaptor(64).cuda().train()
    reference.norm.momentum = momentum
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn_like(p))
    fused = copy.deepcopy(reference)
    u, p = torch.randn(32, 64, device='cuda'), torch.randn(32, 64, device='cuda')
    results = []
    for adaptor, kernels in ((reference, None), (fused, TritonPhiKernels())):
        uu, pp = u.clone().requires_grad_(), p.clone().requires_grad_()
        for _ in range(2):
            phi = None if kernels is None else FusedPhi(kernels)
            step = step_from_means(adaptor, uu, pp, phi)
        weights = torch.linspace(-1, 1, step.numel(), device='cuda').view_as(step)
        grads = torch.autograd.grad((step * weights).sum(), [uu, pp, *adaptor.parameters()])
        results.append([step, *grads, *[b.clone() for b in adaptor.buffers()]])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('batch, channels', [(32, 64), (64, 2048), (3, 256)])
def test_se_phi_kernels_equal_the_adaptor_modules(batch, channels):
    import copy

    torch.manual_seed(0)
    reference = SEAdaptor(channels).cuda().train()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.3 * torch.randn_like(p))
    fused = copy.deepcopy(reference)
    p = torch.randn(batch, channels, device='cuda')
    results = []
    # the reference's 1x1 convolutions must not take TF32 either
    with torch.backends.cudnn.flags(allow_tf32=False):
        for adaptor, kernels in ((reference, None), (fused, TritonStepKernels().phi)):
            pp = p.clone().requires_grad_()
            phi = None if kernels is None else FusedPhi(kernels)
            step = step_from_means(adaptor, None, pp, phi)
            weights = torch.linspace(-1, 1, step.numel(), device='cuda').view_as(step)
            grads = torch.autograd.grad((step * weights).sum(), [pp, *adaptor.parameters()])
            results.append([step, *grads])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * max(1.0, a.abs().max().item()))


def test_stiffness_hook_values_equal_with_fused_on_and_off():
    torch.manual_seed(0)
    images = torch.randn(8, 3, 64, 64, device='cuda')
    scalars = []
    for fused in (False, True):
        torch.manual_seed(0)
        net = StepResNet(18, adaptor=STEPNET, fused=fused).cuda().train()
        scalars.append(hook_scalars(net, images))
    assert list(scalars[1]) == list(scalars[0])
    for key, value in scalars[0].items():
        # a correlation is NaN where the step sizes do not vary over the batch: NaN both ways
        tol = dict(abs=1e-4) if key.startswith('nsi_step_corr/') else dict(rel=1e-4)
        assert scalars[1][key] == pytest.approx(value, nan_ok=True, **tol), key
