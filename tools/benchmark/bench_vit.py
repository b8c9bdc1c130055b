"""Train-step and inference throughput of DeiT-S: mmpretrain's, StepViT, +AttnScale, +FeatScale.

One run prints side-by-side ratios to mmpretrain's ``VisionTransformer(arch='deit-small')``:
StepViT with no switch (target: no loss), with AttnScale on every layer, with FeatScale on
every layer (target: at most 2 % loss each) and with both. All models hold the same weights.
Each repeat times every model once, in a rotated order (A/B interleaved, so drifts of the
machine hit all models alike); the table reports the median over repeats of each model's time
and of its ratio to mmpretrain's model in the same repeat.

* train step: forward, cross-entropy on a linear head over the class token, backward, SGD step;
* inference: forward under ``torch.inference_mode`` in eval mode;
* train peak: one train step's peak memory above what was allocated before it (CUDA: the
  allocator's peak; CPU: the profiler's live tensor bytes; not for compiled CPU models).

Clocks: ``--clock wall`` (default) measures elapsed time. On a machine shared with other jobs,
``--threads 1 --clock cpu`` measures the CPU time the process itself used
(``time.process_time``), which other processes competing for the cores barely disturb.

``--scope attention`` times the attention of one layer alone (layer 6, on random tokens of the
model's shape): forward and backward for the train column, forward for inference; what the
switches cost the layer, without the rest of the network's time around it.

``--fused off`` builds the switched models with ``fused=False`` (AttnScale and FeatScale as
layers of their own, not folded into the output projection); ``--fused both`` times both, the
unfolded rows marked ", layers".

``--compile`` wraps every model in ``torch.compile`` (what MMEngine's ``compile=True`` does to a
model) and times the compiled models; the untimed warm-up compiles each of them, for training
and for inference. ``--variants`` picks the models compared with the baseline (default: all).

Usage (the CPU defaults take a few minutes on 2 cores):
    python tools/benchmark/bench_vit.py
    python tools/benchmark/bench_vit.py --batch-size 4 --img-size 160 --repeats 7
    python tools/benchmark/bench_vit.py --threads 1 --clock cpu      # on a busy machine
    python tools/benchmark/bench_vit.py --device cuda --batch-size 128 --iters 10
    python tools/benchmark/bench_vit.py --compile --variants attnscale featscale
    python tools/benchmark/bench_vit.py --fused both --variants attnscale featscale
    python tools/benchmark/bench_vit.py --scope attention --fused both --batch-size 32
"""
import argparse
import functools
import statistics
import time

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import numpy as np
import torch
import torch.nn as nn

from mmstiff.apis.benchmark import (compile_model, peak_memory, peak_step_memory, synchronize,
                                    train_step)
from mmstiff.apis.cli import add_compile_argument, check_compile_mode

BASELINE = 'mmpretrain DeiT-S'
VARIANTS = {
    BASELINE: None,
    'StepViT, no switch': dict(),
    '+AttnScale': dict(attn_scale_layers='all'),
    '+FeatScale': dict(feat_scale_layers='all'),
    '+AttnScale +FeatScale': dict(attn_scale_layers='all', feat_scale_layers='all'),
}
#: ``--variants`` choices: the models compared with the baseline.
VARIANT_KEYS = {
    'stepvit': 'StepViT, no switch',
    'attnscale': '+AttnScale',
    'featscale': '+FeatScale',
    'both': '+AttnScale +FeatScale',
}


class Classifier(nn.Module):
    """Backbone and a linear head on the class token: a full training graph."""

    def __init__(self, backbone, num_classes=1000):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.embed_dims, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1])


def python_drop_path_rates(model):
    """``model`` with its drop-path rates as Python floats, as StepViT keeps them: mmpretrain
    keeps NumPy floats, on which ``torch.compile`` cannot branch (a graph break in every
    layer, which would time a mostly eager baseline against compiled StepViTs; and under
    ``inference_mode`` the compiler then fails a guard it has just built)."""
    for module in model.modules():
        rate = getattr(module, 'drop_prob', None)
        if isinstance(rate, np.floating):
            module.drop_prob = float(rate)
    return model


