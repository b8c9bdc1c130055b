"""Training-iteration time and peak memory of the diagnostics hooks against training without them.

One run prints side-by-side ratios. The hooks are driven exactly as the Runner drives them
(``before_train_iter``, forward / backward / SGD step, ``after_train_iter``, with a MessageHub, a
visualizer writing JSON and a logger whose ``LoggerHook`` interval is ``--log-interval``, at
whose multiples the hooks write their recorded iterations) around the same model and batch.
Every repeat runs
``--iters`` iterations of each setting, one iteration of each setting in turn (A/B interleaved
per iteration, the order rotating), each setting with its own iteration counter restarting at 0
(so it holds exactly ``iters / interval`` recorded iterations). The table reports the median
over repeats of the mean iteration time and of its ratio to the no-hook mean of the same repeat
("time ratio"), and the time spent inside the hooks' own code per iteration (their hook points
and the per-block reductions that run inside the forward pass) over the median iteration
without hooks ("hook ratio"; it leaves out what the hooks cost outside their own code, such as
the dispatch of module hooks).

Peak memory: the largest running sum, in start order, of the bytes each op allocates and frees
itself (``torch.profiler`` with ``profile_memory=True``: ``self_cpu_memory_usage``, children
excluded, plus the frees between ops), i.e. the allocator's live tensor bytes, over one
*recorded* iteration (each hook at interval 1), against one iteration without hooks.

The default model is mmpretrain's CIFAR ResNet-18 as ``resnet18_8xb16_cifar10`` trains it
(64 base channels, batch 16 per GPU).

Usage (the defaults take about 13 minutes on 2 idle CPU cores):
    python tools/benchmark/bench_hooks.py
    python tools/benchmark/bench_hooks.py --only @1 --iters 20        # interval 1 only, ~2 min
    python tools/benchmark/bench_hooks.py --threads 1 --clock cpu     # on a busy machine
    # a narrow worst case (~7 minutes): its iteration is 4-5x faster than the default
    # model's while the hooks' cost per recorded iteration only halves
    python tools/benchmark/bench_hooks.py --base-channels 16 --batch-size 32 --repeats 5
"""
import argparse
import copy
import os.path as osp
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmstiff.engine.hooks import FrequencyHook, StiffnessHook  # noqa: E402

BASELINE = 'no hook'


class Classifier(nn.Module):
    """A CIFAR-style ResNet (mmpretrain ``ResNet_CIFAR``), global pooling and a linear head."""

    def __init__(self, depth, base_channels, num_classes=10):
        super().__init__()
        from mmpretrain.models.backbones import ResNet_CIFAR
        self.backbone = ResNet_CIFAR(depth=depth, stem_channels=base_channels,
                                     base_channels=base_channels)
        self.head = nn.Linear(self.backbone.feat_dim, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1].mean((2, 3)))


class BenchRunner:
    """The public parts of a Runner that the hooks touch."""

    def __init__(self, model, work_dir, log_interval):
        from mmengine.hooks import LoggerHook
        from mmengine.logging import MessageHub, MMLogger
        from mmengine.visualization import Visualizer
        self.model = model
        self.hooks = [LoggerHook(interval=log_interval)]  # sets when the hooks print and write
        self.iter = 0
        self.timestamp = 'bench'
        self.message_hub = MessageHub.get_instance('bench_hooks')
        self.visualizer = Visualizer.get_instance(
            'bench_hooks', vis_backends=[dict(type='LocalVisBackend')], save_dir=work_dir)
        self.logger = MMLogger.get_instance('bench_hooks', log_level='WARNING')


