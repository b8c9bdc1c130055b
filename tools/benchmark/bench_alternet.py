"""Train-step time and peak memory of AlterNet-50 against ResNet-50.

Three models, each with global average pooling and a linear head, timed like
``bench_step_resnet.py`` (A/B interleaved in a rotated order, median over repeats of each
model's time and of its ratio to ResNet-50 in the same repeat; the same peak-memory measure):

* ``ResNet-50``: mmpretrain's ResNet-50 (post-activation, stages (3, 4, 6, 3); its
  ``ResNet_CIFAR`` with ``--stem cifar``);
* ``pre-act ResNet-50 (3,4,6,4)``: AlterNet-50 with no MSA block, i.e. the pre-activation
  ResNet that AlterNet is built from (one block more in stage 4);
* ``AlterNet-50``: MSA blocks (0, 1, 3, 2), heads (3, 6, 12, 24), window 7 (ImageNet stem) or
  4 (``--stem cifar``).

Usage:
    python tools/benchmark/bench_alternet.py                      # CPU: a few minutes
    python tools/benchmark/bench_alternet.py --device cuda --batch-size 64 --img-size 224
"""
import argparse

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch
import torch.nn as nn
from mmpretrain.models.backbones import ResNet, ResNet_CIFAR

from mmstiff.apis.benchmark import compare_models
from mmstiff.apis.cli import add_compile_argument, check_compile_warmup
from mmstiff.models.backbones import AlterNet

BASELINE = 'ResNet-50'


def build_backbones(stem):
    window = 7 if stem == 'imagenet' else 4
    resnet = ResNet if stem == 'imagenet' else ResNet_CIFAR
    return {
        BASELINE:
        lambda: resnet(depth=50),
        'pre-act ResNet-50 (3,4,6,4)':
        lambda: AlterNet(50, stem=stem, window_size=window, num_msa_blocks=(0, 0, 0, 0)),
        'AlterNet-50':
        lambda: AlterNet(50, stem=stem, window_size=window),
    }


class Classifier(nn.Module):
    """Backbone, global average pooling and a linear head: a full training graph."""

    def __init__(self, backbone, num_classes):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(2048, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1].mean((2, 3)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda'")
    parser.add_argument(
        '--stem', default='imagenet', choices=('imagenet', 'cifar'),
        help="AlterNet's stem; 'cifar' uses window 4 (the paper's CIFAR "
        'setting) and 32x32 inputs by default')
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--img-size', type=int, default=None,
                        help='default: 224 (imagenet stem), 32 (cifar stem)')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--iters', type=int, default=2, help='train steps per timing')
    parser.add_argument('--warmup', type=int, default=1, help='untimed steps per model')
    parser.add_argument('--threads', type=int, default=None, help='torch CPU threads')
    add_compile_argument(parser)
    return check_compile_warmup(parser, parser.parse_args(argv))


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda was given but CUDA is not available')
    for field in ('batch_size', 'repeats', 'iters'):
        if getattr(args, field) < 1:
            raise SystemExit(f'--{field.replace("_", "-")} {getattr(args, field)} is not '
                             'supported; expected a positive integer')
    if args.threads:
        torch.set_num_threads(args.threads)
    img_size = args.img_size or (224 if args.stem == 'imagenet' else 32)
    num_classes = 1000 if args.stem == 'imagenet' else 100
    torch.manual_seed(0)
    batch = (torch.randn(args.batch_size, 3, img_size, img_size, device=device),
             torch.randint(0, num_classes, (args.batch_size, ), device=device))
    models = {
        name: (lambda build=build: Classifier(build(), num_classes))
        for name, build in build_backbones(args.stem).items()
    }
    compare_models(models, BASELINE, batch, args, device,
                   f'stem={args.stem} batch={args.batch_size} img={img_size}', name_width=30)


if __name__ == '__main__':
    run_tool(main)