#: ``--fused`` choices: the ``fused`` values each variant is built with ('auto': AttnScale and
#: FeatScale folded into the output projection; False: applied as layers of their own)
FUSED = {'on': ('auto', ), 'off': (False, ), 'both': ('auto', False)}


def build_models(img_size, device, names=None, fused=('auto', )):
    """The baseline and the models ``names`` (None: all of :data:`VARIANTS`), same weights,
    each built once per value of ``fused`` (a second value's rows are marked)."""
    from mmpretrain.models.backbones import VisionTransformer

    from mmstiff.models.backbones import StepViT

    torch.manual_seed(0)
    reference = Classifier(
        python_drop_path_rates(VisionTransformer(arch='deit-small', img_size=img_size)))
    models = {}
    for name, switches in VARIANTS.items():
        if names is not None and name != BASELINE and name not in names:
            continue
        if switches is None:
            models[name] = reference.to(device)
            continue
        for choice in fused if switches else fused[:1]:  # no switch: nothing to fold
            model = Classifier(
                StepViT(arch='deit-small', img_size=img_size, fused=choice, **switches))
            model.load_state_dict(reference.state_dict(), strict=False)
            models[name if choice == fused[0] else f'{name}, layers'] = model.to(device)
    return models


CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}


def time_train(model, images, labels, iters, device, clock=time.perf_counter):
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    synchronize(device)
    start = clock()
    for _ in range(iters):
        train_step(model, optimizer, images, labels)
    synchronize(device)
    return (clock() - start) / iters


def time_inference(model, images, iters, device, clock=time.perf_counter):
    model.eval()
    with torch.inference_mode():
        synchronize(device)
        start = clock()
        for _ in range(iters):
            model(images)
        synchronize(device)
    return (clock() - start) / iters


#: the layer whose attention ``--scope attention`` times
LAYER = 6


def attention_of(model):
    """The attention of layer :data:`LAYER` of a :class:`Classifier` (``--scope attention``)."""
    return model.backbone.layers[LAYER].attn


def attention_pass(attn, tokens, grad):
    """One forward and backward pass of an attention layer on ``tokens`` (B, N, C)."""
    attn.zero_grad(set_to_none=True)
    tokens.grad = None
    attn(tokens).backward(grad)


def time_attention(attn, tokens, grad, iters, device, clock=time.perf_counter):
    attn.train()
    synchronize(device)
    start = clock()
    for _ in range(iters):
        attention_pass(attn, tokens, grad)
    synchronize(device)
    return (clock() - start) / iters


def attention_memory(attn, tokens, grad, device):
    """Peak bytes of one forward and backward pass of ``attn`` above what was allocated
    before it."""
    attn.train()
    attention_pass(attn, tokens, grad)
    return peak_memory(lambda: attention_pass(attn, tokens, grad), device)


