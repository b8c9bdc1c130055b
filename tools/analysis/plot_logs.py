#!/usr/bin/env python
"""Training curves and the stiffness and frequency diagnostics of a run, in one command.

    python tools/analysis/plot_logs.py LOG [--out-dir DIR] [--keys PATTERN ...]
                                       [--formats png svg pdf] [--no-dashboard]

``LOG`` is a JSON log written by MMEngine's visualizer (``vis_data/scalars.json``, which holds every
row: the training rows, the validation rows and the diagnostics; or a hook's own log
``vis_data/<timestamp>_stiffness.json`` / ``<timestamp>_freq.json``), a run folder holding
``vis_data/``, or a work dir (its most recent run is used). Writes ``curves.json`` (every plotted
series as steps and values) and one PNG per group, each where the log has it: the training curves
``loss.png`` (every ``loss*`` scalar), ``lr.png`` and ``val.png`` (the validation metrics, by epoch
for an epoch-based run), and the diagnostics ``stiffness_nsi.png`` (one curve per block),
``stiffness_mu.png``, ``stiffness_ratio.png``, ``stiffness_tns.png`` (per stage and network),
``stiffness_step.png``, ``stiffness_nsi_step_corr.png``, ``freq_hf_ratio.png``,
``freq_dlogamp.png``, ``freq_token_cos.png``, ``freq_attn_cos.png``, ``stiffness_adjoint.png``,
``stiffness_adjoint_gain.png`` (logged by ``mmstiff.StiffnessHook`` and ``mmstiff.FrequencyHook``);
and ``dashboard.png``, the whole run in one figure (loss and learning rate, validation, the
Hessian's top eigenvalue, heat strips of the per-step diagnostics; ``--formats`` adds SVG or PDF
copies, ``--no-dashboard`` leaves it out). ``--keys`` patterns that match nothing are an error
listing the keys the log has. A log without diagnostics still gets its training curves, with a note
saying why there are none: no diagnostic hook in the run's config, or a run that ended before the
hook's first recorded iteration. docs/diagnostics.md, "plot_logs.py".
"""
import argparse
import fnmatch
import glob
import os
import os.path as osp
import sys

from mmstiff.analysis.quantities import QUANTITIES, along
from mmstiff.apis.analysis_output import dump_json
from mmstiff.tool_main import run_tool
# the dashboard reads the same rows, and leaves out the same bookkeeping and timings
from mmstiff.visualization.dashboard import ROW_KEYS, TIMINGS, read_rows

#: metric group -> (y-axis label, title): every declared quantity with one name per step,
#: state, layer or trajectory (docs/diagnostics.md, "Logged quantities")
GROUPS = {q.group: (q.label, q.title) for q in along('step', 'state', 'layer', 'trajectory')}
#: training-curve group -> (y-axis label, title); ``val`` is drawn against the epoch in an
#: epoch-based run (MMEngine logs validation rows at ``step = epoch`` there)
CURVES = {
    'loss': ('training loss', 'Training loss'),
    'lr': ('learning rate', 'Learning rate'),
    'val': ('validation metric', 'Validation metrics'),
}
#: mmstiff's diagnostic hooks (what the run's config would need for GROUPS)
DIAGNOSTIC_HOOKS = tuple(dict.fromkeys(q.hook for q in QUANTITIES))


def find_log(path):
    """The JSON log a user means by ``path`` (a file, a run folder or a work dir); MMEngine's
    text log ``<run>/<timestamp>.log`` stands for the ``vis_data/scalars.json`` beside it."""
    if osp.isfile(path):
        return path if path.endswith('.json') or read_rows(path) else json_log_of_text(path)
    if not osp.isdir(path):
        sys.exit(f'error: {path!r} is neither a JSON log nor a folder')
    candidates = glob.glob(osp.join(path, 'vis_data', 'scalars.json'))
    candidates += glob.glob(osp.join(path, '*', 'vis_data', 'scalars.json'))
    if not candidates:
        sys.exit(f'error: no vis_data/scalars.json under {path!r}')
    return max(candidates, key=osp.getmtime)


