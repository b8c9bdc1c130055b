"""Host time of one call of each pass of the fused step: what an eager step pays on the host
per launch, before the device runs anything.

An eager train step whose device waits on the host costs the host's time, launch by launch.
``profile_step.py`` says whether a step waits (``busy/step`` well below 1); this script says
what each launch costs the host, so that a step's host time can be read as launches times
their price. For a small state (``--batch-size`` 2, ``--channels`` 64, 8×8: the device's work
per call is a few microseconds) each row calls one pass ``--calls`` times back to back and
times the calls on the host only (the device synchronised before and after the calls, not
between them); the figure is the median over ``--repeats`` repeats, the settings interleaved
(each repeat runs every cell once, in a rotated order), in microseconds per call:

* ``aten add``, ``aten mean``: one ATen elementwise kernel and one reduction, the units;
* one row per pass of the fused step (``pool``, ``moments``, ``step``, ``step backward``,
  ``moments backward``, the folded BN's and the adaptors' (B, C) passes), in three columns:
  ``PyTorch passes`` (the CPU's path, several ATen calls a pass), ``Triton`` (CUDA only: the
  launcher and Triton's own launch) and ``Triton stand-ins`` (the same launcher with kernels
  that launch nothing: its Python, argument handling and allocations, without Triton's
  launch). On a GPU,
  ``Triton - stand-ins`` is what Triton's launch costs per kernel.

Where the device's work per call exceeds the host's, the calls queue up and a cell measures
the device instead; the small state keeps that unlikely, and a ``Triton`` cell below its
``stand-ins`` one would show it.

Usage:
    python tools/benchmark/bench_launch.py --device cuda
    python tools/benchmark/bench_launch.py            # CPU: the PyTorch and stand-in columns
"""
import argparse
import statistics
import time

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch

from mmstiff.apis.benchmark import counting_kernels, synchronize
from mmstiff.apis.cli import positive_int
from mmstiff.models.steps.fused.fold import TorchFoldKernels
from mmstiff.models.steps.fused.se_phi import TorchSEPhiKernels
from mmstiff.models.steps.fused.stepnet_phi import TorchPhiKernels
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.utils.triton_launch import HAS_TRITON

#: the columns: the kernel sets a pass is timed on
COLUMNS = ('PyTorch passes', 'Triton', 'Triton stand-ins')


class TorchAdaptorKernels(TorchPhiKernels, TorchSEPhiKernels):
    """The adaptors' (B, C) passes in PyTorch, StepNet's and SE's in one set, as
    :class:`~mmstiff.models.steps.fused.triton_step.TritonAdaptorKernels` holds Triton's."""


class TorchKernelSet(TorchStepKernels):
    """The PyTorch passes, addressed as :class:`TritonStepKernels` addresses its Triton set
    (``kernels.phi``, ``kernels.fold``)."""

    phi = TorchAdaptorKernels()
    fold = TorchFoldKernels()


def kernel_sets(device):
    """``{column: kernel set}`` of the columns this device runs (Triton's only on CUDA)."""
    sets = {'PyTorch passes': TorchKernelSet()}
    if HAS_TRITON:
        from mmstiff.models.steps.fused.triton_step import TritonStepKernels
        if device.type == 'cuda':
            sets['Triton'] = TritonStepKernels()
        sets['Triton stand-ins'] = counting_kernels(TritonStepKernels())
    return sets


