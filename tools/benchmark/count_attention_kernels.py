"""Operator and kernel counts of one DeiT-S attention layer: AttnScale and FeatScale as layers
of their own against folded into the output projection.

For StepViT DeiT-S with no switch, with AttnScale, with FeatScale and with both, each built with
``fused=False`` (``layers``) and ``fused='auto'`` (``folded``), ``torch.profiler`` counts, in
train mode (batch 8 at 224²), for the attention of layer 6 (the branch from ``LN1(x)`` to the
MSA output):

* ``fwd ops`` / ``bwd ops``: the top-level aten calls of its forward and backward pass;
* ``fwd/bwd kernels``: of those, the calls that launch a kernel on a GPU (not allocations,
  views or host-side queries);
* ``fwd/bwd full-size``: of those, the calls with an input of at least B·N·C elements (the
  tokens): the passes over the tokens, the attention and the two projections included (the
  weight-sized kernels of the fold, C × C, fall below this line while B·N > C, as at the
  default batch of 8: 1576 tokens);
* ``cuda kernels`` (``--device cuda``): the CUDA kernels launched, forward / backward.

Usage:
    python tools/benchmark/count_attention_kernels.py [--device cpu|cuda] [--batch-size 8]
"""
from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
from count_step_kernels import count, count_arguments

from mmstiff.models.backbones import StepViT

VARIANTS = {
    'DeiT-S, no switch': dict(),
    '+AttnScale': dict(attn_scale_layers='all'),
    '+FeatScale': dict(feat_scale_layers='all'),
    '+AttnScale +FeatScale': dict(attn_scale_layers='all', feat_scale_layers='all'),
}
#: the profiled layer
LAYER = 6


def measure(switches, fused, args, device):
    """``(forward counts, backward counts)`` of one attention layer (see :func:`count`)."""
    torch.manual_seed(0)
    net = StepViT(arch='deit-small', img_size=args.img_size, fused=fused, **switches)
    attn = net.layers[LAYER].attn.to(device).train()
    tokens = (args.img_size // 16)**2 + 1
    x = torch.randn(args.batch_size, tokens, net.embed_dims, device=device, requires_grad=True)
    state = {}

    def forward():
        state['out'] = attn(x)

    def backward():
        state['out'].backward(torch.ones_like(state['out']))

    forward()  # warm-up
    backward()
    return count(forward, device, full_size=x.numel()), count(backward, device, full_size=x.numel())


def main(argv=None):
    args, device = count_arguments(argv, __doc__.splitlines()[0], batch_size=8)
    print(f'device={device} batch={args.batch_size} img={args.img_size} attention of layer '
          f'{LAYER} (top-level aten calls; train mode)')
    header = (f'{"model":<24}{"scales":<8}{"fwd ops":>9}{"bwd ops":>9}{"fwd kernels":>13}'
              f'{"bwd kernels":>13}{"fwd full-size":>15}{"bwd full-size":>15}'
              f'{"cuda kernels":>14}')
    print(header)
    print('-' * len(header))
    for name, switches in VARIANTS.items():
        for fused in ((False, ) if not switches else (False, 'auto')):
            fwd, bwd = measure(switches, fused, args, device)
            scales = '' if not switches else 'folded' if fused else 'layers'
            cuda = 'n/a' if fwd[3] is None else f'{fwd[3]}/{bwd[3]}'
            print(f'{name:<24}{scales:<8}{fwd[0]:>9}{bwd[0]:>9}{fwd[1]:>13}{bwd[1]:>13}'
                  f'{fwd[4]:>15}{bwd[4]:>15}{cuda:>14}')


if __name__ == '__main__':
    run_tool(main)
