"""Train-step time and peak memory of steps written by ``mmstiff.WithSteps`` against the
hand-built step, as ratios to each plain backbone, in one run.

Three pairs, each a plain backbone and the same backbone with a StepNet adaptor on every
residual step: mmpretrain's ConvNeXt-atto and MobileNetV2 written by ``WithSteps``, and
ResNet-18 against mmstiff's hand-built ``StepResNet`` (depth 18), the reference. Each repeat
times every model once, in an order rotated by one per repeat (A/B interleaved); a pair's ratio
is the median over repeats of its StepNet model's time over its plain model's time in the same
repeat. The last column is each pair's ratio minus the reference pair's: the written step's
cost beyond the hand-built step's. Peak memory of one train step as in
``bench_step_resnet.py`` (the profiler's live bytes on the CPU).

Usage (a few minutes on 2 CPU cores):
    python tools/benchmark/bench_with_steps.py
    python tools/benchmark/bench_with_steps.py --device cuda --batch-size 64
"""
import argparse

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import statistics

import torch
import torch.nn as nn

from mmstiff.apis.benchmark import interleaved_times, peak_step_memory, prepare_runs

STEPNET = dict(type='mmstiff.StepNetAdaptor')
#: pair -> (plain backbone config, StepNet backbone config)
PAIRS = {
    'ConvNeXt-atto (WithSteps)': (dict(type='mmpretrain.ConvNeXt', arch='atto'),
                                  dict(type='mmstiff.WithSteps',
                                       backbone=dict(type='mmpretrain.ConvNeXt',
                                                     arch='atto'), adaptor=STEPNET)),
    'MobileNetV2 (WithSteps)':
    (dict(type='mmpretrain.MobileNetV2'),
     dict(type='mmstiff.WithSteps', backbone=dict(type='mmpretrain.MobileNetV2'), adaptor=STEPNET)),
    'ResNet-18 (StepResNet)': (dict(type='mmpretrain.ResNet', depth=18),
                               dict(type='mmstiff.StepResNet', depth=18, adaptor=STEPNET)),
}
REFERENCE = 'ResNet-18 (StepResNet)'


class Classifier(nn.Module):
    """Backbone, global average pooling of its last output and a linear head."""

    def __init__(self, backbone, size):
        super().__init__()
        from mmstiff.registry import MODELS
        cfg = dict(backbone)
        if cfg['type'] == 'mmstiff.WithSteps':
            cfg['probe_input'] = (1, 3, size, size)
        self.backbone = MODELS.build(cfg)
        self.backbone.eval()  # the width from one image: no batch statistics
        with torch.no_grad():
            width = self._features(torch.zeros(1, 3, size, size)).shape[1]
        self.head = nn.Linear(width, 1000)

    def _features(self, x):
        out = self.backbone(x)[-1]
        return out.mean((2, 3)) if out.dim() == 4 else out

    def forward(self, x):
        return self.head(self._features(x))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--repeats', type=int, default=7)
    parser.add_argument('--iters', type=int, default=2, help='train steps per timing')
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int, default=None)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    args.compile = False
    if args.threads:
        torch.set_num_threads(args.threads)
    import mmstiff.models  # noqa: F401  (registers WithSteps and StepResNet)
    device = torch.device(args.device)
    torch.manual_seed(0)
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         device=device), torch.randint(0, 1000, (args.batch_size, ), device=device))
    models = {}
    for pair, (plain, stepped) in PAIRS.items():
        models[f'{pair}: plain'] = lambda cfg=plain: Classifier(cfg, args.img_size)
        models[f'{pair}: StepNet'] = lambda cfg=stepped: Classifier(cfg, args.img_size)
    runs, batch, precision = prepare_runs(models, batch, args, device)
    times = interleaved_times(runs, batch, args, device, precision)
    memory = {name: peak_step_memory(*runs[name], batch, device, precision) for name in runs}
    print(f'device={device} threads={torch.get_num_threads()} batch={args.batch_size} '
          f'img={args.img_size} repeats={args.repeats} iters/timing={args.iters} eager')
    header = (f'{"pair":<28}{"plain (ms)":>12}{"StepNet (ms)":>14}{"time ratio":>12}'
              f'{"- reference":>13}{"mem ratio":>11}{"- reference":>13}')
    print(header)
    print('-' * len(header))
    ratios, mem = {}, {}
    for pair in PAIRS:
        plain, stepped = times[f'{pair}: plain'], times[f'{pair}: StepNet']
        ratios[pair] = statistics.median(s / p for s, p in zip(stepped, plain))
        mem[pair] = memory[f'{pair}: StepNet'] / memory[f'{pair}: plain']
    for pair in PAIRS:
        plain, stepped = times[f'{pair}: plain'], times[f'{pair}: StepNet']
        print(f'{pair:<28}{statistics.median(plain) * 1e3:>12.1f}'
              f'{statistics.median(stepped) * 1e3:>14.1f}{ratios[pair]:>12.3f}'
              f'{ratios[pair] - ratios[REFERENCE]:>+13.3f}{mem[pair]:>11.3f}'
              f'{mem[pair] - mem[REFERENCE]:>+13.3f}')


if __name__ == '__main__':
    run_tool(main)