def make_state(batch, channels, size, device):
    """The tensors the passes take: a block's states (B, C, H, W), its step size and pooled
    means (B, C), the per-channel vectors of a BN and of StepNet's and SE's (B, C) passes."""
    torch.manual_seed(0)
    squeeze = max(1, channels // 16)
    state = (batch, channels, size, size)
    normal = dict(x=state, f=state, g=state, out=state, u=(batch, channels), p=(batch, channels),
                  pair=(channels, 2), w1=(squeeze, channels), b1=(squeeze, ),
                  w2=(channels, squeeze), b2=(channels, ))
    tensors = {name: torch.randn(shape, device=device) for name, shape in normal.items()}
    tensors['out'].relu_()  # a block's output after its ReLU
    uniform = dict(step=(batch, channels), v=(batch, channels), vector=(channels, ))
    tensors.update({name: torch.rand(shape, device=device) for name, shape in uniform.items()})
    tensors['vector'] += 0.5  # BN scales and IE weights away from zero
    tensors['running_mean'] = torch.zeros(channels, device=device)
    tensors['running_var'] = torch.ones(channels, device=device)
    return tensors


def passes(state):
    """``{row: callable(kernels)}``: one call of each pass of the fused step on ``state``."""
    s = state
    norm = (s['vector'], s['vector'])
    running = (s['running_mean'], s['running_var'])

    def fold_forward(k):
        return k.fold.fold_forward(s['u'], s['v'], *norm, *running, True, 0.1, 1e-5,
                                   64 * s['u'].shape[0], s['u'].dtype)

    def phi_forward(k):
        return k.phi.phi_forward(s['u'], s['p'], s['pair'], *norm, *norm, *running, True, 0.1, 1e-5,
                                 1.0)

    def se_forward(k):
        return k.phi.se_forward(s['p'], s['w1'], s['b1'], s['w2'], s['b2'], 1.0)

    def step_backward(k):
        return k.step_backward(s['g'], s['out'], s['f'], s['step'], True, 'nchw', True)

    return {
        'pool (x_t and f)':
        lambda k: k.pool(s['x'], s['f'], 'nchw'),
        'moments (x_t and y)':
        lambda k: k.moments(s['x'], s['f'], 'nchw'),
        'step':
        lambda k: k.step(s['x'], s['step'], s['f'], True, 'nchw'),
        'step, folded BN':
        lambda k: k.step(s['x'], s['step'], s['f'], True, 'nchw', norm=norm),
        'step backward':
        step_backward,
        "moments backward (y's grad)":
        lambda k: k.moments_backward(s['g'], s['f'], s['u'], s['p'], 'nchw'),
        'folded BN (B, C) forward':
        fold_forward,
        'StepNet (B, C) forward':
        phi_forward,
        'SE (B, C) forward':
        se_forward,
    }


def aten_units(state):
    """The rows that time plain ATen calls, in the ``PyTorch passes`` column."""
    return {
        'aten add (one kernel)': lambda k: torch.add(state['x'], state['f']),
        'aten mean (one reduction)': lambda k: state['x'].mean((2, 3)),
    }


def time_cells(cells, calls, repeats, warmup, device):
    """``{cell: [µs per call per repeat]}`` of ``cells`` (``{cell: callable()}``), interleaved."""
    for fn in cells.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    names = list(cells)
    times = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            fn = cells[name]
            synchronize(device)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            synchronize(device)
    return times


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--batch-size', type=positive_int, default=2,
                        help='at least 2: the BN passes take batch statistics')
    parser.add_argument('--channels', type=positive_int, default=64)
    parser.add_argument('--img-size', type=positive_int, default=8)
    parser.add_argument('--calls', type=positive_int, default=200, help='calls per timing')
    parser.add_argument('--repeats', type=positive_int, default=7)
    parser.add_argument('--warmup', type=int, default=3, help='untimed calls per cell')
    args = parser.parse_args(argv)
    if args.batch_size < 2:
        parser.error(f'--batch-size {args.batch_size} is not supported; expected at least 2 '
                     '(the BN passes take batch statistics)')
    if args.warmup < 0:
        parser.error(f'--warmup {args.warmup} is not supported; expected 0 or more')
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    state = make_state(args.batch_size, args.channels, args.img_size, device)
    sets = kernel_sets(device)
    rows = dict(aten_units(state), **passes(state))
    cells = {}
    for row, call in rows.items():
        for column, kernels in sets.items():
            if row.startswith('aten') and column != 'PyTorch passes':
                continue
            cells[row, column] = (lambda call=call, kernels=kernels: call(kernels))
    with torch.no_grad():
        times = time_cells(cells, args.calls, args.repeats, args.warmup, device)

    print(f'device={device} state=({args.batch_size}, {args.channels}, {args.img_size}, '
          f'{args.img_size}) calls={args.calls} repeats={args.repeats}; host µs per call, '
          'median over the repeats')
    width = 2 + max(map(len, rows))
    header = f'{"pass":<{width}}' + ''.join(f'{column:>18}' for column in COLUMNS)
    print(header)
    print('-' * len(header))
    for row in rows:
        cells_text = []
        for column in COLUMNS:
            cell = times.get((row, column))
            cells_text.append(f'{statistics.median(cell):>18.1f}' if cell else f'{"n/a":>18}')
        print(f'{row:<{width}}' + ''.join(cells_text))


if __name__ == '__main__':
    run_tool(main)
