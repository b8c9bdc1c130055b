"""Device time and memory bandwidth of each full-size pass of the fused step, at a ResNet-50's and
a ViT's shapes: which pass falls short of what the device's memory allows.

Every pass that reads or writes a block's states (and the diagnostics' kernels: the NSI's sums,
the FrequencyHook's frequency sums) is timed alone on the states of each ResNet-50
stage (``(B, 4 · base · 2^i, img/4 / 2^i, …)``, contiguous and channels-last) and on ViT-S
tokens (``(B, 197, 384)``), on the Triton kernels and on the PyTorch passes. A cell is the
median over ``--repeats`` timings of ``--calls`` calls back to back (CUDA events on a GPU, wall
time elsewhere), in microseconds per call, with the bandwidth it reaches: the full-size passes
the pass makes (its reads and writes of a state-sized tensor, known from the kernel) times the
state's bytes, over the time. ``of add`` divides that by what ``aten add`` (two reads, one
write) reaches on the same state: near 1 the pass runs at the device's practical bandwidth;
well below 1 its kernel leaves bandwidth unused (too few programs, tiles too small or too
large), which a change of its tiles (``state_blocks`` in ``mmstiff/utils/triton_launch.py``)
may recover. ``aten sum`` (one read) is the yardstick for the reductions. The PyTorch column
counts the same passes, what the pass needs, not what its several operators move: its GB/s are
those it would have to reach to match the kernel.

``--tiles 64x64,256x16,...`` then times the Triton passes again with each of these tiles
(``BLOCK_N x BLOCK_C``, powers of two) in place of the ones ``state_blocks`` picks, and prints
per state and pass the default tile's time, each candidate's, and the fastest: the measurement
a change of ``state_blocks`` needs (each tile compiles each kernel anew: a minute or so).
``--warps 4,8`` does the same with the warps per program in place of those ``tile_warps``
picks (for the tiles ``state_blocks`` picks).

On the CPU the Triton column needs ``TRITON_INTERPRET=1`` (Triton's interpreter: the figures
then say nothing of a GPU; the tests use it to check the script runs).

Usage:
    python tools/benchmark/bench_kernels.py --device cuda --dtype bf16
    python tools/benchmark/bench_kernels.py --device cuda --tiles 64x64,128x32,256x16,64x16
    python tools/benchmark/bench_kernels.py --device cuda --warps 4,8
"""
import argparse
import contextlib
import functools
import math
import os
import statistics
import time
from unittest import mock

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
from bench_launch import TorchKernelSet

from mmstiff.apis.cli import positive_int
from mmstiff.utils.triton_launch import HAS_TRITON, state_blocks, tile_warps

#: the modules whose launchers pick their tiles with ``state_blocks``
TILED_MODULES = ('mmstiff.models.steps.fused.triton_step', 'mmstiff.analysis.triton_sums',
                 'mmstiff.analysis.triton_spectrum')
#: the largest tile a candidate may have (elements per program and tensor)
MAX_TILE = 16384
#: the warps per program a candidate may have (powers of two: what Triton compiles)
WARPS = (1, 2, 4, 8, 16, 32)

DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}


