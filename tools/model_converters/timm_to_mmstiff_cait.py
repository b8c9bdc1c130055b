"""Convert a timm (or official) CaiT checkpoint to an mmpretrain classifier with mmstiff.CaiT.

``mmstiff.CaiT`` keeps timm's parameter names (``patch_embed.proj``, ``cls_token``,
``pos_embed``, ``blocks.*``, ``blocks_token_only.*``, ``norm``), so the conversion only moves the
keys into mmpretrain's ``ImageClassifier`` layout:

    patch_embed.*, cls_token, pos_embed, blocks*, norm.*  ->  backbone.<same name>
    head.weight, head.bias  ->  head.layers.head.*   (VisionTransformerClsHead, the configs')
                                head.fc.*            (LinearClsHead, with --head linear)

The official checkpoints nest the state dict under ``model`` with a ``module.`` prefix on every
key; both are removed. The result loads into a classifier whose backbone is ``mmstiff.CaiT``
with the same arch, with only the AttnScale / FeatScale parameters missing.
``--backbone-only`` writes the bare backbone keys (for ``init_cfg=dict(type='Pretrained')``).

Only load checkpoints you trust: ``torch.load`` of a pickle can run code.

Usage:
    python tools/model_converters/timm_to_mmstiff_cait.py S24_224.pth cait-s24_mmstiff.pth
"""
import argparse
from collections import OrderedDict

import torch

BACKBONE_PREFIXES = ('patch_embed.', 'blocks.', 'blocks_token_only.', 'norm.')
BACKBONE_KEYS = ('cls_token', 'pos_embed')
#: where each mmpretrain head keeps the classifier's linear layer
HEAD_PREFIXES = {'vit': 'head.layers.head.', 'linear': 'head.fc.'}


def convert_cait(state_dict, backbone_only=False, head='vit'):
    """Map timm CaiT keys to an mmpretrain classifier's keys; see the module docstring.

    Raises:
        ValueError: an unknown ``head``, or a key that belongs to neither the backbone nor the
            head (not a CaiT state dict), naming the key.
    """
    if head not in HEAD_PREFIXES:
        raise ValueError(f'head={head!r} is not supported; expected one of '
                         f'{tuple(HEAD_PREFIXES)}')
    converted = OrderedDict()
    for key, value in state_dict.items():
        name = key[len('module.'):] if key.startswith('module.') else key
        if name in BACKBONE_KEYS or name.startswith(BACKBONE_PREFIXES):
            converted[name if backbone_only else f'backbone.{name}'] = value
        elif name.startswith('head.'):
            if not backbone_only:
                converted[HEAD_PREFIXES[head] + name[len('head.'):]] = value
        else:
            raise ValueError(f'key {key!r} is not part of a CaiT state dict; expected '
                             f'{BACKBONE_KEYS}, keys starting with {BACKBONE_PREFIXES} or '
                             '"head."')
    return converted


def load_timm_state_dict(path):
    """Read a checkpoint: a bare state dict, or one under 'model' / 'state_dict'."""
    checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    for key in ('model', 'state_dict'):
        if isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict):
            return checkpoint[key]
    return checkpoint


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help='timm or official CaiT checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint in mmpretrain layout')
    parser.add_argument(
        '--head', choices=tuple(HEAD_PREFIXES), default='vit',
        help='the classifier head of the target config: vit = '
        'VisionTransformerClsHead (default), linear = LinearClsHead')
    parser.add_argument('--backbone-only', action='store_true',
                        help='write bare backbone keys (for a Pretrained init_cfg)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    state_dict = convert_cait(load_timm_state_dict(args.src), args.backbone_only, args.head)
    torch.save(dict(state_dict=state_dict, meta=dict(converted_from=args.src)), args.dst)
    print(f'wrote {len(state_dict)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
