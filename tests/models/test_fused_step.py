"""The fused residual step against the reference step (docs/methods.md §0, "The fused step")."""
import pytest
import torch
import torch.nn as nn
from step_calls import residual_update  # tests/

from mmstiff.models.steps import SEAdaptor, StepNetAdaptor, check_fused, choose_step, reference_step
from mmstiff.models.steps.fused.pool import PoolStates
from mmstiff.models.steps.fused.step import FusedStep
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.models.steps.fused.triton_step import HAS_TRITON, TritonStepKernels
from mmstiff.models.steps.fused.update import EulerUpdate

SHAPES = {'nchw': (3, 8, 5, 4), 'nlc': (3, 7, 8)}
ADAPTORS = {
    'stepnet': lambda layout: StepNetAdaptor(8, layout=layout),
    'stepnet-groups': lambda layout: StepNetAdaptor(8, layout=layout, groups=2),
    'stepnet-iebn': lambda layout: StepNetAdaptor(8, layout=layout, norm='iebn'),
    'stepnet-identity': lambda layout: StepNetAdaptor(8, layout=layout, start='identity'),
    'se': lambda layout: SEAdaptor(8, layout=layout, squeeze_channels=4),
    'se-identity': lambda layout: SEAdaptor(8, layout=layout, squeeze_channels=4, start='identity'),
    'plain': lambda layout: None,
}


def _random_adaptor(name, layout, dtype=torch.float32):
    """An adaptor with random parameters (also those an identity start zeroes)."""
    torch.manual_seed(1)
    adaptor = ADAPTORS[name](layout)
    if adaptor is not None:
        with torch.no_grad():
            for p in adaptor.parameters():
                p.normal_(0, 0.5)
        adaptor = adaptor.to(dtype)
    return adaptor


def _run(adaptor, x, f, layout, fused, relu, mode):
    """Output and gradients (x_t, f, every adaptor parameter) of one step, and the adaptor's
    buffers after it."""
    x = x.clone().requires_grad_()
    f = f.clone().requires_grad_()
    if adaptor is not None:
        adaptor.train(mode == 'train')
    out = residual_update(x, f, adaptor, layout, fused, act=nn.ReLU() if relu else None)
    params = [] if adaptor is None else list(adaptor.parameters())
    weight = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).view_as(out)
    grads = torch.autograd.grad((out * weight).sum(), [x, f] + params)
    buffers = [] if adaptor is None else [b.clone() for b in adaptor.buffers()]
    return [out.detach(), *grads], buffers


@pytest.mark.parametrize('layout', ['nchw', 'nlc'])
@pytest.mark.parametrize('name', list(ADAPTORS))
@pytest.mark.parametrize('mode', ['train', 'eval'])
def test_fused_step_equals_reference_values_gradients_and_statistics(layout, name, mode):
    relu = layout == 'nchw'
    torch.manual_seed(0)
    x, f = torch.randn(SHAPES[layout]), torch.randn(SHAPES[layout])
    results = []
    for fused in (False, True):
        adaptor = _random_adaptor(name, layout)  # the same start for both: statistics compared
        results.append(_run(adaptor, x, f, layout, fused, relu, mode))
    (ref, ref_buffers), (got, got_buffers) = results
    for a, b in zip(ref, got):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(ref_buffers, got_buffers):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    if mode == 'train' and name.startswith('stepnet'):  # the BN statistics moved, alike
        fresh = list(ADAPTORS[name](layout).buffers())
        assert any(not torch.equal(a, b) for a, b in zip(ref_buffers, fresh))


def test_fused_step_of_a_single_sample_uses_the_running_statistics():
    x, f = torch.randn(1, 8, 3, 3), torch.randn(1, 8, 3, 3)
    ref, ref_buffers = _run(_random_adaptor('stepnet', 'nchw'), x, f, 'nchw', False, True, 'train')
    got, got_buffers = _run(_random_adaptor('stepnet', 'nchw'), x, f, 'nchw', True, True, 'train')
    for a, b in zip(ref + ref_buffers, got + got_buffers):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert torch.equal(got_buffers[0], torch.zeros(8))  # unchanged running mean


