"""Every Triton kernel of the package (the fused step's, the stiffness norms', the frequency
sums') compiles for the GPUs it is meant for, without one.

The interpreter tests (test_triton_step.py) check what the kernels compute; they do not check
that Triton's GPU compiler takes them (the interpreter runs constructs the compiler refuses,
and the other way round). Here each launcher runs on CPU tensors with its kernels replaced by
recorders of their launch arguments, for ResNet-50's and ViT's shapes at batch 64 and 2, and
every recorded launch is compiled ahead of time to a cubin for sm_90 (H100, H200; float32 and
bfloat16 inputs) and sm_80 (A100; float32) with the ptxas that ships with Triton (about 1 s a
launch on 2 cores: a slow test). The shared memory each needs is checked against
the card's 227 KiB (sm_90) and 163 KiB (sm_80) per block.
"""
import pytest
import torch

from mmstiff.analysis import triton_spectrum, triton_sums
from mmstiff.models.steps.triton_step import TritonStepKernels
from mmstiff.utils.triton_launch import HAS_TRITON

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch on Linux)')
]
#: compute capability -> shared memory a block may use (bytes)
TARGETS = {90: 227 * 1024, 80: 163 * 1024}
DTYPES = {torch.float32: 'fp32', torch.float16: 'fp16', torch.bfloat16: 'bf16'}


class Recorder:
    """Stands for a ``@triton.jit`` kernel: ``kernel[grid](*args, **constexprs)`` records the
    launch and computes nothing."""

    def __init__(self, fn, launches):
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid):

        def launch(*args, **kwargs):
            self.launches.append((self.fn, args, kwargs))

        return launch


def recording_kernels():
    launches = []
    kernels = TritonStepKernels()
    for owner, name, _ in kernels.launch_slots():
        setattr(owner, name, Recorder(getattr(owner, name), launches))
    return kernels, launches


def _type(value):
    if isinstance(value, torch.Tensor):
        return '*' + DTYPES[value.dtype]
    if isinstance(value, bool):
        return 'i1'
    if isinstance(value, int):
        return 'i32' if -2**31 <= value < 2**31 else 'i64'
    return 'fp32'


def launches_of_the_fused_step(dtype):
    """Every kernel launch of the fused step's passes on ResNet-50 and ViT shapes."""
    kernels, launches = recording_kernels()
    for batch in (64, 2):
        for shape, layout in [((batch, 256, 56, 56), 'nchw'), ((batch, 2048, 7, 7), 'nchw'),
                              ((batch, 197, 384), 'nlc')]:
            x = torch.empty(shape, dtype=dtype)
            channels = shape[1] if layout == 'nchw' else shape[2]
            step = torch.empty(batch, channels, dtype=torch.float32)
            norm = torch.empty(channels), torch.empty(channels)  # the folded BN's (a, b)
            kernels.pool(x, x, layout)
            kernels.pool(None, x, layout)
            kernels.moments(x, x, layout)
            kernels.moments(None, x, layout)
            for relu in (True, False):
                kernels.step(x, step, x, relu, layout)
                kernels.step(x, None, x, relu, layout)
                kernels.step(x, step, x, relu, layout, norm=norm)
                kernels.measured_step(x, step, x, relu, layout, relu)
                kernels.measured_step(x, step, x, relu, layout, relu, norm=norm)
                kernels.step_backward(x, x if relu else None, x, step, relu, layout, True)
                kernels.step_backward(x, x if relu else None, x, step, relu, layout, True,
                                      norm=norm)
            coefficients = torch.empty(batch, channels, dtype=dtype)  # the moments' c0 and c1
            kernels.moments_backward(x, x, coefficients, coefficients, layout)
            kernels.moments_backward(x, x, coefficients, None, layout)
            u = torch.empty(batch, channels, dtype=dtype)
            vector = torch.empty(channels)
            for batch_stats, factor in ((True, 0.1), (False, None)):
                kernels.phi.phi_forward(u, u, torch.empty(channels, 2),
                                        vector, vector, vector, vector, vector.clone(),
                                        vector.clone(), batch_stats, factor, 1e-5, 1.0)
                kernels.phi.phi_backward(u, u, u, torch.empty(channels, 2), vector, vector, vector,
                                         vector, vector, vector, batch_stats, 1.0)
            mean = torch.empty(batch, channels)
            for batch_stats, factor, affine in ((True, 0.1, True), (False, None, True), (True, None,
                                                                                         False)):
                params = (vector, vector) if affine else (None, None)
                kernels.fold.fold_forward(mean, mean, *params, vector.clone(), vector.clone(),
                                          batch_stats, factor, 1e-5, 4 * batch, dtype)
                parts = torch.empty(2, batch, channels)
                for grad_state in (u, None):  # StepNet's pooled x_t; SE pools none
                    kernels.fold.fold_backward(parts, u, mean, params[0], vector, vector,
                                               batch_stats, 0.25, dtype, grad_state, 1 / 49)
            squeeze = max(8, channels // 16)
            w1, w2 = torch.empty(squeeze, channels), torch.empty(channels, squeeze)
            kernels.phi.se_forward(u, w1, torch.empty(squeeze), w2, vector, 1.0)
            kernels.phi.se_backward(
                torch.empty(batch, channels), u, torch.empty(batch, squeeze),
                torch.empty(batch, channels), w1, w2, 1.0)
    return launches


def launches_of_the_norms(dtype, monkeypatch):
    """The stiffness norms' kernel on the same shapes: states of one dtype, and a float32 x_t
    (a recorder's ReLU of a shortcut) against an x_{t+1} of the model's dtype."""
    launches = []
    monkeypatch.setattr(triton_sums, '_state_sums_kernel',
                        Recorder(triton_sums._state_sums_kernel, launches))
    for batch in (64, 2):
        for shape in [(batch, 256, 56, 56), (batch, 2048, 7, 7), (batch, 197, 384)]:
            x_next = torch.empty(shape, dtype=dtype)
            for x_t in (x_next, torch.empty(shape)):
                triton_sums.state_sums(x_t, x_next)
                if len(shape) == 4:
                    triton_sums.state_sums(
                        x_t.contiguous(memory_format=torch.channels_last), x_next)
    return launches


def compile_launch(fn, args, kwargs, capability):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    values = dict(zip(fn.arg_names, args), **kwargs)
    signature, constexprs = {}, {}
    for index, param in enumerate(fn.params):
        value = values[param.name]
        if param.is_constexpr or value is None:
            signature[param.name] = 'constexpr'
            constexprs[(index, )] = value
        else:
            signature[param.name] = _type(value)
    return triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs),
        target=GPUTarget('cuda', capability, 32))


