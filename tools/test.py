#!/usr/bin/env python
"""Evaluate a checkpoint with an mmpretrain or mmdet config (picked by its default_scope).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--trust-checkpoint] [--allow-partial-load] [--allow-non-finite]
                         [--cfg-options KEY=VALUE ...] [--launcher pytorch]

``--out results.pkl`` dumps the predictions (mmpretrain ``DumpResults`` / mmdet
``DumpDetResults``); ``--out metrics.json`` (or .yaml) writes the metrics.
The checkpoint loads weights-only (``--trust-checkpoint``: unpickled in full, only for files
you trust) and strictly: keys or shapes that do not match the config's model are an error
before any evaluation (``--allow-partial-load`` loads the matching part, with a warning), and
so are NaN or inf weights or statistics (``--allow-non-finite`` evaluates anyway).
``--out`` is checked writable before the evaluation starts.
"""
import argparse

from mmstiff.tool_main import run_tool  # first: a missing torch or mmengine is one error line

# isort: split
from mmengine.config import DictAction

from mmstiff.apis.cli import add_checkpoint_args, add_run_args
from mmstiff.apis.runtime import (METRIC_DUMP_SUFFIXES, build_runner, cfg_option, run,
                                  shutdown_distributed)


def build_parser():
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the directory to save the file containing '
                        'evaluation metrics')
    parser.add_argument('--out', help='dump predictions (.pkl) or metrics (.json/.yaml) to FILE')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='do not pin memory in the dataloaders')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction, type=cfg_option,
        help='override settings in the config, key=value pairs such as '
        'test_dataloader.batch_size=32')
    add_checkpoint_args(parser, 'evaluate')
    add_run_args(parser)
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    from mmengine.fileio import dump

    args = parse_args(argv)
    runner = build_runner(args, mode='test')
    metrics = run(runner, args, 'test')
    if args.out and args.out.lower().endswith(METRIC_DUMP_SUFFIXES) and runner.rank == 0:
        dump({k: float(v) if hasattr(v, '__float__') else v for k, v in metrics.items()}, args.out)
    shutdown_distributed()
    return metrics


if __name__ == '__main__':
    run_tool(main)
