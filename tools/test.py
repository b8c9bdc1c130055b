#!/usr/bin/env python
"""Evaluate a checkpoint with an mmpretrain or mmdet config (picked by its default_scope).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--cfg-options KEY=VALUE ...] [--launcher pytorch]

``--out results.pkl`` dumps the predictions (mmpretrain ``DumpResults`` / mmdet
``DumpDetResults``); ``--out metrics.json`` (or .yaml) writes the metrics.
Only load checkpoints you trust: MMEngine checkpoints are unpickled in full.
"""
import argparse
import os
import sys

from mmengine.config import DictAction


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the directory to save the file containing '
                        'evaluation metrics')
    parser.add_argument('--out', help='dump predictions (.pkl) or metrics (.json/.yaml) to FILE')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='do not pin memory in the dataloaders')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings in the config, key=value pairs')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)

    import mmstiff  # noqa: F401  (registers mmstiff's modules)
    from mmengine.fileio import dump
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    from mmstiff.utils import ConfigError, load_config, prepare_runner_cfg, trust_checkpoints
    from mmstiff.utils.runtime import METRIC_DUMP_SUFFIXES

    trust_checkpoints()
    try:
        cfg = load_config(args.config)
        prepare_runner_cfg(cfg, args, mode='test')
    except ConfigError as err:
        sys.exit(f'error: {err}')

    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    metrics = runner.test()
    if args.out and args.out.lower().endswith(METRIC_DUMP_SUFFIXES) and runner.rank == 0:
        dump({k: float(v) if hasattr(v, '__float__') else v for k, v in metrics.items()},
             args.out)
    return metrics


if __name__ == '__main__':
    main()
