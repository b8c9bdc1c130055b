"""Registers, spills and occupancy of every Triton kernel launch of the fused step and the
diagnostics, compiled for a GPU on a machine without one.

Each launcher of the fused step's passes (``TritonStepKernels``: the pooling, the step, its
backward, the folded BN's and the adaptors' (B, C) passes), of the NSI sums and of the frequency
sums runs on meta tensors (shapes, no memory) of ResNet-50's and ViT-S's shapes with its
kernels replaced by recorders of their launches; every distinct launch (kernel, argument types,
constexprs) is then compiled ahead of time for the chosen compute capability with the ptxas that
ships with Triton, and its cubin read with Triton's ``cuobjdump``. Per launch it prints:

* ``programs``: the launch grid's size (an H100 / H200 has 132 SMs, an A100 108);
* ``warps``: the program's warps; ``regs``: registers per thread;
* ``spill B``: the stack frame per thread in bytes (the registers spilled to local memory; 0 for
  a kernel whose values all fit in registers);
* ``smem KiB``: shared memory per program;
* ``warps/SM``: the warps of this kernel one SM holds at once, as registers and shared memory
  allow (64 at most): how many loads a memory-bound pass can keep in flight.

Nothing here is timed; the GPU's figures come from ``bench_kernels.py``. The occupancy is the
arithmetic of NVIDIA's occupancy calculator (registers allocated per warp in units of 256, 64K
registers and 64 warps an SM), written out since no installable library computes it.

Usage:
    python tools/benchmark/kernel_resources.py [--capability 90] [--dtype float32|bfloat16]
                                               [--batch-size 64 [2 ...]] [--kernel NAME]
                                               [--spills-only]
"""
import argparse
import contextlib
import math
import re
import subprocess
import tempfile

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch

from mmstiff.analysis import triton_spectrum, triton_sums
from mmstiff.models.steps.fused.triton_step import TritonStepKernels
from mmstiff.utils.triton_launch import HAS_TRITON

DTYPES = {torch.float32: 'fp32', torch.float16: 'fp16', torch.bfloat16: 'bf16'}
#: compute capability -> (shared memory a program may use, shared memory of an SM), bytes
SHARED = {90: (227 * 1024, 228 * 1024), 80: (163 * 1024, 164 * 1024)}
#: an SM's registers and resident warps and programs (sm_80 and sm_90 alike)
SM_REGISTERS, SM_WARPS, SM_PROGRAMS = 65536, 64, 32
#: a launch's keywords that are compiler options, not the kernel's arguments
LAUNCH_OPTIONS = ('num_warps', 'num_stages')


class Recorder:
    """Stands for a ``@triton.jit`` kernel: ``kernel[grid](*args, **constexprs)`` records
    ``(kernel, grid, args, constexprs)`` and computes nothing."""

    def __init__(self, fn, launches):
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid):

        def launch(*args, **kwargs):
            self.launches.append((self.fn, tuple(grid), args, kwargs))

        return launch


def _empty(*shape, dtype=torch.float32):
    """A tensor of this shape and dtype on the meta device: the launchers read shapes, strides
    and dtypes only, so the inventory allocates nothing at any batch."""
    if len(shape) == 1 and isinstance(shape[0], tuple):
        shape = shape[0]
    return torch.empty(shape, dtype=dtype, device='meta')


@contextlib.contextmanager
def recording(slots, launches):
    """Inside it, each ``getattr(owner, attribute)`` of ``slots`` is a :class:`Recorder`."""
    kernels = [getattr(owner, attribute) for owner, attribute in slots]
    for owner, attribute in slots:
        setattr(owner, attribute, Recorder(getattr(owner, attribute), launches))
    try:
        yield
    finally:
        for (owner, attribute), kernel in zip(slots, kernels):
            setattr(owner, attribute, kernel)


def launches_of_the_fused_step(dtype, batches=(64, 2)):
    """Every kernel launch of the fused step's passes on ResNet-50's first and last stage and on
    ViT-S's tokens: ``[(kernel, grid, args, constexprs)]``."""
    launches = []
    kernels = TritonStepKernels()
    with recording([(owner, name) for owner, name, _ in kernels.launch_slots()], launches):
        for batch in batches:
            for shape, layout in [((batch, 256, 56, 56), 'nchw'), ((batch, 2048, 7, 7), 'nchw'),
                                  ((batch, 197, 384), 'nlc')]:
                _launch_the_passes(kernels, batch, shape, layout, dtype)
    return launches


