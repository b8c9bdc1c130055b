#!/usr/bin/env python
"""Train a model from an mmpretrain or mmdet config (picked by the config's default_scope).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--no-validate]
                          [--auto-scale-lr] [--cfg-options KEY=VALUE ...] [--launcher pytorch]

Same flags and behaviour as mmpretrain's and mmdet's ``tools/train.py``; mmstiff's types
(``type='mmstiff.X'``) resolve without ``custom_imports``.
"""
import argparse

from mmstiff.utils.runtime import add_common_args, build_runner, shutdown_distributed


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint, or from the latest checkpoint in the work '
        'dir when no path is given')
    parser.add_argument('--amp', action='store_true',
                        help='enable automatic mixed precision training (needs CUDA)')
    parser.add_argument('--no-validate', action='store_true',
                        help='do not evaluate checkpoints during training')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the actual total batch size')
    parser.add_argument('--no-persistent-workers', action='store_true',
                        help='do not use persistent workers in the dataloaders')
    return add_common_args(parser).parse_args(argv)


def main(argv=None):
    build_runner(parse_args(argv), mode='train').train()
    shutdown_distributed()


if __name__ == '__main__':
    main()
