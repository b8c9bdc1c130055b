"""Train-step time and peak memory of StepNet / SE ResNet-50 against the plain ResNet-50.

One run prints side-by-side ratios. Each repeat times every model once, in a rotated order
(A/B interleaved, so drifts of the machine hit all models alike); the table reports the median
over repeats of each model's time and of its time ratio to the plain ResNet-50 in the same
repeat.

Peak memory of one train step (forward, backward, SGD update), above what was allocated before
the step (not measured for compiled models on the CPU: the profiler does not see the
activations inside a compiled graph):
  * cuda: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``;
  * cpu: the running sum, in time order, of the bytes each op allocates (net of its own frees)
    and of the frees outside ops, as ``torch.profiler`` records them with
    ``profile_memory=True``: live tensor bytes, not the process RSS.

``--fused on|off|both`` times the backbones with the fused residual step (``fused=True``: its
Triton kernels on CUDA, its PyTorch expression on the CPU), the reference step (``fused=False``,
the default) or both, as rows ``NAME`` and ``NAME fused``; the ratios are to the reference
ResNet-50. ``--amp fp16|bf16`` runs the forward pass under autocast (fp16 with a gradient
scaler); ``--channels-last`` puts the models and the batch in the channels-last memory format.

``--compile`` wraps every model in ``torch.compile`` (what MMEngine's ``compile=True`` does to
a model) and compares the compiled models; the first warm-up step of each compiles it, untimed.
Compiled, an adaptor's pooling, gating and residual sum can be fused into few kernels, where
eager mode launches each of them separately.

Usage (CPU defaults finish in a couple of minutes on 2 cores; compiled, a few more):
    python tools/benchmark/bench_step_resnet.py
    python tools/benchmark/bench_step_resnet.py --compile
    python tools/benchmark/bench_step_resnet.py --fused both
    python tools/benchmark/bench_step_resnet.py --device cuda --batch-size 64 --img-size 224 \
        --fused both --amp bf16 --channels-last
"""
import argparse
import contextlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmstiff.models.backbones import StepResNet

VARIANTS = {
    'ResNet-50': None,
    'SE-ResNet-50': dict(type='mmstiff.SEAdaptor'),
    'StepNet-ResNet-50': dict(type='mmstiff.StepNetAdaptor'),
}
BASELINE = 'ResNet-50'
#: ``--fused``: the backbones' ``fused`` values timed
FUSED_CHOICES = {'off': (False, ), 'on': (True, ), 'both': (False, True)}
#: ``--amp``: the autocast dtype
AMP_DTYPES = {'fp16': torch.float16, 'bf16': torch.bfloat16}


class Classifier(nn.Module):
    """Backbone, global average pooling and a linear head: a full training graph."""

    def __init__(self, adaptor, num_classes=1000, fused=False):
        super().__init__()
        self.backbone = StepResNet(50, adaptor=adaptor, fused=fused)
        self.head = nn.Linear(self.backbone.feat_dim, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1].mean((2, 3)))


class Precision:
    """How a train step runs its forward pass: autocast to ``dtype`` (None: float32), with a
    gradient scaler for float16."""

    def __init__(self, dtype, device):
        self.dtype, self.device = dtype, device
        self.scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)


def train_step(model, optimizer, images, labels, precision=None):
    optimizer.zero_grad(set_to_none=True)
    if precision is None:
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
        return
    with precision.autocast():
        loss = F.cross_entropy(model(images), labels)
    if precision.scaler is None:
        loss.backward()
        optimizer.step()
    else:
        precision.scaler.scale(loss).backward()
        precision.scaler.step(optimizer)
        precision.scaler.update()


def synchronize(device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_steps(model, optimizer, batch, iters, device, precision=None):
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        train_step(model, optimizer, *batch, precision)
    synchronize(device)
    return (time.perf_counter() - start) / iters


def peak_step_memory(model, optimizer, batch, device, precision=None):
    """Peak bytes allocated during one train step, above the allocation at its start."""
    if device.type == 'cuda':
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        train_step(model, optimizer, *batch, precision)
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        train_step(model, optimizer, *batch, precision)
    # every op event carries the bytes it allocated net of what it freed itself; '[memory]'
    # events carry the frees that happen outside any op. In time order, their running sum is
    # the live tensor bytes allocated since the step began.
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--iters', type=int, default=2, help='train steps per timing')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps per model')
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    parser.add_argument(
        '--fused', choices=sorted(FUSED_CHOICES), default='off',
        help="the fused residual step ('on'), the reference ('off', default) or "
        "both, as rows 'NAME' and 'NAME fused'")
    add_precision_arguments(parser)
    add_compile_argument(parser)
    args = check_compile_warmup(parser, parser.parse_args(argv))
    if args.compile and args.fused != 'off':
        parser.error(f'--fused {args.fused} is not supported with --compile; expected off (a '
                     'compiled model takes the reference step, which the compiler fuses)')
    return args


