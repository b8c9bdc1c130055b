#!/usr/bin/env python
"""Curves of the logged stiffness and frequency diagnostics over training.

    python tools/analysis/plot_logs.py LOG [--out-dir DIR] [--keys PATTERN ...]

``LOG`` is a JSON log written by MMEngine's visualizer (``vis_data/scalars.json``, which holds
every row, or a hook's own log ``vis_data/<timestamp>_stiffness.json`` /
``<timestamp>_freq.json``), a run folder holding ``vis_data/``, or a work dir (its most
recent run is used). Writes ``curves.json`` (every plotted series as steps and values) and one
PNG per metric: ``stiffness_nsi.png`` (one curve per block), ``stiffness_mu.png``,
``stiffness_ratio.png``, ``stiffness_tns.png`` (per stage and network), ``stiffness_step.png``,
``stiffness_nsi_step_corr.png``, ``freq_hf_ratio.png``, ``freq_dlogamp.png``,
``freq_token_cos.png``, ``freq_attn_cos.png``, and ``loss.png`` for reference, each where the log
has the metric. Logged by ``mmstiff.StiffnessHook`` and ``mmstiff.FrequencyHook``.
"""
import argparse
import fnmatch
import glob
import json
import os
import os.path as osp
import sys

import common

#: metric group -> (y-axis label, title)
GROUPS = {
    'stiffness/nsi': ('NSI ζ (dimensionless)', 'Mean NSI per block'),
    'stiffness/mu': ('μ = mean_t ζ_t (dimensionless)', 'Trajectory mean NSI'),
    'stiffness/ratio': ('ζ*/μ (dimensionless)', 'Max/mean stiffness ratio'),
    'stiffness/tns': ('TNS (dimensionless)', 'Total neural stiffness (training batch)'),
    'stiffness/step': ('mean step size Δ (dimensionless)', 'Mean step size per block'),
    'stiffness/nsi_step_corr': ('Pearson r (NSI, Δ)', 'NSI–step size correlation per block'),
    'freq/hf_ratio': ('||HC[X]|| / ||X|| (fraction)', 'High-frequency ratio per block'),
    'freq/dlogamp': ('Δ log amplitude at 1.0π (log units)', 'High-frequency log amplitude'),
    'freq/token_cos': ('M_feat (mean |cos|)', 'Token cosine similarity per block'),
    'freq/attn_cos': ('M_attn (mean |cos|)', 'Attention-column cosine similarity per layer'),
}
REFERENCE = {'loss': ('training loss', 'Training loss')}


def find_log(path):
    """The JSON log a user means by ``path`` (a file, a run folder or a work dir)."""
    if osp.isfile(path):
        return path
    if not osp.isdir(path):
        sys.exit(f'error: {path!r} is neither a JSON log nor a folder')
    candidates = glob.glob(osp.join(path, 'vis_data', 'scalars.json'))
    candidates += glob.glob(osp.join(path, '*', 'vis_data', 'scalars.json'))
    if not candidates:
        sys.exit(f'error: no vis_data/scalars.json under {path!r}')
    return max(candidates, key=osp.getmtime)


def read_scalars(path):
    """``{key: (steps, values)}`` from a JSON-lines log (later lines win on repeated steps)."""
    series = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = entry.get('step', entry.get('iter'))
            if step is None:
                continue
            for key, value in entry.items():
                if key in ('step', 'iter', 'epoch') or not isinstance(value, (int, float)):
                    continue
                series.setdefault(key, {})[int(step)] = float(value)
    return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in series.items()}


def group_series(series, keys=None):
    groups = {}
    for key, data in series.items():
        if keys and not any(fnmatch.fnmatchcase(key, p) for p in keys):
            continue
        for group in GROUPS:
            if key.startswith(group + '/'):
                groups.setdefault(group, {})[key[len(group) + 1:]] = data
        if key in REFERENCE:
            groups.setdefault(key, {})[key] = data
    return groups


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('log', help='JSON log, run folder or work dir')
    parser.add_argument('--out-dir', default=None,
                        help='where to write curves.json and the PNGs (default: '
                        '<folder of the log>/plots)')
    parser.add_argument('--keys', nargs='+', default=None,
                        help='fnmatch patterns of the scalar names to plot, e.g. "stiffness/*"')
    args = parser.parse_args(argv)
    log = find_log(args.log)
    out_dir = args.out_dir or osp.join(osp.dirname(osp.abspath(log)), 'plots')
    os.makedirs(out_dir, exist_ok=True)
    groups = group_series(read_scalars(log), args.keys)
    diagnostics = [g for g in groups if g in GROUPS]
    if not diagnostics:
        sys.exit(f'error: {log} has no stiffness/ or freq/ scalars; train with '
                 "custom_hooks=[dict(type='mmstiff.StiffnessHook'), "
                 "dict(type='mmstiff.FrequencyHook')]")

    from mmstiff.visualization import plots
    files = []
    for group, curves in groups.items():
        ylabel, title = GROUPS.get(group) or REFERENCE[group]
        name = group.replace('/', '_') + '.png'
        files.append(plots.training_curves(curves, osp.join(out_dir, name), ylabel, title))
    summary = dict(log=log, figures=[osp.basename(f) for f in files],
                   series={group: {k: dict(steps=s, values=v) for k, (s, v) in curves.items()}
                           for group, curves in groups.items()})
    path = common.dump_json(summary, osp.join(out_dir, 'curves.json'))
    print(f'read {log}; wrote {path} and {len(files)} figures to {out_dir}')
    return summary


if __name__ == '__main__':
    main()
