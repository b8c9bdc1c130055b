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
the dispatch of module hooks). The next two columns divide the hooks' cost by the number of
residual blocks the hook records: the extra time per iteration from the time ratio, and the
time inside the hooks' code. The last two are the lowest and highest time ratio of the repeats:
the spread of the median in the third column (on a machine shared with other work, the
whole-iteration ratio moves by more than the in-hook figures). On CUDA, the time inside the
hooks' code is host time (launching kernels); the device runs their kernels asynchronously, and
the iteration time, measured with a synchronisation at its end, holds what they cost there.

``--busy`` (CUDA) also profiles ``min(--iters, 10)`` iterations of each setting with
``torch.profiler`` and prints the device's kernel time per iteration and its ratio to the
no-hook one: where the hooks' time ratio exceeds their busy ratio, the iteration waited for the
host (the hooks' Python, a synchronisation), not for the hooks' kernels.

``--compile`` times a ``torch.compile``-d model, as MMEngine's ``compile=True`` trains it: the
hooks' recorded iterations run eagerly (the compiler's ``force_eager`` stance while a hook
records) and the others run the compiled graph, so the ratios are what the hooks cost a
compiled run. The model is compiled in untimed iterations without hooks before the warm-up;
peak memory is then measured on CUDA only (the CPU profiler does not see the activations inside
a compiled graph).

With ``--arch vit`` one more setting, ``FrequencyHook @1, no attention maps``
(``attention=False``), tells the attention maps' share (M_attn, and rebuilding the maps from
``qkv``) from the rest of the FrequencyHook's cost. ``StiffnessHook @1, no adjoint`` and
``both @defaults, no adjoint`` (``adjoint=False``) tell the adjoint's share (its gradient hooks
in the backward pass, whose time the "in hooks" column counts too) from the rest.

Peak memory: on the CPU, the largest running sum, in start order, of the bytes each op
allocates and frees itself (``torch.profiler`` with ``profile_memory=True``:
``self_cpu_memory_usage``, children excluded, plus the frees between ops), i.e. the allocator's
live tensor bytes; on CUDA, ``max_memory_allocated`` above the allocation at the start. Over
one *recorded* iteration (each hook at interval 1), against one iteration without hooks.

Models (``--arch``, ``--depth``):

* ``cifar`` (default): mmpretrain's ``ResNet_CIFAR`` of ``--depth`` 18, 34, 50, 101 or 152;
  ``--depth 164`` is mmstiff's pre-activation ResNet-164 (``PreActStepResNet``, no adaptor).
  The default is the CIFAR ResNet-18 as ``resnet18_8xb16_cifar10`` trains it (64 base
  channels, batch 16 per GPU).
* ``resnet``: mmpretrain's ImageNet ``ResNet`` of ``--depth`` 18, 34, 50, 101 or 152.
* ``convnext``, ``mobilenetv2``: mmpretrain's ConvNeXt-atto (12 blocks, layer scale read as
  the step size) and MobileNetV2 (10 inverted residuals that add their input), read by the
  zoo's block tables; ``--depth`` and the widths do not apply.
* ``vit``: mmpretrain's ``VisionTransformer`` with DeiT-S's 6 heads and MLP ratio 4,
  ``--depth`` layers of width ``--embed-dims``: by default 24 layers of width 96 on 32x32
  images in 4x4 patches (a deep, narrow DeiT-S); ``--depth 12 --embed-dims 384 --img-size 224
  --patch-size 16`` is DeiT-S itself.

Usage (the defaults take about 13 minutes on 2 idle CPU cores):
    python tools/benchmark/bench_hooks.py
    python tools/benchmark/bench_hooks.py --only @1 --iters 20        # interval 1 only, ~2 min
    python tools/benchmark/bench_hooks.py --threads 1 --clock cpu     # on a busy machine
    # a narrow worst case (~7 minutes): its iteration is 4-5x faster than the default
    # model's while the hooks' cost per recorded iteration only halves
    python tools/benchmark/bench_hooks.py --base-channels 16 --batch-size 32 --repeats 5
    python tools/benchmark/bench_hooks.py --compile --only default --iters 100  # compiled run
    # deep models: 33 blocks (ResNet_CIFAR-101), 54 (pre-activation ResNet-164), 24 layers
    python tools/benchmark/bench_hooks.py --depth 101 --base-channels 16 --only @1 --iters 20
    python tools/benchmark/bench_hooks.py --depth 164 --base-channels 16 --only @1 --iters 20
    python tools/benchmark/bench_hooks.py --arch vit --only @1 --iters 20
    # on a GPU: ResNet-50 at 224x224, batch 64; DeiT-S, batch 128
    python tools/benchmark/bench_hooks.py --device cuda --arch resnet --depth 50 \
        --img-size 224 --batch-size 64 --iters 100
    python tools/benchmark/bench_hooks.py --device cuda --arch vit --depth 12 \
        --embed-dims 384 --img-size 224 --patch-size 16 --batch-size 128 --iters 100
