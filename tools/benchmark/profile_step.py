"""Where a train step's time goes: device busy time against wall time, and the kernels each
adaptor adds, for plain, SE and StepNet ResNet-50 with the reference and the fused step.

For each model (the rows of ``bench_step_resnet.py``), after the warm-up:

* ``step (ms)``: the wall time of a train step (forward, backward, SGD update), median over
  ``--repeats`` timings of ``--iters`` steps, the models interleaved;
* ``busy (ms)``: the time the device spends in kernels per step, from one profiled timing
  (``torch.profiler``; CUDA only: the sum of the kernels' durations on the one stream);
* ``busy/step``: their ratio. Near 1 the step is bound by the device's work, and fewer bytes
  or faster kernels help; well below 1 the device waits for the host to launch the next kernel,
  and fewer launches (or CUDA graphs, ``--compile-mode reduce-overhead`` of
  ``bench_step_resnet.py``) help;
* ``kernels``: the kernels launched per step (CUDA), or the top-level operator calls per step
  (CPU).

Then, for each model, the kernels (CUDA; top-level operators on the CPU, by their own CPU time)
that cost it the most time per step beyond what the same name costs the plain ResNet-50:
where an adaptor's extra time goes.

Usage:
    python tools/benchmark/profile_step.py --device cuda --batch-size 64 --img-size 224
    python tools/benchmark/profile_step.py --device cuda --amp bf16 --fused on
"""
import argparse
import collections
import statistics

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
from bench_step_resnet import (BASELINE, FUSED_CHOICES, add_precision_arguments, add_width_argument,
                               model_builders, settings_line)

from mmstiff.apis.benchmark import interleaved_times, prepare_runs, synchronize, train_step


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--iters', type=int, default=2, help='train steps per timing')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps per model')
    parser.add_argument('--top', type=int, default=6, help='extra kernels listed per model')
    parser.add_argument(
        '--fused', choices=sorted(FUSED_CHOICES), default='both',
        help="the fused residual step ('on'), the reference ('off'), both (default), or all: "
        "both and the fused step with the blocks' last BN not folded into it")
    add_width_argument(parser)
    add_precision_arguments(parser)
    args = parser.parse_args(argv)
    for field in ('batch_size', 'img_size', 'repeats', 'iters', 'top', 'base_channels'):
        if getattr(args, field) < 1:
            parser.error(f'--{field.replace("_", "-")} {getattr(args, field)} is not supported; '
                         'expected a positive integer')
    return args


def _is_top_level_op(event):
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(('aten::', 'triton::')):
            return False
        parent = parent.cpu_parent
    return event.name.startswith('aten::')


def profile_steps(model, optimizer, batch, iters, device, precision):
    """``(busy µs per step or None, launches per step, {name: µs per step})`` of ``iters``
    train steps: on CUDA the kernels' durations by kernel name; on the CPU the top-level
    operators' own CPU time by operator (busy: None)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = device.type == 'cuda'
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(iters):
            train_step(model, optimizer, *batch, precision)
        synchronize(device)
    times = collections.Counter()
    launches = 0
    for event in prof.events():
        if cuda and event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] += event.time_range.elapsed_us() / iters
            launches += 1
        elif not cuda and _is_top_level_op(event):
            times[event.name] += event.self_cpu_time_total / iters
            launches += 1
    busy = sum(times.values()) if cuda else None
    return busy, launches / iters, times


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    torch.manual_seed(0)
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         device=device), torch.randint(0, 1000, (args.batch_size, ), device=device))
    runs, batch, precision = prepare_runs(model_builders(args), batch, args, device)
    names = list(runs)
    times = interleaved_times(runs, batch, args, device, precision)
    profiles = {
        name: profile_steps(*runs[name], batch, args.iters, device, precision)
        for name in names
    }

    cuda = device.type == 'cuda'
    print(
        f'device={device} {settings_line(args)} repeats={args.repeats} iters/timing={args.iters}; '
        f'{"kernels" if cuda else "top-level operator calls"} per step')
    width = max(26, 2 + max(map(len, names)))
    header = (f'{"model":<{width}}{"step (ms)":>11}{"busy (ms)":>11}{"busy/step":>11}'
              f'{"kernels":>9}')
    print(header)
    print('-' * len(header))
    for name in names:
        step = statistics.median(times[name]) * 1e3
        busy, launches, _ = profiles[name]
        busy_ms = 'n/a' if busy is None else f'{busy / 1e3:.1f}'
        ratio = 'n/a' if busy is None else f'{busy / 1e3 / step:.3f}'
        print(f'{name:<{width}}{step:>11.1f}{busy_ms:>11}{ratio:>11}{launches:>9.0f}')
    baseline = profiles[BASELINE if BASELINE in profiles else f'{BASELINE} fused'][2]
    what = 'kernels' if cuda else 'operators (their own CPU time)'
    for name in names:
        extra = {k: v - baseline.get(k, 0.0) for k, v in profiles[name][2].items()}
        top = sorted((v, k) for k, v in extra.items() if v > 0)[::-1][:args.top]
        if not top:
            continue
        print(f'\n{name}: the {what} with the most time per step beyond {BASELINE}\'s')
        for value, kernel in top:
            print(f'  {value / 1e3:>8.3f} ms  {kernel[:110]}')


if __name__ == '__main__':
    run_tool(main)
