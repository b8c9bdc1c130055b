#!/usr/bin/env python
"""Train a model from an mmpretrain or mmdet config (picked by the config's default_scope).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--no-validate]
                          [--auto-scale-lr] [--cfg-options KEY=VALUE ...] [--launcher pytorch]

Same flags and behaviour as mmpretrain's and mmdet's ``tools/train.py``; mmstiff's types
(``type='mmstiff.X'``) resolve without ``custom_imports``.
"""
import argparse
import sys

from mmengine.config import DictAction

from mmstiff.utils.runtime import ConfigError, build_runner, shutdown_distributed


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
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='do not pin memory in the dataloaders')
    parser.add_argument('--no-persistent-workers', action='store_true',
                        help='do not use persistent workers in the dataloaders')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings in the config, key=value pairs such as '
        'train_cfg.max_epochs=2 optim_wrapper.optimizer.lr=0.01')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        runner = build_runner(args, mode='train')
    except ConfigError as err:
        sys.exit(f'error: {err}')
    runner.train()
    shutdown_distributed()


if __name__ == '__main__':
    main()