def _distinct(launches):
    """One launch per (kernel, argument types, constexprs): what the compiler sees."""
    seen = {}
    for fn, args, kwargs in launches:
        key = (fn.__name__, tuple(_type(a) if a is not None else None
                                  for a in args), tuple(sorted(kwargs.items())))
        seen.setdefault(key, (fn, args, kwargs))
    return list(seen.values())


def launches_of_the_spectrum(dtype, monkeypatch):
    """The frequency sums' kernel on the states a FrequencyHook reads: its first samples (8 by
    default, and 2) of ResNet-50's maps, contiguous and channels-last, and of ViT's tokens."""
    launches = []
    monkeypatch.setattr(triton_spectrum, '_spectrum_sums_kernel',
                        Recorder(triton_spectrum._spectrum_sums_kernel, launches))
    for batch in (8, 2):
        for shape, extra in [((batch, 256, 56, 56), 0), ((batch, 2048, 7, 7), 0),
                             ((batch, 197, 384), 1)]:
            x = torch.empty(shape, dtype=dtype)
            side = shape[-1] if len(shape) == 4 else 14
            rows = torch.empty(3, side * side)
            triton_spectrum.spectrum_sums(x, rows, extra)
            if len(shape) == 4:
                triton_spectrum.spectrum_sums(x.contiguous(memory_format=torch.channels_last), rows)
    return launches


@pytest.mark.parametrize('dtype, capability', [(torch.float32, 90), (torch.bfloat16, 90),
                                               (torch.float32, 80)])
def test_every_launch_compiles_for_the_gpu(dtype, capability, monkeypatch):
    launches = _distinct(
        launches_of_the_fused_step(dtype) + launches_of_the_norms(dtype, monkeypatch) +
        launches_of_the_spectrum(dtype, monkeypatch))
    names = {fn.__name__ for fn, _, _ in launches}
    assert names == {
        '_pool_kernel', '_step_kernel', '_measured_step_kernel', '_step_backward_kernel',
        '_moments_backward_kernel', '_phi_forward_kernel', '_phi_backward_kernel',
        '_se_hidden_kernel', '_se_gate_kernel', '_se_excitation_backward_kernel',
        '_se_squeeze_backward_kernel', '_fold_forward_kernel', '_fold_backward_kernel',
        '_state_sums_kernel', '_spectrum_sums_kernel'
    }
    for fn, args, kwargs in launches:
        compiled = compile_launch(fn, args, kwargs, capability)
        assert compiled.asm['cubin'], fn.__name__
        assert compiled.metadata.shared <= TARGETS[capability], (fn.__name__, kwargs,
                                                                 compiled.metadata.shared)