def states(batch, base, img_size, dtype, device):
    """``[(label, layout, tensors)]``: each ResNet-50 stage's states, contiguous and
    channels-last, and ViT tokens (16 × 16 patches and a class token, width 6 · base: ViT-S's
    (B, 197, 384) by default); ``tensors`` holds x (a block's input), f (its branch
    output), g (a gradient), out (its output after the ReLU) and the (B, C) step sizes and BN
    coefficients the passes take."""
    shapes = []
    for i in range(4):
        size = max(1, img_size // 4 // 2**i)
        shape = (batch, 4 * base * 2**i, size, size)
        shapes += [(f'{shape} contiguous', 'nchw', shape, torch.contiguous_format),
                   (f'{shape} channels-last', 'nchw', shape, torch.channels_last)]
    tokens = (batch, (img_size // 16)**2 + 1, 6 * base)  # ViT-S's at 224² and base 64
    shapes.append((f'{tokens} tokens', 'nlc', tokens, None))
    found = []
    g = torch.Generator().manual_seed(0)
    for label, layout, shape, memory_format in shapes:
        channels = shape[1] if layout == 'nchw' else shape[2]

        def full(relu=False):
            t = torch.randn(shape, generator=g)
            t = t.relu_() if relu else t
            t = t.to(device=device, dtype=dtype)
            return t if memory_format is None else t.contiguous(memory_format=memory_format)

        small = dict(
            step=torch.rand(batch, channels, generator=g) + 0.5,
            c0=torch.randn(batch, channels,
                           generator=g), c1=torch.randn(batch, channels, generator=g),
            a=torch.rand(2, channels, generator=g) + 0.5)
        tensors = dict(x=full(relu=True), f=full(), g=full(), out=full(relu=True))
        tensors.update({k: v.to(device) for k, v in small.items()})
        found.append((label, layout, tensors))
    return found


def passes(layout, t):
    """``{row: (full-size passes, callable(kernels))}``: one call of each pass on the tensors
    ``t`` of one state; the ``aten`` rows, the yardsticks, ignore the kernel set."""
    norm = tuple(t['a'])

    def state_sums(k):
        if isinstance(k, TorchKernelSet):  # what stiffness_norms computes without the kernel
            features = tuple(range(1, t['x'].dim()))
            return (torch.linalg.vector_norm(t['x'].float(), dim=features),
                    torch.linalg.vector_norm(t['f'].float() - t['x'].float(), dim=features))
        from mmstiff.analysis.triton_sums import state_sums
        return state_sums(t['x'], t['f'])

    def frequency_sums(k):
        # the FrequencyHook's summary of one state (its high-frequency ratio and end bins):
        # PyTorch's operators with the kernel turned off, or the kernel's sums
        from mmstiff.analysis import frequency_summary, frequency_sums, triton_spectrum
        if isinstance(k, TorchKernelSet):
            with mock.patch.object(triton_spectrum.KERNEL, 'failure', 'turned off'):
                return frequency_summary(t['x'], extra)
        with triton_spectrum.spectrum_sums_forced():  # (the interpreter, on the CPU)
            return frequency_sums(t['x'], extra)

    extra = 1 if layout == 'nlc' else 0  # ViT's class token
    pooled = (2, 3) if layout == 'nchw' else (1, )
    rows = {
        'aten add': (3, lambda k: torch.add(t['x'], t['f'])),
        'aten sum': (1, lambda k: t['x'].sum(pooled)),
        'pool (x_t and f)': (2, lambda k: k.pool(t['x'], t['f'], layout)),
        'moments (x_t and y)': (2, lambda k: k.moments(t['x'], t['f'], layout)),
        'step': (3, lambda k: k.step(t['x'], t['step'], t['f'], True, layout)),
        'step, folded BN':
        (3, lambda k: k.step(t['x'], t['step'], t['f'], True, layout, norm=norm)),
        'measured step':
        (3, lambda k: k.measured_step(t['x'], t['step'], t['f'], True, layout, False)),
        'step backward':
        (5, lambda k: k.step_backward(t['g'], t['out'], t['f'], t['step'], True, layout, True)),
        'step backward, folded BN': (5, lambda k: k.step_backward(t['g'], t['out'], t['f'], t[
            'step'], True, layout, True, norm=norm)),
        "moments backward (y's grad)":
        (3, lambda k: k.moments_backward(t['g'], t['f'], t['c0'], t['c1'], layout)),
        'NSI sums (x_t, x_t+1)': (2, state_sums),
    }
    if frequency_sums_apply(layout, t['x'].shape):
        rows['frequency sums (x, twice)'] = (2, frequency_sums)
    return rows


def frequency_sums_apply(layout, shape):
    """Whether the frequency sums kernel reads a state of this shape: a square map, or a square
    grid of patch tokens after the class token, of more than one position a side."""
    if layout == 'nchw':
        return shape[-1] == shape[-2] > 1
    side = math.isqrt(shape[1] - 1)
    return side > 1 and side * side == shape[1] - 1


def kernel_sets(device):
    """``{column: kernel set}``: the PyTorch passes, and Triton's where it runs (CUDA, or the
    interpreter on the CPU)."""
    sets = {'PyTorch': TorchKernelSet()}
    if HAS_TRITON and (device.type == 'cuda' or os.environ.get('TRITON_INTERPRET') == '1'):
        from mmstiff.models.steps.fused.triton_step import TritonStepKernels
        sets['Triton'] = TritonStepKernels()
    return sets


def time_call(fn, calls, repeats, device):
    """Median µs per call of ``fn`` over ``repeats`` timings of ``calls`` calls."""
    fn()  # compiles a Triton kernel on first use
    times = []
    for _ in range(repeats):
        if device.type == 'cuda':
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        else:
            begin = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - begin) * 1e6 / calls)
    return statistics.median(times)


@contextlib.contextmanager
def forced_tile(tile):
    """Inside it, every launcher of :data:`TILED_MODULES` takes ``tile`` (``(BLOCK_N,
    BLOCK_C)``) for every state; None: the tiles ``state_blocks`` picks."""
    with _forced('state_blocks', tile):
        yield


@contextlib.contextmanager
def forced_warps(warps):
    """Inside it, every launcher of :data:`TILED_MODULES` launches ``warps`` warps a program,
    whatever its tile; None: the warps ``tile_warps`` picks."""
    with _forced('tile_warps', warps):
        yield


@contextlib.contextmanager
def _forced(name, value):
    if value is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        for module in TILED_MODULES:
            stack.enter_context(mock.patch(f'{module}.{name}', lambda *shape, **options: value))
        yield


def parse_tiles(text):
    """``'64x64,256x16'`` -> ``[(64, 64), (256, 16)]``; ``ValueError`` naming a bad tile."""
    tiles = []
    for item in text.split(','):
        parts = item.strip().lower().split('x')
        try:
            tile = tuple(int(p) for p in parts)
        except ValueError:
            tile = ()
        if (len(tile) != 2 or any(v < 1 or v & (v - 1) for v in tile)
                or tile[0] * tile[1] > MAX_TILE):
            raise ValueError(f'--tiles {item!r} is not supported; expected BLOCK_NxBLOCK_C, '
                             f'powers of two with a product of at most {MAX_TILE} (e.g. 64x64)')
        tiles.append(tile)
    return tiles


def parse_warps(text):
    """``'4,8'`` -> ``[4, 8]``; ``ValueError`` naming a count Triton cannot launch."""
    counts = []
    for item in text.split(','):
        try:
            warps = int(item.strip())
        except ValueError:
            warps = 0
        if warps not in WARPS:
            raise ValueError(f'--warps {item.strip()!r} is not supported; expected warps per '
                             f'program among {", ".join(map(str, WARPS))} (e.g. 4,8)')
        counts.append(warps)
    return counts


def same_outputs(got, expected):
    """Whether a pass gave the same outputs (tensors, possibly nested in tuples) with another
    tile: equal up to the order of the float32 sums, and the rounding to the states' dtype."""
    if isinstance(expected, (tuple, list)):
        return len(got) == len(expected) and all(map(same_outputs, got, expected))
    if expected is None or not torch.is_tensor(expected):
        return got is expected or got == expected
    tol = 1e-4 if expected.dtype in (torch.float32, torch.float64) else 2e-2
    return (got.shape == expected.shape and got.dtype == expected.dtype
            and torch.allclose(got.float(), expected.float(), rtol=tol, atol=tol))


def sweep(found, candidates, kernels, args, device, title, default_of):
    """Print, per state and Triton pass, the default launch's time, each candidate's and the
    fastest (µs per call); a candidate whose outputs differ from the default's is not timed
    (``wrong``). ``candidates``: ``[(label, context)]``, ``context()`` forcing the candidate;
    ``default_of(n, c, stride_n, stride_c)``: what the launchers pick for a state, as text."""
    print()
    print(f'{title} for the Triton passes; µs per call ({args.calls} calls, '
          f'median of {args.repeats}); default: what the launchers pick')
    header = f'{"state":<36}{"pass":<30}{"default":>16}'
    header += ''.join(f'{label:>11}' for label, _ in candidates) + f'{"fastest":>11}'
    print(header)
    print('-' * len(header))
    for label, layout, tensors in found:
        x = tensors['x']
        n, c = (x.shape[2] * x.shape[3], x.shape[1]) if layout == 'nchw' else x.shape[1:]
        strides = x.stride()
        stride_n, stride_c = ((strides[3], strides[1]) if layout == 'nchw' else strides[1:])
        default = default_of(n, c, stride_n, stride_c)
        for row, (_, call) in passes(layout, tensors).items():
            if row.startswith('aten'):
                continue
            times, wrong = {}, set()
            expected = call(kernels)
            for name, context in [('default', contextlib.nullcontext)] + candidates:
                with context():
                    if not same_outputs(call(kernels), expected):
                        wrong.add(name)  # a launch the kernel cannot take: not timed
                        continue
                    times[name] = time_call(lambda: call(kernels), args.calls, args.repeats, device)
            line = f'{label:<36}{row:<30}{times["default"]:>9.2f} ({default})'
            line += ''.join(f'{"wrong":>11}' if name in wrong else f'{times[name]:>11.2f}'
                            for name, _ in candidates) + f'{min(times, key=times.get):>11}'
            print(line)
            label = ''


def sweep_tiles(found, tiles, kernels, args, device):
    """:func:`sweep` over tiles (``[(BLOCK_N, BLOCK_C)]``)."""
    candidates = [(f'{n}x{c}', functools.partial(forced_tile, (n, c))) for n, c in tiles]
    sweep(found, candidates, kernels, args, device, 'tiles (BLOCK_N x BLOCK_C)',
          lambda *state: 'x'.join(map(str, state_blocks(*state))))


def sweep_warps(found, counts, kernels, args, device):
    """:func:`sweep` over the warps per program (on the tiles ``state_blocks`` picks)."""
    candidates = [(f'{w}w', functools.partial(forced_warps, w)) for w in counts]
    sweep(found, candidates, kernels, args, device, 'warps a program',
          lambda *state: f'{tile_warps(*state_blocks(*state))}w')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--dtype', default='fp32', choices=sorted(DTYPES),
                        help="the states' dtype (bf16, fp16: as under autocast)")
    parser.add_argument('--batch-size', type=positive_int, default=64)
    parser.add_argument('--base-channels', type=positive_int, default=64,
                        help="ResNet-50's base width (the stages' states have 4x to 32x it)")
    parser.add_argument('--img-size', type=positive_int, default=224)
    parser.add_argument('--calls', type=positive_int, default=20, help='calls per timing')
    parser.add_argument('--repeats', type=positive_int, default=5)
    parser.add_argument('--tiles', default=None,
                        help='BLOCK_NxBLOCK_C,...: also time the Triton passes with each tile')
    parser.add_argument('--warps', default=None,
                        help='W,...: also time the Triton passes with W warps a program')
    args = parser.parse_args(argv)
    try:
        if args.tiles is not None:
            args.tiles = parse_tiles(args.tiles)
        if args.warps is not None:
            args.warps = parse_warps(args.warps)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    dtype = DTYPES[args.dtype]
    sets = kernel_sets(device)
    for option in ('tiles', 'warps'):
        if getattr(args, option) and 'Triton' not in sets:
            raise SystemExit(f'--{option} times the Triton kernels: it needs --device cuda (or '
                             'TRITON_INTERPRET=1 on the CPU)')
    clock = 'CUDA events' if device.type == 'cuda' else 'wall time'
    print(f'device={device} dtype={args.dtype} batch={args.batch_size} '
          f'calls={args.calls} repeats={args.repeats}; µs per call ({clock}, median), GB/s over '
          "the pass's full-size reads and writes, and that as a fraction of aten add's")
    header = f'{"state":<36}{"pass":<30}{"passes":>7}'
    for column in sets:
        header += f'{column + " µs":>14}{"GB/s":>9}{"of add":>8}'
    print(header)
    print('-' * len(header))
    found = states(args.batch_size, args.base_channels, args.img_size, dtype, device)
    with torch.no_grad():
        for label, layout, tensors in found:
            nbytes = tensors['x'].numel() * tensors['x'].element_size()
            add_rate = None
            for row, (count, call) in passes(layout, tensors).items():
                line = f'{label:<36}{row:<30}{count:>7}'
                for column, kernels in sets.items():
                    if row.startswith('aten') and column != 'PyTorch':
                        line += f'{"":>14}{"":>9}{"":>8}'
                        continue
                    micros = time_call(lambda: call(kernels), args.calls, args.repeats, device)
                    rate = count * nbytes / micros / 1e3  # GB/s
                    if row == 'aten add':
                        add_rate = rate
                    line += f'{micros:>14.2f}{rate:>9.2f}{rate / add_rate:>8.2f}'
                print(line)
                label = ''
        if args.tiles:
            sweep_tiles(found, args.tiles, sets['Triton'], args, device)
        if args.warps:
            sweep_warps(found, args.warps, sets['Triton'], args, device)


if __name__ == '__main__':
    run_tool(main)
