"""Convert a torchvision ResNet state dict to mmpretrain's ImageClassifier layout.

torchvision's ResNet and mmpretrain's ``ResNet`` backbone use the same parameter names
(``conv1``, ``bn1``, ``layerI.J.convK`` / ``bnK``, ``layerI.J.downsample.{0,1}``); only the
classifier sits elsewhere. So the conversion is:

    conv1.*, bn1.*, layer*.*   ->  backbone.<same name>
    fc.weight, fc.bias         ->  head.fc.weight, head.fc.bias

The result loads into an mmpretrain ``ImageClassifier`` with a ``ResNet`` (or
``mmstiff.StepResNet``) backbone and a ``LinearClsHead``; into ``StepResNet`` only the adaptor
parameters are missing. ``--backbone-only`` writes the bare backbone keys (no prefix, no
``fc``), the layout mmdet's ``init_cfg=dict(type='Pretrained', checkpoint=...)`` expects for
``ResNet`` / ``mmstiff.DetStepResNet``.

Usage:
    python tools/model_converters/torchvision_to_mmpretrain_resnet.py \
        resnet50-0676ba61.pth resnet50_mmpretrain.pth
"""
import argparse
from collections import OrderedDict

import torch

BACKBONE_PREFIXES = ('conv1.', 'bn1.', 'layer1.', 'layer2.', 'layer3.', 'layer4.')


def convert_resnet(state_dict, backbone_only=False):
    """Map torchvision ResNet keys to mmpretrain keys; see the module docstring.

    Raises:
        ValueError: a key that belongs to neither the backbone nor ``fc`` (not a torchvision
            ResNet), naming the key.
    """
    converted = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith(BACKBONE_PREFIXES):
            converted[key if backbone_only else f'backbone.{key}'] = value
        elif key.startswith('fc.'):
            if not backbone_only:
                converted[f'head.{key}'] = value
        else:
            raise ValueError(f'key {key!r} is not part of a torchvision ResNet state dict; '
                             f'expected keys starting with {BACKBONE_PREFIXES} or "fc."')
    return converted


def load_torchvision_state_dict(path):
    """Read a torchvision checkpoint: a bare state dict, or one under 'state_dict'/'model'."""
    checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            return checkpoint[key]
    return checkpoint


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='torchvision ResNet checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint in mmpretrain layout')
    parser.add_argument('--backbone-only', action='store_true',
                        help='write bare backbone keys (for mmdet Pretrained init_cfg)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    state_dict = convert_resnet(load_torchvision_state_dict(args.src), args.backbone_only)
    torch.save(dict(state_dict=state_dict, meta=dict(converted_from=args.src)), args.dst)
    print(f'wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
