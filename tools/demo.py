#!/usr/bin/env python
"""The demo: train the demo config on Fashion-MNIST, evaluate it, plot its diagnostics.

    python tools/demo.py [--config configs/demo/...] [--work-dir work_dirs/demo]
                         [--data-root data/fashion_mnist] [--cfg-options ...]
    python tools/demo.py --quick [--work-dir work_dirs/demo-quick]    # or python -m mmstiff.demo

Runs ``tools/train.py``, ``tools/test.py`` and the analysis tools of ``tools/analysis/`` as separate
processes, exactly as a user would, and prints where the log, checkpoint, metrics and plots are, and
last the run's dashboard (``WORK_DIR/dashboard.png``: the loss, the validation accuracy and the
per-step diagnostics over training in one figure). ``--quick`` is the first run of a new install, in
about a minute from any folder with nothing downloaded: it writes a tiny dataset in Fashion-MNIST's
format into ``WORK_DIR/data`` (:func:`mmstiff.testing.write_mnist`: 256 training and 128 test images
of class-coded shapes), trains one short epoch with the diagnostics recorded every two iterations,
evaluates it, plots the curves and the TNS (the other analyses are printed, to run by hand); it
checks the install, its accuracy is no result. The config, the tools and the data are found beside
this script: ``configs/`` of a checkout or ``.mim/configs`` of the installed package.
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time

from mmstiff.tool_main import run_tool

TOOLS = osp.dirname(osp.abspath(__file__))
#: the checkout, or ``mmstiff/.mim`` of an installed package: configs/ lies beside tools/
ROOT = osp.dirname(TOOLS)
DEMO_CONFIG = osp.join('configs', 'demo', 'preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py')
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
#: the analysis tools run on the trained model (tools/analysis/<name>.py) and their batches
ANALYSES = [('tns', '4'), ('spectrum', '2'), ('freq_noise', '2')]
#: those --quick runs (the others are printed, to run by hand: each costs a process start)
QUICK_ANALYSES = ('tns', )
#: --quick: the tiny dataset, and the overrides that make one short epoch of it
QUICK_DATA = dict(num_train=256, num_test=128)
QUICK_OPTIONS = [
    'train_cfg.max_epochs=1',
    'train_cfg.val_interval=1',
    'train_dataloader.batch_size=32',
    'val_dataloader.batch_size=64',
    'test_dataloader.batch_size=64',
    'default_hooks.logger.interval=2',
    'custom_hooks.0.interval=2',
    'custom_hooks.1.interval=2',
] + [
    f'{loader}.{key}' for loader in LOADERS for key in ('num_workers=0', 'persistent_workers=False')
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--config', default=None,
                        help=f'config to train (default: {DEMO_CONFIG} beside this tool)')
    parser.add_argument(
        '--work-dir', default=None, help='where to write (default: work_dirs/demo, with --quick '
        'work_dirs/demo-quick)')
    parser.add_argument(
        '--data-root', default=None,
        help='the Fashion-MNIST folder (default: data/fashion_mnist; with '
        '--quick the tiny dataset written into WORK_DIR/data)')
    parser.add_argument(
        '--quick', action='store_true',
        help='first run in about a minute with nothing downloaded: a tiny '
        'dataset in Fashion-MNIST format written locally, one short epoch')
    parser.add_argument('--cfg-options', nargs='+', default=[],
                        help='extra key=value overrides passed to train.py and test.py')
    args = parser.parse_args(argv)
    if args.config is None:
        args.config = osp.join(ROOT, DEMO_CONFIG)
    if args.work_dir is None:
        args.work_dir = osp.join('work_dirs', 'demo-quick' if args.quick else 'demo')
    if args.quick and args.data_root is not None:
        parser.error('--quick writes its own data into WORK_DIR/data; drop --data-root')
    if args.data_root is None:
        args.data_root = (
            osp.join(args.work_dir, 'data') if args.quick else osp.join('data', 'fashion_mnist'))
    return args


def write_quick_data(root):
    """The tiny Fashion-MNIST-format dataset of ``--quick`` in ``root`` (rewritten each time:
    the same bytes, as the writer is seeded)."""
    from mmstiff.testing import write_mnist
    return write_mnist(root, **QUICK_DATA)


def run(cmd):
    # One compute thread per process: beside the data-loading workers, more threads on a
    # small CPU machine oversubscribe the cores (seen: 10x slower steps on 2 cores).
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', '1')
    print('+', ' '.join(cmd), flush=True)
    status = subprocess.run(cmd, env=env).returncode
    if status:  # the tool has said why (one error: line, or its traceback)
        raise SystemExit(status)


def latest(pattern):
    paths = sorted(glob.glob(pattern), key=osp.getmtime)
    return paths[-1] if paths else None


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.config):
        sys.exit(f'error: --config {args.config!r} does not exist')
    if args.quick:
        write_quick_data(args.data_root)
    elif not osp.isdir(args.data_root):
        sys.exit(f'error: --data-root {args.data_root!r} does not exist; run '
                 f'"python {osp.join(TOOLS, "prepare_fashion_mnist.py")} --dst {args.data_root}" '
                 "first (add --install-with-apt to let it install Debian's "
                 'dataset-fashion-mnist), or try the demo on tiny local data with --quick')
    overrides = [f'{loader}.dataset.data_root={args.data_root}' for loader in LOADERS]
    overrides += (QUICK_OPTIONS if args.quick else []) + list(args.cfg_options)
    start = time.time()
    run([
        sys.executable,
        osp.join(TOOLS, 'train.py'), args.config, '--work-dir', args.work_dir, '--cfg-options',
        *overrides
    ])
    train_s = time.time() - start
    run_dir = latest(osp.join(args.work_dir, '2*'))  # the timestamped folder of this run

    with open(osp.join(args.work_dir, 'last_checkpoint')) as f:
        checkpoint = f.read().strip()
    metrics_file = osp.join(args.work_dir, 'test_metrics.json')
    run([
        sys.executable,
        osp.join(TOOLS, 'test.py'), args.config, checkpoint, '--work-dir', args.work_dir, '--out',
        metrics_file, '--cfg-options', *overrides
    ])
    with open(metrics_file) as f:
        metrics = json.load(f)

    log = latest(osp.join(run_dir, '*.log')) if run_dir else None
    scalars = latest(osp.join(run_dir, 'vis_data', 'scalars.json')) if run_dir else None

    # Diagnostics: the logged curves, then TNS and spectra of the trained model on test data.
    analysis, plots = osp.join(TOOLS, 'analysis'), osp.join(args.work_dir, 'plots')
    test_data = ['--cfg-options', f'test_dataloader.dataset.data_root={args.data_root}']
    if args.quick:
        test_data += ['test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False']
    run([
        sys.executable,
        osp.join(analysis, 'plot_logs.py'), run_dir, '--out-dir',
        osp.join(plots, 'training')
    ])
    analyses = [(tool, ['--num-batches', batches]) for tool, batches in ANALYSES]
    skipped = []
    for tool, extra in analyses:
        cmd = [
            sys.executable,
            osp.join(analysis, f'{tool}.py'), args.config, checkpoint, '--out-dir',
            osp.join(plots, tool), *extra, *test_data
        ]
        if args.quick and tool not in QUICK_ANALYSES:
            skipped.append(' '.join(cmd))
            continue
        run(cmd)
    print('\n== mmstiff demo ==')
    if args.quick:
        print(f'quick run:   {QUICK_DATA["num_train"]} training images of a tiny dataset written '
              f'to {args.data_root}, one short epoch: it checks the install, its accuracy is no '
              'result (the real demo: "make demo", or tools/demo.py on Fashion-MNIST)')
    print(f'config:      {args.config}')
    print(f'train time:  {train_s / 60:.1f} min (total {(time.time() - start) / 60:.1f} min)')
    print(f'checkpoint:  {checkpoint}')
    print(f'train log:   {log}')
    print(f'scalars:     {scalars}')
    print(f'metrics:     {metrics_file}')
    folders = ','.join(['training'] +
                       [t for t, _ in ANALYSES if t in QUICK_ANALYSES or not args.quick])
    print(f'plots:       {plots}/{{{folders}}}/*.png (numbers in the *.json beside them)')
    for cmd in skipped:
        print(f'skipped:     {cmd}')
    for key, value in metrics.items():
        print(f'  {key}: {value:.2f}' if isinstance(value, float) else f'  {key}: {value}')
    dashboard = osp.join(args.work_dir, 'dashboard.png')  # drawn by the diagnostics hook
    if not osp.isfile(dashboard):
        dashboard = osp.join(plots, 'training', 'dashboard.png')  # drawn by plot_logs.py
    print(f'dashboard:   {dashboard}  (the whole run in one figure)')
    return metrics


if __name__ == '__main__':
    run_tool(main)