def train_memory(model, images, labels, device):
    """Peak bytes of one train step above what was allocated before it (the optimizer's state
    made by an untimed step first; see :func:`~mmstiff.apis.benchmark.peak_step_memory`)."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    train_step(model, optimizer, images, labels)
    return peak_step_memory(model, optimizer, (images, labels), device)


def measure(models, timer, repeats):
    """Median time and median per-repeat ratio to the baseline, models rotated each repeat."""
    names = list(models)
    times = {name: [] for name in names}
    ratios = {name: [] for name in names}
    for repeat in range(repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        this = {name: timer(models[name]) for name in order}
        for name in names:
            times[name].append(this[name])
            ratios[name].append(this[name] / this[BASELINE])
    return {
        name: (statistics.median(times[name]), statistics.median(ratios[name]))
        for name in names
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--iters', type=int, default=2, help='steps per timing')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch CPU threads (default: torch\'s own choice)')
    parser.add_argument('--clock', choices=sorted(CLOCKS), default='wall',
                        help='wall: elapsed time; cpu: CPU time of this process')
    add_compile_argument(parser)
    parser.add_argument(
        '--fused', choices=sorted(FUSED), default='on',
        help='on: AttnScale and FeatScale folded into the output projection '
        "(fused='auto'); off: as layers of their own (fused=False); both: one "
        'row each (", layers": off)')
    parser.add_argument(
        '--scope', choices=('model', 'attention'), default='model',
        help='model: the classifier\'s train step and inference (default); '
        f'attention: the attention of layer {LAYER} alone, forward and '
        'backward (train) and forward (inference), on tokens')
    parser.add_argument('--variants', nargs='+', choices=sorted(VARIANT_KEYS), default=None,
                        help='models compared with the baseline (default: all)')
    args = parser.parse_args()
    check_compile_mode(parser, args)
    for field in ('batch_size', 'img_size', 'repeats', 'iters'):
        if getattr(args, field) < 1:
            parser.error(f'--{field.replace("_", "-")}={getattr(args, field)} must be >= 1')
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.clock == 'cpu' and device.type != 'cpu':
        parser.error(f'--clock cpu measures host CPU time; it cannot time --device {args.device}')
    clock = CLOCKS[args.clock]

    names = None if args.variants is None else {VARIANT_KEYS[key] for key in args.variants}
    models = build_models(args.img_size, device, names, FUSED[args.fused])
    if args.scope == 'attention':
        models = {name: attention_of(model) for name, model in models.items()}
    if args.compile:
        models = {name: compile_model(model, args.compile_mode) for name, model in models.items()}
    torch.manual_seed(1)
    if args.scope == 'attention':
        embed_dims = next(iter(models.values())).embed_dims
        shape = (args.batch_size, (args.img_size // 16)**2 + 1, embed_dims)
        images = torch.randn(*shape, device=device, requires_grad=True)
        grad = torch.randn(*shape, device=device)
        train_run = functools.partial(time_attention, tokens=images, grad=grad)
        memory_of = functools.partial(attention_memory, tokens=images, grad=grad)
    else:
        images = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device)
        labels = torch.randint(0, 1000, (args.batch_size, ), device=device)
        train_run = functools.partial(time_train, images=images, labels=labels)
        memory_of = functools.partial(train_memory, images=images, labels=labels)
    for model in models.values():  # warm-up: allocator, kernels, autograd graph (compiling)
        train_run(model, iters=1, device=device)
        time_inference(model, images, 1, device)

    train = measure(models, lambda m: train_run(m, iters=args.iters, device=device, clock=clock),
                    args.repeats)
    infer = measure(models, lambda m: time_inference(m, images, args.iters, device, clock),
                    args.repeats)

    # the CPU's peak comes from the profiler's per-op allocations, which a compiled graph
    # does not report op by op
    measured = not (args.compile and device.type == 'cpu')
    memory = {
        name: memory_of(model, device=device) if measured else None
        for name, model in models.items()
    }
    compiled = f', compiled ({args.compile_mode})' if args.compile else ''
    scope = f', attention of layer {LAYER}' if args.scope == 'attention' else ''
    print(f'DeiT-S{scope}{compiled}, {args.device}, --fused {args.fused}, '
          f'{torch.get_num_threads()} threads, {args.clock} clock, '
          f'batch {args.batch_size}, {args.img_size}x{args.img_size}, '
          f'{args.repeats} repeats x {args.iters} iters, '
          'medians; ratio = time / time of mmpretrain DeiT-S in the same repeat '
          '(> 1: slower); train peak: one step\'s peak memory above its start (' +
          ('cuda max_memory_allocated' if device.type == 'cuda' else
           'profiler live bytes' if measured else 'not measured for compiled CPU models') + ')')
    header = (f'{"model":<30} {"train ms/step":>14} {"train img/s":>12} {"train ratio":>12} '
              f'{"infer ms/batch":>15} {"infer img/s":>12} {"infer ratio":>12} '
              f'{"train peak MiB":>15} {"peak ratio":>11}')
    print(header)
    print('-' * len(header))
    for name in models:
        t_time, t_ratio = train[name]
        i_time, i_ratio = infer[name]
        peak, peak_ratio = ('n/a', 'n/a') if memory[name] is None else (
            f'{memory[name] / 2**20:.1f}', f'{memory[name] / memory[BASELINE]:.3f}')
        print(f'{name:<30} {t_time * 1e3:>14.1f} {args.batch_size / t_time:>12.2f} '
              f'{t_ratio:>12.3f} {i_time * 1e3:>15.1f} {args.batch_size / i_time:>12.2f} '
              f'{i_ratio:>12.3f} {peak:>15} {peak_ratio:>11}')


if __name__ == '__main__':
    run_tool(main)