def settings(args):
    """Name -> list of hook factories (the ones ``--only`` selects)."""
    s_default = StiffnessHook().interval
    f_default = FrequencyHook().interval
    every = {
        BASELINE: [],
        'StiffnessHook @1': [lambda: StiffnessHook(interval=1)],
        'StiffnessHook @1, 8 samples': [lambda: StiffnessHook(interval=1, num_samples=8)],
        f'StiffnessHook @{s_default} (default)': [lambda: StiffnessHook()],
        'FrequencyHook @1': [lambda: FrequencyHook(interval=1)],
        f'FrequencyHook @{f_default} (default)': [lambda: FrequencyHook()],
        'both @defaults': [lambda: StiffnessHook(), lambda: FrequencyHook()],
    }
    chosen = {name: hooks for name, hooks in every.items()
              if name == BASELINE or args.only is None or args.only in _words(name)}
    if len(chosen) == 1:
        raise SystemExit(f'--only {args.only!r} matches none of {list(every)[1:]}')
    return chosen


def _words(name):
    return name.replace(',', ' ').replace('(', ' ').replace(')', ' ').split()


def check_iters(args, setups):
    """Every repeat must hold a whole number of each hook's write intervals (its interval,
    lcm'ed with the logger's), so that it records and writes the same iterations."""
    for name, hooks in setups.items():
        for hook in hooks:
            if args.iters % hook.console_interval:
                raise SystemExit(f'--iters {args.iters} is not a multiple of '
                                 f'{hook.console_interval} (the lcm of the interval '
                                 f'{hook.interval} of {name!r} and --log-interval '
                                 f'{args.log_interval}); expected a multiple (or --only '
                                 "'@1')")


class HookTimer:
    """Accumulates the time spent inside the hooks' own code (their Runner hook points, and
    the recorders' per-step reductions that run inside the forward pass)."""

    def __init__(self, clock):
        self.clock = clock
        self.total = 0.0

    def wrap(self, obj, attr):
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            start = self.clock()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total += self.clock() - start

        setattr(obj, attr, timed)

    def instrument(self, hooks):
        for hook in hooks:
            self.wrap(hook, 'before_train_iter')
            self.wrap(hook, 'after_train_iter')
            for recorder in hook.recorders.values():
                self.wrap(recorder, '_keep')


def train_iteration(runner, hooks, optimizer, images, labels):
    for hook in hooks:
        hook.before_train_iter(runner, runner.iter)
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(runner.model(images), labels).backward()
    optimizer.step()
    for hook in hooks:
        hook.after_train_iter(runner, runner.iter)
    runner.iter += 1


CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}


def time_interleaved(runners, setups, optimizer, batch, iters, clock):
    """Mean iteration time of every setting over ``iters`` iterations each, run one iteration
    of each setting in turn (the order rotating every iteration), so that a machine whose
    speed drifts slows every setting alike. Each setting has its own runner, whose iteration
    counter restarts at 0: ``iters / interval`` of its iterations are recorded ones."""
    names = list(setups)
    totals = dict.fromkeys(names, 0.0)
    for runner in runners.values():
        runner.iter = 0
    for i in range(iters):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            start = clock()
            train_iteration(runners[name], setups[name], optimizer, *batch)
            totals[name] += clock() - start
    return {name: total / iters for name, total in totals.items()}


