"""Train-step timing for the benchmarks (docs/benchmarks.md): one SGD train step (forward,
cross-entropy, backward, update; optionally under autocast), its time and its peak memory, and
:func:`compare_models`, which times several models A/B interleaved and prints the medians and
their ratios to a baseline.

Peak memory of one train step, above what was allocated before the step:
  * cuda: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``;
  * cpu: the running sum, in time order, of the bytes each op allocates (net of its own frees)
    and of the frees outside ops, as ``torch.profiler`` records them with
    ``profile_memory=True``: live tensor bytes, not the process RSS.
"""
import contextlib
import statistics
import time
from typing import (Any, Callable, ContextManager, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Tuple)

import torch
import torch.nn.functional as F

from mmstiff.utils.triton_launch import HAS_TRITON

#: ``--amp``: the autocast dtype
AMP_DTYPES = {'fp16': torch.float16, 'bf16': torch.bfloat16}


class Precision:
    """How a train step runs its forward pass: autocast to ``dtype`` (None: float32), with a
    gradient scaler for float16."""

    def __init__(self, dtype: Optional[torch.dtype], device: torch.device):
        self.dtype, self.device = dtype, device
        self.scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def autocast(self) -> ContextManager[None]:
        """The context of the forward pass: ``torch.autocast`` to :attr:`dtype` on the device's
        type, or a context that does nothing for float32 (``dtype`` None)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)


def compile_mode(args: Any) -> str:
    """``torch.compile``'s mode for ``args`` (``--compile-mode``; ``'default'`` where the
    benchmark has none)."""
    return getattr(args, 'compile_mode', 'default')


class StepMarked(torch.nn.Module):
    """A model compiled with CUDA graphs (``mode='reduce-overhead'``) whose every call first
    marks a new step: the graphs may then overwrite the last step's outputs."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return self.model(*args, **kwargs)


def compile_model(model: torch.nn.Module, mode: str = 'default') -> torch.nn.Module:
    """``torch.compile(model, mode=mode)``; under CUDA graphs, as a :class:`StepMarked`."""
    model = torch.compile(model, mode=mode)
    return StepMarked(model) if mode == 'reduce-overhead' else model


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
               labels: torch.Tensor, precision: Optional[Precision] = None) -> None:
    """One SGD train step of ``model`` on ``(images, labels)``: gradients set to None,
    cross-entropy, backward pass, ``optimizer.step()``.

    With ``precision``, the forward pass runs under its autocast; with its gradient scaler
    (float16) the loss is scaled, and the scaler steps the optimizer and updates its scale.
    """
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


def synchronize(device: torch.device) -> None:
    """Wait until the work queued on a CUDA ``device`` is done; nothing for other devices."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batch: Sequence[torch.Tensor], iters: int, device: torch.device,
               precision: Optional[Precision] = None) -> float:
    """The mean time in seconds of one :func:`train_step` of ``model`` on ``batch`` ``(images,
    labels)`` over ``iters`` steps, the device synchronised before the first step and after
    the last."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        train_step(model, optimizer, *batch, precision)
    synchronize(device)
    return (time.perf_counter() - start) / iters


def peak_step_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     batch: Sequence[torch.Tensor], device: torch.device,
                     precision: Optional[Precision] = None) -> int:
    """Peak bytes allocated during one train step, above the allocation at its start."""
    return peak_memory(lambda: train_step(model, optimizer, *batch, precision), device)


