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

``--fused on|off|both|all`` times the backbones with the fused residual step (``fused=True``:
its Triton kernels on CUDA, its PyTorch expression on the CPU), the reference step
(``fused=False``, the default) or both, as rows ``NAME`` and ``NAME fused``; ``all`` adds the
fused step with the blocks' last BN run as a module instead of folded into the step
(``NAME fused, BN unfolded``: the step then keeps f), and ``every`` adds to those the fused
step on its PyTorch passes in place of the Triton kernels (``NAME fused, PyTorch passes``: on
CUDA the fold's memory without Triton's launches; on the CPU the fused rows are those passes
already); the ratios are to the reference
ResNet-50. ``--amp fp16|bf16`` runs the forward pass under autocast (fp16 with a gradient
scaler); ``--channels-last`` puts the models and the batch in the channels-last memory format.

``--stand-in-kernels`` (CPU) runs the fused rows on the Triton kernel set with stand-ins that
launch nothing (those of ``count_step_kernels.py``): at a small width their time is the
host-side cost of the fused step as a GPU runs it (its autograd Functions, the adaptor's module
call, the launches' arguments; Triton's own launcher excepted), where the PyTorch kernel set the
CPU otherwise runs makes several operator calls per pass. The stand-ins compute nothing: only
the time of such a run means anything.

``--se-units`` adds the row ``SE-ResNet-50, units called``: the reference step with each SE
adaptor calling its two 1×1 convolution units on the pooled (B, C, 1, 1) map, where the plain
units otherwise compute the same Δ as two matrix products
(:func:`~mmstiff.models.steps.se.se_excitation`).

``--compile`` wraps every model in ``torch.compile`` (what MMEngine's ``compile=True`` does to
a model) and compares the compiled models; the first warm-up step of each compiles it, untimed.
Compiled, an adaptor's pooling, gating and residual sum can be fused into few kernels, where
eager mode launches each of them separately. With ``--fused`` the fused rows are the fused
step's PyTorch passes (the blocks' last BN folded), compiled with the model into the compiler's
own kernels.

Usage (CPU defaults finish in a couple of minutes on 2 cores; compiled, a few more):
    python tools/benchmark/bench_step_resnet.py
    python tools/benchmark/bench_step_resnet.py --compile
    python tools/benchmark/bench_step_resnet.py --fused both
    python tools/benchmark/bench_step_resnet.py --device cuda --batch-size 64 --img-size 224 \
        --fused both --amp bf16 --channels-last
    python tools/benchmark/bench_step_resnet.py --fused both --base-channels 2 --batch-size 2 \
        --threads 1   # the host-side cost of a step: negligible arithmetic
