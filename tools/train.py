#!/usr/bin/env python
"""Train a model from an mmpretrain or mmdet config (picked by the config's default_scope).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT] | --resume-or-start]
                          [--amp] [--no-validate]
                          [--auto-scale-lr] [--cfg-options KEY=VALUE ...] [--launcher pytorch]

Same flags and behaviour as mmpretrain's and mmdet's ``tools/train.py``; mmstiff's types
(``type='mmstiff.X'``) resolve without ``custom_imports``. Unlike them, checkpoints are written
crash-safe, a diverged run (non-finite loss) stops with exit status 1, and ``--resume`` with
nothing to resume is an error instead of a silent new run (docs/reliability.md, "Resuming").
"""
import argparse

from mmstiff.tool_main import run_tool  # first: a missing torch or mmengine is one error line

# isort: split
from mmengine.config import DictAction

from mmstiff.apis.cli import add_run_args
from mmstiff.apis.runtime import build_runner, cfg_option, run, shutdown_distributed


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint, or, with no path, from the newest complete '
        'checkpoint in the work dir; stops with an error (writing nothing) when there is none')
    resume.add_argument(
        '--resume-or-start', action='store_true',
        help='resume like --resume when the work dir has a complete checkpoint, else start '
        'a new run (for job scripts that rerun the same command after a preemption)')
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
        '--cfg-options', nargs='+', action=DictAction, type=cfg_option,
        help='override settings in the config, key=value pairs such as '
        'train_cfg.max_epochs=2 optim_wrapper.optimizer.lr=0.01')
    parser.add_argument(
        '--trust-checkpoint', action='store_true',
        help='unpickle the --resume / load_from checkpoint in full; only for files from a '
        'source you trust (a pickle can run code). By default checkpoints load weights-only')
    add_run_args(parser)
    return parser.parse_args(argv)


def main(argv=None):
    """Train; a user's mistake raises an error that :func:`mmstiff.tool_main.run_tool` prints
    as one ``error:`` line (a bad config or flag, a dataset file that fails its checks, a
    checkpoint refused, a diverged run)."""
    args = parse_args(argv)
    runner = build_runner(args, mode='train')
    run(runner, args, 'train')
    shutdown_distributed()


if __name__ == '__main__':
    run_tool(main)