def _launch_the_passes(kernels, batch, shape, layout, dtype):
    x = _empty(shape, dtype=dtype)
    channels = shape[1] if layout == 'nchw' else shape[2]
    step = _empty(batch, channels, dtype=torch.float32)
    norm = _empty(channels), _empty(channels)  # the folded BN's (a, b)
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
        kernels.step_backward(x, x if relu else None, x, step, relu, layout, True, norm=norm)
    coefficients = _empty(batch, channels, dtype=dtype)  # the moments' c0 and c1
    kernels.moments_backward(x, x, coefficients, coefficients, layout)
    kernels.moments_backward(x, x, coefficients, None, layout)
    u = _empty(batch, channels, dtype=dtype)
    vector = _empty(channels)
    for batch_stats, factor in ((True, 0.1), (False, None)):
        kernels.phi.phi_forward(u, u, _empty(channels, 2), vector, vector, vector, vector,
                                vector.clone(), vector.clone(), batch_stats, factor, 1e-5, 1.0)
        kernels.phi.phi_backward(u, u, u, _empty(channels, 2), vector, vector, vector, vector,
                                 vector, vector, batch_stats, 1.0)
    mean = _empty(batch, channels)
    for batch_stats, factor, affine in ((True, 0.1, True), (False, None, True), (True, None,
                                                                                 False)):
        params = (vector, vector) if affine else (None, None)
        kernels.fold.fold_forward(mean, mean, *params, vector.clone(), vector.clone(), batch_stats,
                                  factor, 1e-5, 4 * batch, dtype)
        parts = _empty(2, batch, channels)
        for grad_state in (u, None):  # StepNet's pooled x_t; SE pools none
            kernels.fold.fold_backward(parts, u, mean, params[0], vector, vector, batch_stats, 0.25,
                                       dtype, grad_state, 1 / 49)
    squeeze = max(8, channels // 16)
    w1, w2 = _empty(squeeze, channels), _empty(channels, squeeze)
    kernels.phi.se_forward(u, w1, _empty(squeeze), w2, vector, 1.0)
    kernels.phi.se_backward(
        _empty(batch, channels), u, _empty(batch, squeeze), _empty(batch, channels), w1, w2, 1.0)


def launches_of_the_norms(dtype, batches=(64, 2)):
    """The NSI sums' kernel on the same shapes: states of one dtype, and a float32 x_t (a
    recorder's ReLU of a shortcut) against an x_{t+1} of the model's dtype."""
    launches = []
    with recording([(triton_sums, '_state_sums_kernel')], launches):
        for batch in batches:
            for shape in [(batch, 256, 56, 56), (batch, 2048, 7, 7), (batch, 197, 384)]:
                x_next = _empty(shape, dtype=dtype)
                for x_t in (x_next, _empty(shape)):
                    triton_sums.state_sums(x_t, x_next)
                    if len(shape) == 4:
                        triton_sums.state_sums(
                            x_t.contiguous(memory_format=torch.channels_last), x_next)
    return launches


def launches_of_the_spectrum(dtype, batches=(8, 2)):
    """The frequency sums' kernel on the states a FrequencyHook reads: its first samples (8 by
    default, and 2) of ResNet-50's maps, contiguous and channels-last, and of ViT's tokens."""
    launches = []
    with recording([(triton_spectrum, '_spectrum_sums_kernel')], launches):
        for batch in batches:
            for shape, extra in [((batch, 256, 56, 56), 0), ((batch, 2048, 7, 7), 0),
                                 ((batch, 197, 384), 1)]:
                x = _empty(shape, dtype=dtype)
                side = shape[-1] if len(shape) == 4 else 14
                rows = _empty(3, side * side)
                triton_spectrum.spectrum_sums(x, rows, extra)
                if len(shape) == 4:
                    triton_spectrum.spectrum_sums(
                        x.contiguous(memory_format=torch.channels_last), rows)
    return launches


def every_launch(dtype, batches=(64, 2)):
    """The fused step's, the NSI sums' and the frequency sums' launches (the frequency sums at
    batch 8 and 2: the samples a FrequencyHook reads)."""
    return (launches_of_the_fused_step(dtype, batches) + launches_of_the_norms(dtype, batches) +
            launches_of_the_spectrum(dtype))


def _type(value):
    if isinstance(value, torch.Tensor):
        return '*' + DTYPES[value.dtype]
    if isinstance(value, bool):
        return 'i1'
    if isinstance(value, int):
        return 'i32' if -2**31 <= value < 2**31 else 'i64'
    return 'fp32'


def compile_key(fn, args, kwargs):
    """What the compiler sees of a launch: the kernel, its arguments' types, its constexprs."""
    return (fn.__name__, tuple(_type(a) if a is not None else None
                               for a in args), tuple(sorted(kwargs.items())))


def distinct(launches, by_grid=True):
    """One launch per :func:`compile_key` and (``by_grid``) grid: what the compiler sees, and
    how many programs run it."""
    seen = {}
    for fn, grid, args, kwargs in launches:
        key = compile_key(fn, args, kwargs) + ((grid, ) if by_grid else ())
        seen.setdefault(key, (fn, grid, args, kwargs))
    return list(seen.values())


def compile_launch(fn, args, kwargs, capability, num_warps=None):
    """The kernel ``fn`` compiled for ``capability`` (90: sm_90) as this launch would compile it
    on such a GPU. The launch options among ``kwargs`` (``num_warps``, ``num_stages``) go to the
    compiler, the rest are arguments; ``num_warps``, where given, overrides the launch's (Triton's
    default is 4)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    kwargs = dict(kwargs)
    options = {name: kwargs.pop(name) for name in LAUNCH_OPTIONS if name in kwargs}
    if num_warps is not None:
        options['num_warps'] = num_warps
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
        target=GPUTarget('cuda', capability, 32), options=options or None)


def _cuobjdump():
    import triton
    return triton.knobs.nvidia.cuobjdump.path


def resources(compiled):
    """``{'registers', 'spill', 'shared', 'warps'}`` of a compiled kernel: registers per thread
    and stack frame per thread in bytes (read from its cubin), shared memory per program."""
    with tempfile.NamedTemporaryFile(suffix='.cubin') as cubin:
        cubin.write(compiled.asm['cubin'])
        cubin.flush()
        dump = subprocess.run([_cuobjdump(), '--dump-resource-usage', cubin.name],
                              capture_output=True, text=True, check=True).stdout
    usage = re.search(r'REG:(\d+) STACK:(\d+)', dump)
    if usage is None:
        raise RuntimeError(f'cuobjdump printed no resource usage:\n{dump}')
    return dict(
        registers=int(usage.group(1)), spill=int(usage.group(2)), shared=compiled.metadata.shared,
        warps=compiled.metadata.num_warps)


def resident_warps(registers, warps, shared, capability):
    """The warps of a kernel one SM holds at once: registers are allocated per warp in units of
    256 (``registers`` per thread rounded up to a multiple of 8), shared memory per program."""
    per_warp = math.ceil(registers * 32 / 256) * 256
    programs = min(SM_PROGRAMS, SM_REGISTERS // (per_warp * warps))
    if shared:
        programs = min(programs, SHARED[capability][1] // (shared + 1024))  # 1 KiB reserved
    return min(SM_WARPS, programs * warps)


def table(dtype, capability, batches, kernel=''):
    """``[(kernel, grid, args, constexprs, resources)]`` of every distinct launch (of the kernels
    whose name contains ``kernel``); each kernel compiled once for all the grids it runs on."""
    rows, compiled = [], {}
    for fn, grid, args, kwargs in distinct(every_launch(dtype, batches)):
        if kernel not in fn.__name__:
            continue
        key = compile_key(fn, args, kwargs)
        if key not in compiled:
            usage = resources(compile_launch(fn, args, kwargs, capability))
            usage['resident'] = resident_warps(usage['registers'], usage['warps'], usage['shared'],
                                               capability)
            compiled[key] = usage
        rows.append((fn, grid, args, kwargs, compiled[key]))
    return rows


def _shape(args):
    tensor = next(a for a in args if isinstance(a, torch.Tensor))
    return 'x'.join(str(s) for s in tensor.shape)


def _flags(kwargs):
    return ' '.join(f'{k.lower()}={int(v) if isinstance(v, bool) else v}'
                    for k, v in kwargs.items())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--capability', type=int, choices=sorted(SHARED), default=90,
                        help='compute capability: 90 (H100, H200) or 80 (A100)')
    parser.add_argument('--dtype', choices=('float32', 'bfloat16', 'float16'), default='float32',
                        help="the states' dtype (the adaptors' parameters stay float32)")
    parser.add_argument('--batch-size', type=int, nargs='+', default=[64, 2],
                        help='batches of the fused step and the NSI sums (default: 64 2)')
    parser.add_argument('--kernel', default='',
                        help='only the kernels whose name contains this (e.g. _se_)')
    parser.add_argument('--spills-only', action='store_true',
                        help='print only the launches that spill registers')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not HAS_TRITON:
        raise SystemExit('error: kernel_resources.py needs triton (it ships with torch)')
    bad = [b for b in args.batch_size if b < 1]
    if bad:
        raise SystemExit(f'error: --batch-size {bad[0]} is not a batch; expected >= 1')
    rows = table(getattr(torch, args.dtype), args.capability, tuple(args.batch_size), args.kernel)
    if not rows:
        raise SystemExit(f'error: --kernel {args.kernel!r} names no kernel of the fused step or '
                         'the diagnostics (e.g. _step_kernel, _se_)')
    import triton
    print(f'sm_{args.capability} dtype={args.dtype} batches={args.batch_size} '
          f'triton={triton.__version__} ({len(rows)} distinct launches)')
    print(f'{"kernel":<32}{"first tensor":<16}{"programs":>9}{"warps":>6}{"regs":>6}'
          f'{"spill B":>9}{"smem KiB":>9}{"warps/SM":>9}  constexprs')
    spilled = 0
    for fn, grid, tensors, kwargs, usage in rows:
        spilled += usage['spill'] > 0
        if args.spills_only and not usage['spill']:
            continue
        print(f'{fn.__name__:<32}{_shape(tensors):<16}{math.prod(grid):>9}{usage["warps"]:>6}'
              f'{usage["registers"]:>6}{usage["spill"]:>9}{usage["shared"] / 1024:>9.1f}'
              f'{usage["resident"]:>9}  {_flags(kwargs)}')
    print(f'{spilled} of {len(rows)} launches spill registers')


if __name__ == '__main__':
    run_tool(main)