def json_log_of_text(path):
    """The JSON log of the run whose text log (no JSON rows) is ``path``: the
    ``vis_data/scalars.json`` beside it, else an error naming the file it needs."""
    beside = osp.join(osp.dirname(osp.abspath(path)), 'vis_data', 'scalars.json')
    if osp.isfile(beside):
        print(f'note: {path} is a text log; reading the JSON log of the same run, {beside}',
              file=sys.stderr)
        return beside
    sys.exit(f'error: {path} is a text log, not the JSON log this tool reads: it plots '
             f'vis_data/scalars.json of the run (MMEngine writes it beside the text log; none '
             f'at {beside}); pass that file, the run folder or the work dir')


def is_validation_row(row):
    """MMEngine's validation rows carry the metrics and timings, but no ``iter`` (training
    rows and the diagnostic hooks' rows have one)."""
    return 'iter' not in row and not any(k.startswith(tuple(GROUPS)) for k in row)


def curve_group(key, validation):
    """The group of scalar ``key``: a diagnostic group of GROUPS, a training curve of CURVES,
    or None (timings, row counters)."""
    if key in ROW_KEYS or key in TIMINGS:
        return None
    for group in GROUPS:
        if key.startswith(group + '/'):
            return group
    if validation:
        return 'val'
    if key == 'loss' or key.startswith('loss_'):
        return 'loss'
    if key in ('lr', 'base_lr'):
        return 'lr'
    return None


def read_series(path):
    """``{group: {key: (steps, values)}}`` of every plottable scalar of the log (later rows
    win on a repeated step), and whether the validation rows count epochs."""
    rows = read_rows(path)
    by_epoch = any('epoch' in r for r in rows if 'lr' in r)
    series = {}
    for row in rows:
        step = row.get('step', row.get('iter'))
        if step is None:
            continue
        validation = is_validation_row(row)
        for key, value in row.items():
            group = curve_group(key, validation)
            if group is None or not isinstance(value, (int, float)):
                continue
            label = key[len(group) + 1:] if group in GROUPS else key
            series.setdefault(group, {}).setdefault(label, {})[int(step)] = float(value)
    groups = {
        g: {
            k: (sorted(v), [v[s] for s in sorted(v)])
            for k, v in curves.items()
        }
        for g, curves in series.items()
    }
    return groups, by_epoch


def full_name(group, label):
    """The logged name of series ``label`` of ``group`` (``stiffness/nsi`` + ``layer1.0``)."""
    return f'{group}/{label}' if group in GROUPS else label


def available_keys(groups):
    """The scalar names of ``groups`` for a message: a diagnostic group's per-block names
    collapsed to ``group/*`` with their count."""
    out = []
    for group, curves in groups.items():
        if group in GROUPS:
            out.append(f'{group}/* ({len(curves)})')
        else:
            out.extend(sorted(curves))
    return sorted(out)