"""
import argparse
import copy
import statistics
import sys
import tempfile
import time

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.analysis.trajectory import AdjointNorm
from mmstiff.engine.hooks import FrequencyHook, StiffnessHook

BASELINE = 'no hook'

CIFAR_DEPTHS = (18, 34, 50, 101, 152)
PREACT_DEPTH = 164
IMAGENET_DEPTHS = (18, 34, 50, 101, 152)
ARCHS = ('cifar', 'resnet', 'vit', 'convnext', 'mobilenetv2')
#: per architecture: default depth, width (base channels or embedding width), image size
ARCH_DEFAULTS = {
    'cifar': (18, 64, 32),
    'resnet': (50, 64, 224),
    'vit': (24, 96, 32),
    'convnext': (0, 0, 32),
    'mobilenetv2': (0, 0, 32)
}
#: the zoo architectures: mmpretrain's named arch, read by the block tables (no --depth)
ZOO_ARCHS = {'convnext': 'ConvNeXt-atto', 'mobilenetv2': 'MobileNetV2 (widen factor 1)'}


class Classifier(nn.Module):
    """A backbone, global pooling (or the class token) and a linear head."""

    def __init__(self, backbone, feat_dim, num_classes=10):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feat_dim, num_classes)

    def forward(self, x):
        out = self.backbone(x)[-1]
        return self.head(out.mean((2, 3)) if out.dim() == 4 else out)


def build_model(args):
    """The classifier ``--arch`` / ``--depth`` / ``--base-channels`` / ``--embed-dims`` name,
    and a one-line description."""
    if args.arch == 'vit':
        from mmpretrain.models.backbones import VisionTransformer
        width = args.embed_dims
        backbone = VisionTransformer(
            arch=dict(embed_dims=width, num_layers=args.depth, num_heads=6,
                      feedforward_channels=4 * width), img_size=args.img_size,
            patch_size=args.patch_size, out_type='cls_token')
        return (Classifier(backbone, width),
                f'ViT ({args.depth} layers, width {width}, 6 heads, patch {args.patch_size})')
    if args.arch == 'convnext':
        from mmpretrain.models.backbones import ConvNeXt
        backbone = ConvNeXt(arch='atto')
        width = ConvNeXt.arch_settings['atto']['channels'][-1]
        return Classifier(backbone, width), ZOO_ARCHS[args.arch]
    if args.arch == 'mobilenetv2':
        from mmpretrain.models.backbones import MobileNetV2
        return Classifier(MobileNetV2(), 1280), ZOO_ARCHS[args.arch]
    width = args.base_channels
    if args.arch == 'resnet':
        from mmpretrain.models.backbones import ResNet
        backbone = ResNet(depth=args.depth, base_channels=width, stem_channels=width)
        return Classifier(backbone, backbone.feat_dim), f'ResNet-{args.depth} (base {width})'
    if args.depth == PREACT_DEPTH:
        from mmstiff.models.backbones import PreActStepResNet
        backbone = PreActStepResNet(depth=args.depth, base_channels=width)
        return (Classifier(backbone,
                           backbone.feat_dim), f'pre-activation ResNet-{args.depth} (base {width})')
    from mmpretrain.models.backbones import ResNet_CIFAR
    backbone = ResNet_CIFAR(depth=args.depth, stem_channels=width, base_channels=width)
    return Classifier(backbone, backbone.feat_dim), f'ResNet_CIFAR-{args.depth} (base {width})'


class BenchRunner:
    """The public parts of a Runner that the hooks touch."""

    def __init__(self, model, work_dir, log_interval):
        from mmengine.hooks import LoggerHook
        from mmengine.logging import MessageHub, MMLogger
        from mmengine.visualization import Visualizer
        self.model = model
        self.hooks = [LoggerHook(interval=log_interval)]  # sets when the hooks print and write
        self.iter = 0
        self.epoch = 0
        self.timestamp = 'bench'
        self.message_hub = MessageHub.get_instance('bench_hooks')
        self.visualizer = Visualizer.get_instance('bench_hooks',
                                                  vis_backends=[dict(type='LocalVisBackend')],
                                                  save_dir=work_dir)
        self.logger = MMLogger.get_instance('bench_hooks', log_level='WARNING')


def settings(args):
    """Name -> list of hook factories (the ones ``--only`` selects)."""
    s_default = StiffnessHook().interval
    f_default = FrequencyHook().interval
    every = {
        BASELINE: [],
        'StiffnessHook @1': [lambda: StiffnessHook(interval=1)],
        'StiffnessHook @1, no adjoint': [lambda: StiffnessHook(interval=1, adjoint=False)],
        'StiffnessHook @1, 8 samples': [lambda: StiffnessHook(interval=1, num_samples=8)],
        f'StiffnessHook @{s_default} (default)': [lambda: StiffnessHook()],
        'FrequencyHook @1': [lambda: FrequencyHook(interval=1)],
        # transformers: what the attention maps and M_attn cost, as the difference to this
        'FrequencyHook @1, no attention maps': [lambda: FrequencyHook(interval=1, attention=False)],
        f'FrequencyHook @{f_default} (default)': [lambda: FrequencyHook()],
        'both @defaults': [lambda: StiffnessHook(), lambda: FrequencyHook()],
        'both @defaults, no adjoint':
        [lambda: StiffnessHook(adjoint=False), lambda: FrequencyHook()],
    }
    if args.arch != 'vit':  # no attention map to leave out
        del every['FrequencyHook @1, no attention maps']
    only = None if args.only is None else set(args.only)
    chosen = {
        name: hooks
        for name, hooks in every.items()
        if name == BASELINE or only is None or only & set(_words(name))
    }
    if len(chosen) == 1:
        raise SystemExit(f'--only {" ".join(args.only)!r} matches none of {list(every)[1:]}')
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


#: the timer of the setting whose iteration runs (the adjoint's gradient hooks, called by the
#: backward pass, add their time to it)
RUNNING = [None]


def time_gradient_hooks(clock):
    """Count the time of every adjoint gradient hook (:class:`AdjointNorm`) to the timer of
    the setting running (:data:`RUNNING`)."""
    inner = AdjointNorm.__call__

    def timed(self, grad):
        start = clock()
        try:
            return inner(self, grad)
        finally:
            if RUNNING[0] is not None:
                RUNNING[0].total += clock() - start

    AdjointNorm.__call__ = timed


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


def synchronize(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_interleaved(runners, setups, optimizer, batch, iters, clock, timers=None):
    """Mean iteration time of every setting over ``iters`` iterations each, run one iteration
    of each setting in turn (the order rotating every iteration), so that a machine whose
    speed drifts slows every setting alike. Each setting has its own runner, whose iteration
    counter restarts at 0: ``iters / interval`` of its iterations are recorded ones."""
    names = list(setups)
    totals = dict.fromkeys(names, 0.0)
    device = batch[0].device
    for runner in runners.values():
        runner.iter = 0
    for i in range(iters):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            RUNNING[0] = timers and timers[name]
            synchronize(device)
            start = clock()
            train_iteration(runners[name], setups[name], optimizer, *batch)
            synchronize(device)
            totals[name] += clock() - start
        RUNNING[0] = None
    return {name: total / iters for name, total in totals.items()}


def peak_iteration_memory(runner, hooks, optimizer, batch):
    """Peak bytes of one recorded iteration (hooks due at ``runner.iter = 0``) above what is
    allocated at its start."""
    runner.iter = 0
    device = batch[0].device
    if device.type == 'cuda':
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        train_iteration(runner, hooks, optimizer, *batch)
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
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


#: iterations profiled per setting by ``--busy`` (at most): a ResNet-50 iteration launches
#: thousands of kernels, whose events the profiler hands back one by one
BUSY_ITERS = 10


def kernel_microseconds(events, iters):
    """The summed duration of the CUDA kernels among profiler ``events``, per iteration (µs)."""
    cuda = torch.autograd.DeviceType.CUDA
    return sum(e.time_range.elapsed_us() for e in events if e.device_type == cuda) / iters


def device_busy(runner, hooks, optimizer, batch, iters):
    """Kernel time on the device per iteration (µs) over ``iters`` iterations of one setting,
    its iteration counter restarting at 0 as in the timings (CUDA only)."""
    runner.iter = 0
    device = batch[0].device
    synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(iters):
            train_iteration(runner, hooks, optimizer, *batch)
        synchronize(device)
    return kernel_microseconds(prof.events(), iters)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--arch', choices=ARCHS, default='cifar',
        help="'cifar' (ResNet_CIFAR; --depth 164: pre-activation ResNet-164), "
        "'resnet' (ImageNet ResNet), 'vit' (a DeiT-S-style ViT), 'convnext' (ConvNeXt-atto) or "
        "'mobilenetv2' (MobileNetV2)")
    parser.add_argument(
        '--depth', type=int, default=None,
        help=f'cifar: one of {CIFAR_DEPTHS + (PREACT_DEPTH, )} (default 18); '
        f'resnet: one of {IMAGENET_DEPTHS} (default 50); vit: the number of '
        'layers (default 24)')
    parser.add_argument('--base-channels', type=int, default=64, help='ResNet base width')
    parser.add_argument('--embed-dims', type=int, default=96, help='ViT width (6 heads)')
    parser.add_argument('--patch-size', type=int, default=4, help='ViT patch size')
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--img-size', type=int, default=None,
                        help='default: 32 (cifar, vit), 224 (resnet)')
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--iters', type=int, default=100,
                        help='iterations per setting and repeat (a multiple of the intervals)')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument(
        '--only', nargs='+', default=None,
        help="run only the settings whose name has one of these words (and the no-hook "
        "baseline), e.g. '@1' or 'StiffnessHook' or '@defaults default'")
    parser.add_argument(
        '--log-interval', type=int, default=10,
        help="the run's LoggerHook interval (mmengine's default 10; "
        "mmpretrain's configs use 100): the hooks write their recorded "
        "iterations in a batch at its multiples")
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    parser.add_argument('--compile', action='store_true',
                        help='time a torch.compile-d model (compiled before the warm-up)')
    parser.add_argument(
        '--busy', action='store_true',
        help="CUDA: also the device's kernel time per iteration of each "
        'setting (torch.profiler)')
    parser.add_argument(
        '--clock', choices=tuple(CLOCKS), default='wall',
        help="'wall' (default; what training feels, on an otherwise idle "
        "machine) or 'cpu': this process's CPU time, steadier on a machine "
        "busy with other work; use it with --threads 1, as idle OpenMP "
        "workers spin and their spinning counts as CPU time")
    args = parser.parse_args(argv)
    depth, _, img_size = ARCH_DEFAULTS[args.arch]
    args.depth = depth if args.depth is None else args.depth
    args.img_size = img_size if args.img_size is None else args.img_size
    depths = {'cifar': CIFAR_DEPTHS + (PREACT_DEPTH, ), 'resnet': IMAGENET_DEPTHS}.get(args.arch)
    if depths is not None and args.depth not in depths:
        parser.error(f'--depth {args.depth} is not supported with --arch {args.arch}; '
                     f'expected one of {depths}')
    if args.arch in ZOO_ARCHS and args.depth:
        parser.error(f'--depth {args.depth} does not apply to --arch {args.arch} '
                     f'({ZOO_ARCHS[args.arch]})')
    sized = ('depth', ) if args.arch not in ZOO_ARCHS else ()
    for field in sized + ('base_channels', 'embed_dims', 'patch_size', 'batch_size', 'img_size',
                          'repeats', 'iters', 'log_interval'):
        if getattr(args, field) < 1:
            parser.error(f'--{field.replace("_", "-")} {getattr(args, field)} is not '
                         'supported; expected a positive integer')
    if args.arch == 'vit' and args.img_size % args.patch_size:
        parser.error(f'--img-size {args.img_size} is not a multiple of --patch-size '
                     f'{args.patch_size}')
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error(f'--device {args.device} was given but CUDA is not available')
    if args.busy and not args.device.startswith('cuda'):
        parser.error(f'--busy measures the kernels on a GPU; it cannot profile --device '
                     f'{args.device}')
    if args.clock == 'cpu' and not args.device.startswith('cpu'):
        parser.error(f'--clock cpu measures host CPU time; it cannot time --device '
                     f'{args.device}')
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model, description = build_model(args)
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         device=device), torch.randint(0, 10, (args.batch_size, ), device=device))
    if args.compile:
        model = torch.compile(model)
    work_dir = tempfile.mkdtemp(prefix='bench_hooks_')
    runner = BenchRunner(model, work_dir, args.log_interval)
    if args.compile:
        for _ in range(2):  # compile it (the second step: with the optimizer's state)
            train_iteration(runner, [], optimizer, *batch)
        runner.iter = 0
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
    blocks = {
        name: max([len(hook.recorders['trajectory'].blocks) for hook in hooks] or [0])
        for name, hooks in setups.items()
    }

    for name, hooks in setups.items():
        timers[name].instrument(hooks)
    time_gradient_hooks(CLOCKS[args.clock])
    names = list(setups)
    # one iteration counter per setting; the MessageHub, visualizer and logger shared
    runners = {name: copy.copy(runner) for name in names}
    times = {name: [] for name in names}
    in_hooks = {name: [] for name in names}
    for repeat in range(args.repeats):
        before = {name: timers[name].total for name in names}
        means = time_interleaved(runners, setups, optimizer, batch, args.iters, CLOCKS[args.clock],
                                 timers)
        for name in names:
            times[name].append(means[name])
            in_hooks[name].append((timers[name].total - before[name]) / args.iters)
        print(f'repeat {repeat + 1}/{args.repeats} done', file=sys.stderr, flush=True)
    at_one = [name for name in ('StiffnessHook @1', 'FrequencyHook @1') if name in setups]
    memory_setups = {BASELINE: [], **{name: setups[name] for name in at_one}}
    if len(at_one) == 2:
        memory_setups['both @1'] = setups[at_one[0]] + setups[at_one[1]]
    if 'StiffnessHook @1, no adjoint' in setups:  # what the adjoint's gradient hooks hold
        memory_setups['StiffnessHook @1, no adjoint'] = setups['StiffnessHook @1, no adjoint']
    if args.compile and device.type != 'cuda':
        memory_setups = {}  # the profiler misses a compiled graph's activations
    peaks = {name: [] for name in memory_setups}
    for _ in range(3):  # interleaved too; the median of three
        for name, hooks in memory_setups.items():
            peaks[name].append(peak_iteration_memory(runner, hooks, optimizer, batch))
    memory = {name: statistics.median(values) for name, values in peaks.items()}

    threads = f'threads={torch.get_num_threads()} ' if device.type == 'cpu' else ''
    what = ('cuda max_memory_allocated' if device.type == 'cuda' else 'profiler live bytes')
    peak = (f'peak memory: {what} of one recorded iteration'
            if memory else 'peak memory: not measured (compiled, on the CPU)')
    compiled = 'compiled ' if args.compile else ''
    print(f'{compiled}{description} batch={args.batch_size} img={args.img_size} device={device} '
          f'{threads}repeats={args.repeats} iters/setting={args.iters} clock={args.clock}; '
          f'{blocks[names[-1]]} blocks; {peak}')
    # end to end: A/B ratio of whole iterations; in hooks: the time measured inside the hooks'
    # code per iteration, over the median iteration without hooks (no noise from the rest);
    # per block: both divided by the number of blocks the hooks record
    header = (f'{"setting":<37}{"iter (ms)":>11}{"time ratio":>12}{"in hooks (ms)":>15}'
              f'{"hook ratio":>12}{"extra/block (us)":>18}{"in hooks/block (us)":>21}'
              f'{"ratio min":>11}{"ratio max":>11}')
    print(header)
    print('-' * len(header))
    plain = statistics.median(times[BASELINE])
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times[BASELINE])]
        ratio = statistics.median(ratios)
        hook_ms = statistics.median(in_hooks[name])
        per_block = max(blocks[name], 1)
        print(f'{name:<37}{statistics.median(times[name]) * 1e3:>11.2f}'
              f'{ratio:>12.3f}{hook_ms * 1e3:>15.3f}'
              f'{(plain + hook_ms) / plain:>12.4f}'
              f'{(ratio - 1) * plain / per_block * 1e6:>18.1f}'
              f'{hook_ms / per_block * 1e6:>21.1f}'
              f'{min(ratios):>11.3f}{max(ratios):>11.3f}')
    if args.busy:
        iters = min(args.iters, BUSY_ITERS)
        busy = {
            name: device_busy(runners[name], setups[name], optimizer, batch, iters)
            for name in names
        }
        header = f'{"setting":<37}{"busy (ms)":>11}{"busy ratio":>12}{"time ratio":>12}'
        print(f'device busy: the CUDA kernels\' time per iteration over {iters} iterations '
              '(torch.profiler)')
        print(header)
        print('-' * len(header))
        for name in names:
            ratio = statistics.median(t / b for t, b in zip(times[name], times[BASELINE]))
            print(f'{name:<37}{busy[name] / 1e3:>11.2f}{busy[name] / busy[BASELINE]:>12.3f}'
                  f'{ratio:>12.3f}')
    if not memory:
        return
    header = f'{"setting":<37}{"peak (MiB)":>11}{"mem ratio":>12}'
    print(header)
    print('-' * len(header))
    for name, peak in memory.items():
        print(f'{name:<37}{peak / 2**20:>11.2f}{peak / memory[BASELINE]:>12.3f}')


if __name__ == '__main__':
    run_tool(main)