def add_precision_arguments(parser):
    """``--amp fp16|bf16`` and ``--channels-last``."""
    parser.add_argument('--amp', choices=sorted(AMP_DTYPES), default=None,
                        help='autocast the forward pass to this dtype (fp16: with a GradScaler)')
    parser.add_argument('--channels-last', action='store_true',
                        help='models and batch in the channels-last memory format')


def add_compile_argument(parser):
    """``--compile``, shared by the benchmarks that time train steps with :func:`compare_models`."""
    parser.add_argument('--compile', action='store_true',
                        help='time torch.compile-d models (compiled during the warm-up)')


def check_compile_warmup(parser, args):
    """``args``, or a usage error where ``--compile`` has no warm-up step to compile in."""
    if args.compile and args.warmup < 1:
        parser.error(f'--warmup {args.warmup} is not supported with --compile; expected at least '
                     '1 untimed step, in which each model is compiled')
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         device=device), torch.randint(0, 1000, (args.batch_size, ), device=device))
    models = {}
    for name, adaptor in VARIANTS.items():
        for fused in FUSED_CHOICES[args.fused]:
            label = f'{name} fused' if fused else name
            models[label] = lambda adaptor=adaptor, fused=fused: Classifier(adaptor, fused=fused)
    baseline = BASELINE if args.fused != 'on' else f'{BASELINE} fused'
    settings = f'batch={args.batch_size} img={args.img_size}'
    settings += f' amp={args.amp}' if args.amp else ''
    settings += ' channels_last' if args.channels_last else ''
    compare_models(models, baseline, batch, args, device, settings, name_width=26)


def compare_models(models, baseline, batch, args, device, settings, name_width):
    """Build each of ``models`` (``{name: () -> nn.Module}``), warm it up, time its train steps
    A/B interleaved in a rotated order over ``args.repeats``, measure one step's peak memory,
    and print the table of medians and ratios to ``baseline``; ``settings`` goes into the
    first line. ``args``: ``warmup``, ``repeats``, ``iters``, ``compile`` and, where present,
    ``amp`` and ``channels_last``."""
    amp = getattr(args, 'amp', None)
    precision = Precision(AMP_DTYPES[amp], device) if amp else None
    memory_format = torch.channels_last if getattr(args, 'channels_last', False) else None
    if memory_format is not None:
        batch = (batch[0].contiguous(memory_format=memory_format), ) + tuple(batch[1:])
    runs = {}
    for name, build in models.items():
        model = build().to(device).train()
        if memory_format is not None:
            model = model.to(memory_format=memory_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        if args.compile:
            model = torch.compile(model)
        for _ in range(args.warmup):
            train_step(model, optimizer, *batch, precision)
        runs[name] = (model, optimizer)

    names = list(runs)
    times = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            times[name].append(time_steps(*runs[name], batch, args.iters, device, precision))
    compiled = args.compile
    # the profiler's op events miss the activations of a compiled graph (a compiled ResNet-50
    # step shows only its gradients' bytes, at any batch size): no peak for compiled CPU runs
    measured = device.type == 'cuda' or not compiled
    memory = {
        name: peak_step_memory(*runs[name], batch, device, precision) if measured else None
        for name in names
    }

    what = ('cuda max_memory_allocated' if device.type == 'cuda' else
            'profiler live bytes' if measured else 'not measured for compiled CPU models')
    print(f'device={device} threads={torch.get_num_threads()}{" compiled" if compiled else ""} '
          f'{settings} '
          f'repeats={args.repeats} iters/timing={args.iters} peak memory: {what}')
    header = (f'{"model":<{name_width}}{"params (M)":>12}{"step (ms)":>12}{"time ratio":>12}'
              f'{"peak (MiB)":>12}{"mem ratio":>11}')
    print(header)
    print('-' * len(header))
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times[baseline])]
        params = sum(p.numel() for p in runs[name][0].parameters()) / 1e6
        peak, peak_ratio = ('n/a', 'n/a') if memory[name] is None else (
            f'{memory[name] / 2**20:.1f}', f'{memory[name] / memory[baseline]:.3f}')
        print(f'{name:<{name_width}}{params:>12.2f}{statistics.median(times[name]) * 1e3:>12.1f}'
              f'{statistics.median(ratios):>12.3f}{peak:>12}{peak_ratio:>11}')


if __name__ == '__main__':
    main()