def peak_iteration_memory(runner, hooks, optimizer, batch):
    """Peak live bytes of one recorded iteration (hooks due at ``runner.iter = 0``)."""
    runner.iter = 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        train_iteration(runner, hooks, optimizer, *batch)
    # each op's own allocations minus its own frees (children excluded), and the frees that
    # happen between ops ('[memory]' events), in the order they start
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for event in events:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--depth', type=int, default=18, help='ResNet_CIFAR depth')
    parser.add_argument('--base-channels', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--img-size', type=int, default=32)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--iters', type=int, default=100,
                        help='iterations per setting and repeat (a multiple of the intervals)')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--only', default=None,
                        help="run only the settings whose name has this word (and the "
                        "no-hook baseline), e.g. '@1' or 'StiffnessHook'")
    parser.add_argument('--log-interval', type=int, default=10,
                        help="the run's LoggerHook interval (mmengine's default 10; "
                        "mmpretrain's configs use 100): the hooks write their recorded "
                        "iterations in a batch at its multiples")
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    parser.add_argument('--clock', choices=tuple(CLOCKS), default='wall',
                        help="'wall' (default; what training feels, on an otherwise idle "
                        "machine) or 'cpu': this process's CPU time, steadier on a machine "
                        "busy with other work; use it with --threads 1, as idle OpenMP "
                        "workers spin and their spinning counts as CPU time")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Classifier(args.depth, args.base_channels).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size),
             torch.randint(0, 10, (args.batch_size, )))
    work_dir = tempfile.mkdtemp(prefix='bench_hooks_')
    runner = BenchRunner(model, work_dir, args.log_interval)
    setups = {}
    timers = {}
    for name, factories in settings(args).items():
        hooks = [make() for make in factories]
        for hook in hooks:
            hook.before_train(runner)
        setups[name] = hooks
        timers[name] = HookTimer(CLOCKS[args.clock])
    check_iters(args, setups)
    everything = [hook for hooks in setups.values() for hook in hooks]
    for _ in range(args.warmup):
        train_iteration(runner, everything, optimizer, *batch)
    for hook in everything:
        hook.flush(runner)  # start the timed iterations with no recorded iteration pending

    for name, hooks in setups.items():
        timers[name].instrument(hooks)
    names = list(setups)
    # one iteration counter per setting; the MessageHub, visualizer and logger shared
    runners = {name: copy.copy(runner) for name in names}
    times = {name: [] for name in names}
    in_hooks = {name: [] for name in names}
    for repeat in range(args.repeats):
        before = {name: timers[name].total for name in names}
        means = time_interleaved(runners, setups, optimizer, batch, args.iters,
                                 CLOCKS[args.clock])
        for name in names:
            times[name].append(means[name])
            in_hooks[name].append((timers[name].total - before[name]) / args.iters)
        print(f'repeat {repeat + 1}/{args.repeats} done', file=sys.stderr, flush=True)
    at_one = [name for name in ('StiffnessHook @1', 'FrequencyHook @1') if name in setups]
    memory_setups = {BASELINE: [], **{name: setups[name] for name in at_one}}
    if len(at_one) == 2:
        memory_setups['both @1'] = setups[at_one[0]] + setups[at_one[1]]
    peaks = {name: [] for name in memory_setups}
    for _ in range(3):  # interleaved too; the median of three
        for name, hooks in memory_setups.items():
            peaks[name].append(peak_iteration_memory(runner, hooks, optimizer, batch))
    memory = {name: statistics.median(values) for name, values in peaks.items()}

    print(f'ResNet_CIFAR-{args.depth} (base {args.base_channels}) batch={args.batch_size} '
          f'img={args.img_size} threads={torch.get_num_threads()} repeats={args.repeats} '
          f'iters/setting={args.iters} clock={args.clock}; peak memory: profiler live bytes of '
          f'one recorded iteration')
    # end to end: A/B ratio of whole iterations; in hooks: the time measured inside the hooks'
    # code per iteration, over the median iteration without hooks (no noise from the rest)
    header = (f'{"setting":<34}{"iter (ms)":>11}{"time ratio":>12}{"in hooks (ms)":>15}'
              f'{"hook ratio":>12}')
    print(header)
    print('-' * len(header))
    plain = statistics.median(times[BASELINE])
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times[BASELINE])]
        hook_ms = statistics.median(in_hooks[name])
        print(f'{name:<34}{statistics.median(times[name]) * 1e3:>11.2f}'
              f'{statistics.median(ratios):>12.3f}{hook_ms * 1e3:>15.3f}'
              f'{(plain + hook_ms) / plain:>12.4f}')
    header = f'{"setting":<34}{"peak (MiB)":>11}{"mem ratio":>12}'
    print(header)
    print('-' * len(header))
    for name, peak in memory.items():
        print(f'{name:<34}{peak / 2**20:>11.2f}{peak / memory[BASELINE]:>12.3f}')


if __name__ == '__main__':
    main()