"""
import argparse

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
import torch.nn as nn

from mmstiff.apis.benchmark import AMP_DTYPES, compare_models, counting_kernels
from mmstiff.apis.cli import add_compile_argument, check_compile_warmup
from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import SEAdaptor, forced_step_kernels
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.models.steps.fused.triton_step import TritonStepKernels

VARIANTS = {
    'ResNet-50': None,
    'SE-ResNet-50': dict(type='mmstiff.SEAdaptor'),
    'StepNet-ResNet-50': dict(type='mmstiff.StepNetAdaptor'),
}
BASELINE = 'ResNet-50'
#: ``--fused``: the backbones' ``fused`` values timed ('unfolded': True with the blocks' last
#: BN run as a module, not folded into the step)
FUSED_CHOICES = {
    'off': (False, ),
    'on': (True, ),
    'both': (False, True),
    'all': (False, True, 'unfolded'),
    'every': (False, True, 'unfolded', 'passes'),
}
#: the row name's suffix of each ``fused`` value
ROW_SUFFIXES = {
    False: '',
    True: ' fused',
    'unfolded': ' fused, BN unfolded',
    'passes': ' fused, PyTorch passes'
}


class Classifier(nn.Module):
    """Backbone, global average pooling and a linear head: a full training graph."""

    def __init__(self, adaptor, num_classes=1000, fused=False, base_channels=64):
        super().__init__()
        unfolded = fused == 'unfolded'
        self.backbone = StepResNet(50, adaptor=adaptor, fused=True if unfolded else fused,
                                   base_channels=base_channels, stem_channels=base_channels)
        if unfolded:
            for block in self.backbone.modules():
                if hasattr(type(block), 'fold_norm'):
                    block.fold_norm = False
        self.head = nn.Linear(self.backbone.feat_dim, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1].mean((2, 3)))


class UnitSigmoid(nn.Sigmoid):
    """``nn.Sigmoid`` under a type of its own: an SE adaptor whose excitation unit has it is
    not plain (:func:`~mmstiff.models.steps.se.plain_units`) and calls its units."""


def with_units_called(model):
    """``model`` whose SE adaptors compute Δ by calling their units (``--se-units``)."""
    for module in model.modules():
        if isinstance(module, SEAdaptor):
            module.conv2.activate = UnitSigmoid()
    return model


class OnKernels(nn.Module):
    """``model`` whose fused steps run on ``kernels`` (forward, and through the autograd
    Functions that keep them, backward): stand-ins (``--stand-in-kernels``) or PyTorch's
    passes (the ``passes`` rows)."""

    def __init__(self, model, kernels):
        super().__init__()
        self.model, self.kernels = model, kernels

    def forward(self, x):
        with forced_step_kernels(self.kernels, self.model):
            return self.model(x)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=64)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--iters', type=int, default=2, help='train steps per timing')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps per model')
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    add_width_argument(parser)
    parser.add_argument(
        '--fused', choices=sorted(FUSED_CHOICES), default='off',
        help="the fused residual step ('on'), the reference ('off', default), "
        "both, as rows 'NAME' and 'NAME fused', all: both and the fused step with the "
        "blocks' last BN not folded into it ('NAME fused, BN unfolded'), or every: all and "
        "the fused step on its PyTorch passes ('NAME fused, PyTorch passes')")
    parser.add_argument(
        '--stand-in-kernels', action='store_true',
        help='CPU: run the fused rows on the Triton kernel set with stand-ins that launch '
        "nothing (the host-side cost of the GPU's fused step; the models compute nothing)")
    parser.add_argument(
        '--se-units', action='store_true',
        help="add the row 'SE-ResNet-50, units called': the reference SE step calling its "
        '1x1 convolution units instead of the equal matrix products')
    add_precision_arguments(parser)
    add_compile_argument(parser)
    args = check_compile_warmup(parser, parser.parse_args(argv))
    if args.stand_in_kernels and (args.device != 'cpu' or args.fused == 'off' or args.compile):
        parser.error('--stand-in-kernels is supported with --device cpu, eager, and --fused '
                     f'on, both, all or every; got --device {args.device} --fused {args.fused}' +
                     (' --compile' if args.compile else ''))
    if args.base_channels < 1:
        parser.error(f'--base-channels {args.base_channels} is not supported; expected a '
                     'positive integer')
    return args


def add_width_argument(parser):
    """``--base-channels``: ResNet-50's width (64; at 2 the arithmetic is negligible and a
    step's time is its host-side cost: the Python and dispatcher work per operator)."""
    parser.add_argument(
        '--base-channels', type=int, default=64,
        help="ResNet-50's base width (default 64; a few channels time the "
        'host-side cost of a step)')


def add_precision_arguments(parser):
    """``--amp fp16|bf16`` and ``--channels-last``."""
    parser.add_argument('--amp', choices=sorted(AMP_DTYPES), default=None,
                        help='autocast the forward pass to this dtype (fp16: with a GradScaler)')
    parser.add_argument('--channels-last', action='store_true',
                        help='models and batch in the channels-last memory format')


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
    models = model_builders(args)
    baseline = BASELINE if args.fused != 'on' else f'{BASELINE} fused'
    compare_models(models, baseline, batch, args, device, settings_line(args),
                   name_width=max(26, 2 + max(map(len, models))))


def model_builders(args):
    """``{row name: () -> Classifier}`` of every variant for each ``--fused`` choice (the fused
    ones in an :class:`OnKernels` with ``--stand-in-kernels``, the ``passes`` ones always)."""
    models = {}
    for name, adaptor in VARIANTS.items():
        for fused in FUSED_CHOICES[args.fused]:
            label = name + ROW_SUFFIXES[fused]
            models[label] = lambda adaptor=adaptor, fused=fused: _build(adaptor, fused, args)
    if getattr(args, 'se_units', False):
        se = VARIANTS['SE-ResNet-50']
        models['SE-ResNet-50, units called'] = lambda: with_units_called(_build(se, False, args))
    return models


def _build(adaptor, fused, args):
    if fused == 'passes':
        return OnKernels(
            Classifier(adaptor, fused=True, base_channels=args.base_channels), TorchStepKernels)
    model = Classifier(adaptor, fused=fused, base_channels=args.base_channels)
    if fused is False or not getattr(args, 'stand_in_kernels', False):
        return model
    return OnKernels(model, counting_kernels(TritonStepKernels()))


def settings_line(args):
    """The settings of a run as its first output line names them."""
    settings = f'batch={args.batch_size} img={args.img_size}'
    settings += f' base_channels={args.base_channels}' if args.base_channels != 64 else ''
    settings += f' amp={args.amp}' if args.amp else ''
    settings += ' fused-kernels=stand-ins' if getattr(args, 'stand_in_kernels', False) else ''
    return settings + (' channels_last' if args.channels_last else '')


if __name__ == '__main__':
    run_tool(main)
