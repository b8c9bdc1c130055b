"""Operator and kernel counts of one residual step of ResNet-50: the reference against the fused.

For plain, SE and StepNet ResNet-50 and each step (``reference``: ``fused=False``; ``fused``:
the fused step), ``torch.profiler`` counts, in train mode:

* ``fwd ops`` / ``bwd ops``: the top-level aten calls (those not made inside another aten call)
  of one bottleneck's forward pass (``layer3.1``, 1024 channels, identity shortcut) and of its
  backward pass; the branch's three convolutions and norms are in every row alike;
* ``fwd/bwd kernels``: of those, the calls that launch a kernel on a GPU (not allocations,
  views or host-side type queries: :data:`NO_KERNEL`), plus the Triton launches;
* ``triton``: the launches of the fused step's Triton kernels (forward / backward);
* ``net fwd ops``: the top-level aten calls of the whole backbone's forward pass;
* ``hook kernels``: the kernels a ``StiffnessHook`` adds to the block's forward on an
  iteration it records (its NSI reduction), and in parentheses those of them that read a
  full-size tensor (the block's states): the fused step writes the NSI's sums in its own pass;
  after the reference step the hook's Triton kernel reads both states once (on the CPU a
  stand-in counts its launch, as for the fused step's kernels);
* ``net hook kernels``: the same for the whole backbone's recorded forward pass (16 blocks),
  plus the hook's ``compact`` after it, which takes the NSI norms of all the steps whose sums
  wait, one stacked computation per shape;
* ``net freq kernels``: the kernels a ``FrequencyHook`` adds to the whole backbone's recorded
  forward pass and its ``compact`` (17 states: the input and each block's output; on the GPU one
  Triton kernel per state, counted on the CPU with a stand-in).

The values a hook reduces when it writes (once per logging interval, for all the iterations
recorded since) are not counted.

On the CPU the fused rows count the Triton kernel set with stand-in kernels that only record
their launch (they compute nothing), so the counts are those of a CUDA run; ``--device cuda``
runs the real kernels and adds the CUDA kernels launched (``cuda kernels``, forward / backward).

Usage:
    python tools/benchmark/count_step_kernels.py [--device cpu|cuda] [--batch-size 2]
"""
import argparse
import contextlib
import math

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch

from mmstiff.apis.benchmark import counting_analysis_kernels, counting_kernels
from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import forced_step_kernels
from mmstiff.models.steps.fused.triton_step import TritonStepKernels

VARIANTS = {
    'ResNet-50': None,
    'SE-ResNet-50': dict(type='mmstiff.SEAdaptor'),
    'StepNet-ResNet-50': dict(type='mmstiff.StepNetAdaptor'),
}
#: the profiled block: an identity-shortcut bottleneck of the third stage
BLOCK = ('layer3', 1)
#: top-level aten calls that launch no kernel: allocations, views, host-side queries
NO_KERNEL = frozenset(f'aten::{name}'
                      for name in ('empty', 'empty_like', 'empty_strided', 'view', 'reshape',
                                   '_reshape_alias', 'expand', 'as_strided', 'unsqueeze', 'squeeze',
                                   'view_as', 'select', 'slice', 'unbind', 'transpose', 'permute',
                                   't', 'detach', 'alias', 'promote_types', 'result_type',
                                   'lift_fresh', 'resolve_conj', 'resolve_neg'))

#: the stand-ins' launches of the Triton kernels that read or write full-size tensors (the
#: states), as against the (B, C) passes
FULL_SIZE_LAUNCHES = frozenset(f'triton::{name}'
                               for name in ('pool', 'step', 'measured_step', 'step_backward',
                                            'moments_backward', 'state_sums', 'spectrum_sums'))


def _is_top_level_aten(event):
    if not event.name.startswith('aten::'):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith('aten::'):
            return False
        parent = parent.cpu_parent
    return True


