#!/usr/bin/env python
"""The demo: train the demo config on Fashion-MNIST, evaluate it, plot its diagnostics.

    python tools/demo.py [--config configs/demo/...] [--work-dir work_dirs/demo]
                         [--data-root data/fashion_mnist] [--cfg-options ...]

Runs ``tools/train.py``, ``tools/test.py`` and the analysis tools of ``tools/analysis/`` as
separate processes, exactly as a user would, and prints where the log, checkpoint, metrics and
plots are.
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time

TOOLS = osp.dirname(osp.abspath(__file__))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--config', default='configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py')
    parser.add_argument('--work-dir', default='work_dirs/demo')
    parser.add_argument('--data-root', default='data/fashion_mnist')
    parser.add_argument('--cfg-options', nargs='+', default=[],
                        help='extra key=value overrides passed to train.py and test.py')
    return parser.parse_args(argv)


def run(cmd):
    # One compute thread per process: beside the data-loading workers, more threads on a
    # small CPU machine oversubscribe the cores (seen: 10x slower steps on 2 cores).
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', '1')
    print('+', ' '.join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def latest(pattern):
    paths = sorted(glob.glob(pattern), key=osp.getmtime)
    return paths[-1] if paths else None


def main(argv=None):
    args = parse_args(argv)
    if not osp.isdir(args.data_root):
        sys.exit(f'error: --data-root {args.data_root!r} does not exist; run '
                 f'"python tools/prepare_fashion_mnist.py --dst {args.data_root}" first (add '
                 '--install-with-apt to let it install Debian\'s dataset-fashion-mnist)')
    overrides = [f'{loader}.dataset.data_root={args.data_root}'
                 for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')]
    overrides += list(args.cfg_options)
    start = time.time()
    run([sys.executable, osp.join(TOOLS, 'train.py'), args.config, '--work-dir', args.work_dir,
         '--cfg-options', *overrides])
    train_s = time.time() - start
    run_dir = latest(osp.join(args.work_dir, '2*'))  # the timestamped folder of this run

    with open(osp.join(args.work_dir, 'last_checkpoint')) as f:
        checkpoint = f.read().strip()
    metrics_file = osp.join(args.work_dir, 'test_metrics.json')
    run([sys.executable, osp.join(TOOLS, 'test.py'), args.config, checkpoint,
         '--work-dir', args.work_dir, '--out', metrics_file, '--cfg-options', *overrides])
    with open(metrics_file) as f:
        metrics = json.load(f)

    log = latest(osp.join(run_dir, '*.log')) if run_dir else None
    scalars = latest(osp.join(run_dir, 'vis_data', 'scalars.json')) if run_dir else None

    # Diagnostics: the logged curves, then TNS and spectra of the trained model on test data.
    analysis, plots = osp.join(TOOLS, 'analysis'), osp.join(args.work_dir, 'plots')
    test_data = ['--cfg-options', f'test_dataloader.dataset.data_root={args.data_root}']
    run([sys.executable, osp.join(analysis, 'plot_logs.py'), run_dir,
         '--out-dir', osp.join(plots, 'training')])
    run([sys.executable, osp.join(analysis, 'tns.py'), args.config, checkpoint,
         '--out-dir', osp.join(plots, 'tns'), '--num-batches', '4', *test_data])
    run([sys.executable, osp.join(analysis, 'spectrum.py'), args.config, checkpoint,
         '--out-dir', osp.join(plots, 'spectrum'), '--num-batches', '2', *test_data])
    run([sys.executable, osp.join(analysis, 'freq_noise.py'), args.config, checkpoint,
         '--out-dir', osp.join(plots, 'freq_noise'), '--num-batches', '2', *test_data])
    print('\n== mmstiff demo ==')
    print(f'config:      {args.config}')
    print(f'train time:  {train_s / 60:.1f} min (total {(time.time() - start) / 60:.1f} min)')
    print(f'checkpoint:  {checkpoint}')
    print(f'train log:   {log}')
    print(f'scalars:     {scalars}')
    print(f'metrics:     {metrics_file}')
    print(f'plots:       {plots}/{{training,tns,spectrum,freq_noise}}/*.png '
          '(numbers in the *.json beside them)')
    for key, value in metrics.items():
        print(f'  {key}: {value:.2f}' if isinstance(value, float) else f'  {key}: {value}')
    return metrics


if __name__ == '__main__':
    main()
