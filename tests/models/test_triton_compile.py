"""Every Triton kernel of the package (the fused step's, the stiffness norms', the frequency
sums') compiles for the GPUs it is meant for, without one, and keeps its values in registers.

The interpreter tests (test_triton_step.py) check what the kernels compute; they do not check
that Triton's GPU compiler takes them (the interpreter runs constructs the compiler refuses,
and the other way round), nor what the compiled kernel costs. Here each launcher runs on meta
tensors with its kernels replaced by recorders of their launch arguments, for ResNet-50's and
ViT's shapes at batch 64 and 2 (``tools/benchmark/kernel_resources.py``), and every recorded
launch is compiled ahead of time to a cubin for sm_90 (H100, H200; float32 and bfloat16 inputs)
and sm_80 (A100; float32) with the ptxas that ships with Triton (about 1 s a launch on 2 cores:
a slow test). The shared memory each needs is checked against the card's 227 KiB (sm_90) and
163 KiB (sm_80) per block, and its stack frame, read from the cubin with Triton's cuobjdump,
must be empty: a kernel that spills registers to local memory reads and writes them there on
every use.
"""
import pytest
import torch
from script_modules import load_script  # tests/

from mmstiff.utils.triton_launch import HAS_TRITON

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch on Linux)')
]
resources = load_script('tools/benchmark/kernel_resources.py')
#: compute capability -> shared memory a block may use (bytes)
TARGETS = {90: 227 * 1024, 80: 163 * 1024}


def _distinct(launches):
    """One launch per kernel, argument types and constexprs (whatever its grid)."""
    return [(fn, args, kwargs) for fn, _, args, kwargs in resources.distinct(launches, False)]


@pytest.mark.parametrize('dtype, capability', [(torch.float32, 90), (torch.bfloat16, 90),
                                               (torch.float32, 80)])
def test_every_launch_compiles_for_the_gpu(dtype, capability):
    launches = _distinct(resources.every_launch(dtype))
    names = {fn.__name__ for fn, _, _ in launches}
    assert names == {
        '_pool_kernel', '_step_kernel', '_measured_step_kernel', '_step_backward_kernel',
        '_moments_backward_kernel', '_phi_forward_kernel', '_phi_backward_kernel',
        '_se_hidden_kernel', '_se_gate_kernel', '_se_hidden_backward_kernel',
        '_se_squeeze_backward_kernel', '_fold_forward_kernel', '_fold_backward_kernel',
        '_state_sums_kernel', '_spectrum_sums_kernel'
    }
    spilled = []
    for fn, args, kwargs in launches:
        compiled = resources.compile_launch(fn, args, kwargs, capability)
        assert compiled.asm['cubin'], fn.__name__
        usage = resources.resources(compiled)
        assert usage['shared'] <= TARGETS[capability], (fn.__name__, kwargs, usage)
        assert usage['warps'] == kwargs.get('num_warps', 4), (fn.__name__, kwargs, usage)
        if usage['spill']:
            spilled.append((fn.__name__, kwargs, usage))
    assert not spilled, spilled


def test_a_kernel_that_spills_is_seen_spilling():
    """The stack frame read from the cubin is a spill where one is: a program of one warp that
    holds 8192 float32 values (256 a thread, more than a thread's 255 registers)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _hold(x_ptr, o_ptr, BLOCK: tl.constexpr):
        xs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + xs)
        tl.store(o_ptr + xs, x * tl.sum(tl.exp(x), axis=0) + tl.cumsum(x, axis=0))

    x = torch.empty(8192)
    compiled = resources.compile_launch(_hold, (x, x), dict(BLOCK=8192), 90, num_warps=1)
    small = resources.compile_launch(_hold, (x, x), dict(BLOCK=256), 90, num_warps=1)
    assert resources.resources(compiled)['spill'] > 0
    assert resources.resources(small)['spill'] == 0
    assert resources.resources(small)['warps'] == 1


@pytest.mark.parametrize('batch, dtype', [(256, torch.float32), (512, torch.float32),
                                          (2048, torch.float32), (2048, torch.bfloat16)])
def test_large_batches_a_column_program_holds_compile_without_spills(batch, dtype):
    """StepNet's and the folded BN's (B, C) passes hold a block of channels over the whole batch:
    at 256 and 512 samples (8 and 4 channels a program; 8 warps, 16 for StepNet's backward) and
    at :attr:`ColumnKernels.MAX_BATCH` (one channel a program) they still fit."""
    from mmstiff.models.steps.fused.triton_columns import ColumnKernels
    assert ColumnKernels.MAX_BATCH == 2048
    launches = [
        (fn, args, kwargs)
        for fn, args, kwargs in _distinct(resources.launches_of_the_fused_step(dtype, (batch, )))
        if fn.__name__.startswith(('_phi', '_fold'))
    ]
    assert {kwargs['BLOCK_B'] for _, _, kwargs in launches} == {batch}
    assert len(launches) >= 4
    for fn, args, kwargs in launches:
        usage = resources.resources(resources.compile_launch(fn, args, kwargs, 90))
        assert usage['spill'] == 0, (fn.__name__, kwargs, usage)
        assert usage['warps'] == kwargs.get('num_warps', 4), (fn.__name__, kwargs, usage)
    assert any(
        kwargs.get('num_warps') == 8 for fn, _, kwargs in launches
        if fn.__name__ == '_fold_backward_kernel')