def count(run, device, full_size=None):
    """``(top-level aten calls, of them those that launch kernels + triton launches, triton
    launches, cuda kernels or None, launching aten calls with an input of ``full_size`` elements
    or more and stand-in launches of :data:`FULL_SIZE_LAUNCHES`)`` of ``run()``."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == 'cuda':
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        run()
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
    events = prof.events()
    top = [e for e in events if _is_top_level_aten(e)]
    aten = [e.name for e in top]
    passes = sum(
        e.name not in NO_KERNEL and any(
            math.prod(shape) >= (full_size or math.inf) for shape in e.input_shapes if shape)
        for e in top)
    triton_launches = sum(e.name.startswith('triton::') for e in events)
    if full_size is not None:
        passes += sum(e.name in FULL_SIZE_LAUNCHES for e in events)
    launching = sum(name not in NO_KERNEL for name in aten) + triton_launches
    kernels = None
    if device.type == 'cuda':
        kernels = sum(e.device_type == torch.autograd.DeviceType.CUDA for e in events)
    return len(aten), launching, triton_launches, kernels, passes


def measure(adaptor, fused, args, device, kernels=None):
    """The counts of one backbone (see the module docstring), its fused steps on ``kernels``
    where given."""
    torch.manual_seed(0)
    net = StepResNet(50, adaptor=adaptor, fused=fused).to(device).train()
    with forced_step_kernels(kernels, net) if kernels else contextlib.nullcontext():
        return _measure(net, args, device)


def _measure(net, args, device):
    stage, index = BLOCK
    block = getattr(net, stage)[index]
    channels = block.conv3.out_channels
    size = args.img_size // 16
    x = torch.randn(args.batch_size, channels, size, size, device=device, requires_grad=True)
    images = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device)
    block(x)  # warm-up (allocator, kernel compilation)
    state = {}

    def forward():
        state['out'] = block(x)

    def backward():
        state['out'].backward(torch.ones_like(state['out']))

    def net_forward():
        net(images)

    hook = StiffnessHook(interval=1, blocks=[str(index)])
    recorders = hook.build_recorders(getattr(net, stage)).values()

    def recorded_forward():
        for recorder in recorders:
            recorder.start()
        block(x)
        for recorder in recorders:
            recorder.stop()

    def net_recorded(hook):
        # a whole recorded forward pass with the hook's recorders, and its compact
        recorders = hook.build_recorders(net)

        def run():
            for recorder in recorders.values():
                recorder.clear()
                recorder.start()
            net(images)
            for recorder in recorders.values():
                recorder.stop()
            hook.compact({role: recorder.outputs for role, recorder in recorders.items()})

        run()  # warm-up (the hooks' cached weight rows and groupings)
        return run

    recorded_forward()  # warm-up
    forward_counts = count(forward, device, full_size=x.numel()), count(backward, device)
    # on the CPU, the hooks' Triton kernels stand in for the launches a CUDA run makes
    with counting_analysis_kernels() if device.type == 'cpu' else contextlib.nullcontext():
        recorded = count(recorded_forward, device, full_size=x.numel())
        net_stiffness = count(net_recorded(StiffnessHook(interval=1)), device)
        net_frequency = count(net_recorded(FrequencyHook(interval=1)), device)
    return (*forward_counts, count(net_forward, device), recorded, net_stiffness, net_frequency)


def count_arguments(argv, description, batch_size):
    """``(args, device)`` of a counting script: ``--device``, ``--batch-size`` (default
    ``batch_size``) and ``--img-size``, checked before anything is built."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--batch-size', type=int, default=batch_size)
    parser.add_argument('--img-size', type=int, default=224)
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error(f'--batch-size={args.batch_size} must be >= 1')
    if args.img_size < 32 or args.img_size % 16:
        parser.error(f'--img-size={args.img_size} must be a multiple of 16, at least 32')
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    return args, device


def main(argv=None):
    args, device = count_arguments(argv, __doc__.splitlines()[0], batch_size=2)
    print(f'device={device} batch={args.batch_size} img={args.img_size} block='
          f'{BLOCK[0]}.{BLOCK[1]} (top-level aten calls; forward / backward)')
    header = (f'{"model":<20}{"step":<11}{"fwd ops":>9}{"bwd ops":>9}{"fwd kernels":>13}'
              f'{"bwd kernels":>13}{"triton":>8}{"cuda kernels":>14}{"net fwd ops":>13}'
              f'{"hook kernels":>19}{"net hook kernels":>18}{"net freq kernels":>18}')
    print(header)
    print('-' * len(header))
    for name, adaptor in VARIANTS.items():
        for fused in (False, True):
            if fused and device.type == 'cpu':
                fwd, bwd, net, rec, net_rec, net_freq = measure(
                    adaptor, True, args, device, counting_kernels(TritonStepKernels()))
            else:
                fwd, bwd, net, rec, net_rec, net_freq = measure(adaptor, fused, args, device)
            launches = f'{fwd[2]}/{bwd[2]}'
            kernels = 'n/a' if fwd[3] is None else f'{fwd[3]}/{bwd[3]}'
            hook = f'{rec[1] - fwd[1]} ({rec[4] - fwd[4]})'
            print(f'{name:<20}{"fused" if fused else "reference":<11}{fwd[0]:>9}{bwd[0]:>9}'
                  f'{fwd[1]:>13}{bwd[1]:>13}{launches:>8}{kernels:>14}{net[0]:>13}{hook:>19}'
                  f'{net_rec[1] - net[1]:>18}{net_freq[1] - net[1]:>18}')


if __name__ == '__main__':
    run_tool(main)