def test_the_step_is_chosen_by_device_and_setting():
    cpu, cuda = torch.device('cpu'), torch.device('cuda')
    for device in (cpu, cuda):  # 'auto' is the reference (docs/benchmarks.md)
        assert choose_step(False, device) is reference_step
        assert choose_step('auto', device) is reference_step
    fused = choose_step(True, cpu, layout='nlc')
    assert isinstance(fused, FusedStep) and fused.kernels is TorchStepKernels
    assert fused.layout == 'nlc' and fused.compiled is TorchStepKernels
    if HAS_TRITON:  # a CUDA block takes the Triton kernels (choose_step reads only the device)
        assert isinstance(choose_step(True, cuda).kernels, TritonStepKernels)
    kernels = object()  # forced kernels take 'auto' too, not False
    assert choose_step('auto', cpu, kernels).kernels is kernels
    assert choose_step('auto', cpu, kernels).compiled is None
    assert choose_step(False, cpu, kernels) is reference_step


def test_a_block_chooses_its_step_when_fused_is_set_and_when_it_moves():
    from mmstiff.models.backbones import StepResNet
    net = StepResNet(18, base_channels=4, stem_channels=4, fused=True)
    block = net.layer1[0]
    assert isinstance(block.take_step, FusedStep) and block.take_step.kernels is TorchStepKernels
    block.fused = 'auto'
    assert block.take_step is reference_step
    block.fused = True
    before = block.take_step
    net.double()  # a move re-chooses the step of a fused block
    assert isinstance(block.take_step, FusedStep) and block.take_step is not before
    with pytest.raises(ValueError, match='fused='):
        block.fused = 'on'


@pytest.mark.parametrize('bad', ['on', 'AUTO', 1, 0, None, 'true'])
def test_check_fused_names_the_field_and_value(bad):
    with pytest.raises(ValueError, match=r"fused=.*is not supported; expected one of \('auto'"):
        check_fused(bad)


@pytest.mark.parametrize('layout', ['nchw', 'nlc'])
def test_torch_kernels_are_the_explicit_formulas(layout):
    torch.manual_seed(0)
    x, f, g = (torch.randn(SHAPES[layout], dtype=torch.float64) for _ in range(3))
    dims = (2, 3) if layout == 'nchw' else (1, )
    step = torch.rand(3, 8, dtype=torch.float64)
    wide = step[:, :, None, None] if layout == 'nchw' else step[:, None, :]
    pooled, pooled_f = TorchStepKernels.pool(x, f, layout)
    torch.testing.assert_close(pooled, x.mean(dims))
    torch.testing.assert_close(pooled_f, f.mean(dims))
    out = TorchStepKernels.step(x, step, f, True, layout)
    torch.testing.assert_close(out, torch.clamp(x + wide * f, min=0))
    grad_x, grad_f, grad_step = TorchStepKernels.step_backward(g, out, f, step, True, layout, True)
    mask = (x + wide * f > 0).double()
    torch.testing.assert_close(grad_x, g * mask)
    torch.testing.assert_close(grad_f, g * mask * wide)
    torch.testing.assert_close(grad_step, (g * mask * f).sum(dims))


@pytest.mark.parametrize('layout', ['nchw', 'nlc'])
@pytest.mark.parametrize('relu', [True, False])
def test_fused_functions_pass_gradcheck(layout, relu):
    torch.manual_seed(0)
    shape = (2, 3, 3, 2) if layout == 'nchw' else (2, 4, 3)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    f = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)

    def step(x, f, weights):
        pooled, pooled_f = PoolStates.apply(x, f, layout, TorchStepKernels)
        delta = torch.sigmoid(weights * pooled + pooled_f)
        return EulerUpdate.apply(x, delta, f, relu, layout, TorchStepKernels)

    assert torch.autograd.gradcheck(step, (x, f, weights))


@pytest.mark.parametrize('layout', ['nchw', 'nlc'])
@pytest.mark.parametrize('name', ['stepnet', 'se'])
def test_reference_step_passes_gradcheck(layout, name):
    adaptor = _random_adaptor(name, layout, torch.float64).eval()
    torch.manual_seed(0)
    shape = (2, 8, 2, 2) if layout == 'nchw' else (2, 3, 8)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    f = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, f: residual_update(x, f, adaptor, layout, False, act=nn.ReLU()), (x, f))