def select(groups, keys):
    """``groups`` restricted to the scalar names matching one of the fnmatch ``keys``; every
    pattern must match something (else ``SystemExit`` listing what the log has)."""
    if not keys:
        return groups
    names = [full_name(g, k) for g, curves in groups.items() for k in curves]
    unmatched = [p for p in keys if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        sys.exit(f'error: --keys {" ".join(unmatched)} matches no scalar of the log; it has: '
                 f'{", ".join(available_keys(groups)) or "nothing"}')
    selected = {}
    for group, curves in groups.items():
        kept = {
            k: v
            for k, v in curves.items() if any(
                fnmatch.fnmatchcase(full_name(group, k), p) for p in keys)
        }
        if kept:
            selected[group] = kept
    return selected


def diagnostic_hooks_of(log):
    """``[(index in custom_hooks, type, interval)]`` of the diagnostic hooks in the config
    MMEngine saved beside ``log`` (``vis_data/config.py``), or None when there is none."""
    config = osp.join(osp.dirname(osp.abspath(log)), 'config.py')
    if not osp.isfile(config):
        return None
    from mmengine.config import Config
    try:
        hooks = Config.fromfile(config).get('custom_hooks') or []
    except Exception:  # a config that no longer loads: no explanation, the plots still come
        return None
    found = []
    for i, hook in enumerate(hooks):
        kind = str(hook.get('type', '')) if isinstance(hook, dict) else ''
        if kind.split('.')[-1] in DIAGNOSTIC_HOOKS:
            found.append((i, kind, hook.get('interval', 1)))
    return found


def why_no_diagnostics(log, groups):
    """One line saying why ``log`` holds no diagnostics, and what to change."""
    hooks = diagnostic_hooks_of(log)
    if not hooks:
        return ('the run logged no diagnostics; train with custom_hooks=['
                "dict(type='mmstiff.StiffnessHook'), dict(type='mmstiff.FrequencyHook')]")
    last = max((s[-1] for c in groups.values() for s, _ in c.values()), default=0)
    listed = ', '.join(f'{kind} (interval={interval})' for _, kind, interval in hooks)
    first, kind, interval = hooks[0]
    return (f'the run has {listed} but logged no diagnostics: it ended at iteration {last}, '
            f'before their first recorded iteration; for a short run lower the interval, e.g. '
            f'--cfg-options custom_hooks.{first}.interval={max(1, last // 2)}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('log', help='JSON log, run folder or work dir')
    parser.add_argument(
        '--out-dir', default=None, help='where to write curves.json and the PNGs (default: '
        '<folder of the log>/plots)')
    parser.add_argument(
        '--keys', nargs='+', default=None,
        help='fnmatch patterns of the scalar names to plot, e.g. "stiffness/*" '
        'loss "accuracy/*"')
    parser.add_argument('--formats', nargs='+', default=['png'], choices=('png', 'svg', 'pdf'),
                        help='the formats of dashboard.* (default: png)')
    parser.add_argument('--no-dashboard', action='store_true',
                        help='leave out dashboard.png, the whole run in one figure')
    args = parser.parse_args(argv)
    log = find_log(args.log)
    everything, by_epoch = read_series(log)
    groups = select(everything, args.keys)
    if not groups:
        sys.exit(f'error: {log} holds no training curves and no diagnostics to plot')
    note = None
    if not any(g in GROUPS for g in everything):
        note = why_no_diagnostics(log, everything)
        print(f'note: {note}', file=sys.stderr)
    out_dir = args.out_dir or osp.join(osp.dirname(osp.abspath(log)), 'plots')
    os.makedirs(out_dir, exist_ok=True)

    from mmstiff.visualization import plots
    files = []
    for group, curves in groups.items():
        ylabel, title = GROUPS.get(group) or CURVES[group]
        xlabel = 'epoch' if group == 'val' and by_epoch else 'training iteration'
        name = group.replace('/', '_') + '.png'
        files.append(
            plots.training_curves(curves, osp.join(out_dir, name), ylabel, title, xlabel=xlabel))
    summary = dict(
        log=log, figures=[osp.basename(f) for f in files], note=note, series={
            group: {
                k: dict(steps=s, values=v)
                for k, (s, v) in curves.items()
            }
            for group, curves in groups.items()
        })
    if not args.no_dashboard:
        from mmstiff.visualization.dashboard import dashboard_from_log
        dashboard = dashboard_from_log(log, osp.join(out_dir, 'dashboard'), args.formats)
        summary['dashboard'] = [osp.basename(p) for p in dashboard]
        files += dashboard
    path = dump_json(summary, osp.join(out_dir, 'curves.json'))
    print(f'read {log}; wrote {path} and {len(files)} figures to {out_dir}')
    if not args.no_dashboard:
        print(f'dashboard: {dashboard[0]}')
    return summary


if __name__ == '__main__':
    run_tool(main)
