"""The tables of a study page: setup, results per variant, comparisons, seeds, times, commands."""
import shlex
from typing import Any, Dict, List

from .format import code, fmt, fmt_duration, fmt_interval, fmt_p, fmt_signed, table
from .numbers import StudyNumbers
from .spec import Study
from .statistics import sign_counts

Q_STAR = 0.05


def _options(options):
    return ' '.join(code(o) for o in options) if options else '–'


def setup(study: Study) -> List[str]:
    """The lines of the setup table of ``study`` (its entry of runs.json): one row per variant
    (config, options, baseline and comparisons, seeds, analysis), then the options common to
    every run and the analysis flags."""
    rows = []
    for v in study['variants']:
        compare = ('baseline' if v['is_baseline'] else '') + (
            (' ' if v['is_baseline'] else '') +
            ', '.join(v['compare_to']) if v['compare_to'] else '')
        rows.append([
            v['label'],
            code(v['config']),
            _options(v['cfg_options']), compare or '–', ', '.join(str(s) for s in v['seeds']),
            ', '.join(v['analysis']) or '–'
        ])
    lines = table(['variant', 'config', '--cfg-options', 'compared with', 'seeds', 'analysis'],
                  rows)
    lines += [
        '', f'Options of every run: {_options(study["cfg_options"])}; each run adds '
        '`randomness.seed=<seed>`.'
    ]
    if study['analysis_args']:
        lines += [
            'Analysis flags: ' + '; '.join(f'{tool} {code(shlex.join(args))}'
                                           for tool, args in study['analysis_args'].items()) + '.'
        ]
    return lines


def results(numbers: StudyNumbers) -> List[str]:
    """The lines of the results table: per metric and variant, mean ± standard deviation over
    the finished seeds and their number (``–`` where none has the metric)."""
    header = ['metric'] + [f'{label} (n)' for label in numbers.labels]
    rows = []
    for metric in numbers.metrics:
        row = [metric]
        for label in numbers.labels:
            s = numbers.summary[label].get(metric)
            row.append('–' if s is None else f'{fmt(s.mean, s.std)} ± {fmt(s.std, s.std)} ({s.n})')
        rows.append(row)
    return table(header, rows)


def per_seed(numbers: StudyNumbers) -> List[str]:
    """The lines of the per-seed table: per metric and variant, the value of each finished seed."""
    header = ['metric'] + [
        f'{label}, seeds ' + ', '.join(str(r['seed']) for r in numbers.done[label])
        for label in numbers.labels
    ]
    rows = []
    for metric in numbers.metrics:
        row = [metric]
        for label in numbers.labels:
            by_seed = dict(numbers.values[label].get(metric, []))
            row.append(', '.join(fmt(by_seed.get(r['seed'])) for r in numbers.done[label]) or '–')
        rows.append(row)
    return table(header, rows)


def differences(numbers: StudyNumbers) -> List[str]:
    """Every comparison but the primary one, with its BH q-value (one family per page)."""
    rows = []
    for (label, baseline), per_metric in numbers.differences.items():
        for metric in numbers.metrics:
            d = per_metric.get(metric)
            q = numbers.q_values.get(((label, baseline), metric))
            if d is None or numbers._is_primary(label, baseline, metric):
                continue
            scale = None if d.low is None else (d.high - d.low) / 2
            above, below, _ = sign_counts(numbers.paired(label, baseline, metric))
            rows.append([
                f'{label} − {baseline}', metric,
                fmt_signed(d.difference, scale),
                fmt_interval(d.low, d.high, scale),
                fmt_p(d.p_value),
                fmt_p(q) + (' *' if q is not None and q < Q_STAR else ''), f'{above}/{below}'
            ])
    if not rows:
        return ['No secondary comparison has finished runs on both sides.']
    return table([
        'variant − baseline', 'metric', 'difference of means', '95% CI (Welch)', 'p', 'q (BH)',
        'seeds +/−'
    ], rows) + [
        '', f'`*`: q < {Q_STAR} (Benjamini–Hochberg over the {len(rows)} comparisons of this '
        'table). Seeds +/−: seeds (paired by seed number) where the variant is above / below '
        'the baseline.'
    ]


def wall_times(runs_data: Dict[str, Any]) -> List[str]:
    """The lines of the wall-time table of ``runs_data`` (runs.json): per run its status, total
    time and the time of each stage with its interrupted and failed attempts; then the runs
    taken from other studies, the unfinished runs' errors and the machines."""
    stage_names = []
    for run in runs_data['runs']:
        for stage in run.get('stages', []):
            if stage['name'] not in stage_names:
                stage_names.append(stage['name'])
    rows = []
    for run in runs_data['runs']:
        stages = {s['name']: s for s in run.get('stages', [])}
        row = [run['key'], run['status'], fmt_duration(run.get('wall_time_s'))]
        for name in stage_names:
            attempts = stages.get(name, {}).get('attempts', [])
            known = [a['wall_time_s'] for a in attempts if a.get('wall_time_s') is not None]
            text = fmt_duration(sum(known)) if known else '–'
            interrupted = sum(1 for a in attempts if a.get('returncode') is None)
            failed = sum(1 for a in attempts if a.get('returncode') not in (None, 0))
            notes = [
                f'{n} {what}' for n, what in ((interrupted, 'interrupted'), (failed, 'failed')) if n
            ]
            if notes and len(attempts) > 1:
                text += f' ({len(attempts)} attempts: ' + ', '.join(notes) + ')'
            elif notes:
                text += f' ({notes[0].split()[1]})'
            row.append(text)
        rows.append(row)
    lines = table(['run', 'status', 'wall time'] + stage_names, rows)
    errors = [f'{r["key"]}: {r["error"]}' for r in runs_data['runs'] if r.get('error')]
    reused = [
        f'{r["key"]} is {r["reused_from"]}' for r in runs_data['runs'] if r.get('reused_from')
    ]
    if reused:
        lines += [
            '', 'Runs taken from other studies (same config, options and seed; their '
            'times are those of the original runs): ' + '; '.join(reused) + '.'
        ]
    if errors:
        lines += ['', 'Not finished: ' + '; '.join(errors) + '.']
    environments = sorted({r['environment'] for r in runs_data['runs'] if r.get('environment')})
    if environments:
        lines += ['', 'Machines: ' + '; '.join(environments) + '.']
    return lines


def commands(runs_data: Dict[str, Any]) -> List[str]:
    """The lines of the commands section: a line on how to run them, then every attempt's
    command of each run that has one, in order."""
    lines = [
        'Run from the repository root; `python` is the interpreter of the environment '
        '(`.venv/bin/python`). Every attempt is listed, an interrupted one included.'
    ]
    for run in runs_data['runs']:
        commands = [a['command'] for s in run.get('stages', []) for a in s.get('attempts', [])]
        if not commands:
            continue
        origin = f' (the run {run["reused_from"]})' if run.get('reused_from') else ''
        lines += ['', f'`{run["key"]}`{origin}:', '', '```bash'] + commands + ['```']
    return lines