def peak_memory(run: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes allocated during ``run()``, above the allocation at its start."""
    if device.type == 'cuda':
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        run()
    # every op event carries the bytes it allocated net of what it freed itself; '[memory]'
    # events carry the frees that happen outside any op. In time order, their running sum is
    # the live tensor bytes allocated since the step began.
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def prepare_runs(
    models: Mapping[str, Callable[[], torch.nn.Module]], batch: Sequence[torch.Tensor], args: Any,
    device: torch.device
) -> Tuple[Dict[str, Tuple[torch.nn.Module, torch.optim.Optimizer]], Sequence[torch.Tensor],
           Optional[Precision]]:
    """``(runs, batch, precision)``: each of ``models`` (``{name: () -> nn.Module}``) built in
    train mode with its SGD optimizer, compiled where ``args.compile`` asks, and warmed up for
    ``args.warmup`` steps; ``runs`` is ``{name: (model, optimizer)}``, ``batch`` the batch in the
    models' memory format. ``args``: ``warmup`` and, where present, ``compile``,
    ``compile_mode``, ``amp`` and ``channels_last``."""
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
        if getattr(args, 'compile', False):
            model = compile_model(model, compile_mode(args))
        for _ in range(args.warmup):
            train_step(model, optimizer, *batch, precision)
        runs[name] = (model, optimizer)
    return runs, batch, precision


def interleaved_times(runs: Mapping[str, Tuple[torch.nn.Module, torch.optim.Optimizer]],
                      batch: Sequence[torch.Tensor], args: Any, device: torch.device,
                      precision: Optional[Precision] = None) -> Dict[str, List[float]]:
    """``{name: [seconds per step, one per repeat]}``: each of ``args.repeats`` repeats times
    ``args.iters`` steps of every run, in an order rotated by one run per repeat (A/B
    interleaved, so that drifts of the machine hit every run alike)."""
    names = list(runs)
    times = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            times[name].append(time_steps(*runs[name], batch, args.iters, device, precision))
    return times


def compare_models(models: Mapping[str, Callable[[], torch.nn.Module]], baseline: str,
                   batch: Sequence[torch.Tensor], args: Any, device: torch.device, settings: str,
                   name_width: int) -> None:
    """Build each of ``models`` (``{name: () -> nn.Module}``), warm it up, time its train steps
    A/B interleaved in a rotated order over ``args.repeats``, measure one step's peak memory,
    and print the table of medians and ratios to ``baseline``; ``settings`` goes into the
    first line. ``args``: ``warmup``, ``repeats``, ``iters``, ``compile`` and, where present,
    ``amp`` and ``channels_last``."""
    runs, batch, precision = prepare_runs(models, batch, args, device)
    names = list(runs)
    times = interleaved_times(runs, batch, args, device, precision)
    compiled = args.compile
    graphs = compiled and compile_mode(args) == 'reduce-overhead'
    # the profiler's op events miss the activations of a compiled graph (a compiled ResNet-50
    # step shows only its gradients' bytes, at any batch size): no peak for compiled CPU runs.
    # CUDA graphs keep their activations in a private pool allocated at capture: the peak
    # above a step's start would not see them.
    measured = (device.type == 'cuda' or not compiled) and not graphs
    memory = {
        name: peak_step_memory(*runs[name], batch, device, precision) if measured else None
        for name in names
    }

    what = ('not measured under CUDA graphs'
            if graphs else 'cuda max_memory_allocated' if device.type == 'cuda' else
            'profiler live bytes' if measured else 'not measured for compiled CPU models')
    mode = f' compiled ({compile_mode(args)})' if compiled else ''
    print(f'device={device} threads={torch.get_num_threads()}{mode} '
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


class LaunchRecorder:
    """A stand-in for a Triton kernel: ``kernel[grid](*args)`` records one ``triton::NAME``
    profiler event (while a profiler runs) and computes nothing."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, grid: Any) -> Callable[..., None]:

        def launch(*args, **kwargs):
            if torch.autograd._profiler_enabled():  # no cost of its own when timed
                with torch.profiler.record_function(f'triton::{self.name}'):
                    pass

        return launch


@contextlib.contextmanager
def counting_analysis_kernels() -> Iterator[None]:
    """Inside it, the diagnostics' Triton kernels (the NSI sums, the frequency sums) take CPU
    tensors too, replaced by :class:`LaunchRecorder` stand-ins: what a ``StiffnessHook`` or a
    ``FrequencyHook`` launches in a CUDA run, counted on the CPU (``count_step_kernels.py``).
    Nothing changes without Triton."""
    from mmstiff.analysis import triton_spectrum, triton_sums
    if not HAS_TRITON:
        yield
        return
    slots = [(triton_sums, '_state_sums_kernel', 'state_sums'),
             (triton_spectrum, '_spectrum_sums_kernel', 'spectrum_sums')]
    kernels = [getattr(owner, attribute) for owner, attribute, _ in slots]
    for owner, attribute, name in slots:
        setattr(owner, attribute, LaunchRecorder(name))
    try:
        with triton_sums.KERNEL.forced(), triton_spectrum.KERNEL.forced():
            yield
    finally:
        for (owner, attribute, _), kernel in zip(slots, kernels):
            setattr(owner, attribute, kernel)


def counting_kernels(kernels: Any) -> Any:
    """``kernels`` (a ``TritonStepKernels``) with its Triton kernels replaced by
    :class:`LaunchRecorder` stand-ins: what a CUDA run launches, counted
    (``count_step_kernels.py``) or timed for its host-side cost (``bench_step_resnet.py
    --stand-in-kernels``) on the CPU."""
    for owner, attribute, name in kernels.launch_slots():
        setattr(owner, attribute, LaunchRecorder(name))
    return kernels
