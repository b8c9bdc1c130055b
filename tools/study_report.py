"""The results page of a study, written from its ``runs.json`` alone, and the index of studies.

``docs/results/<study>/runs.json`` holds everything the page shows (the study as it was run,
every run's status, wall times, commands and collected numbers); the claim and the verdict come
from the study file, so a verdict filled in after looking at the numbers only needs
``tools/reproduce.py STUDY --report-only``. The page is a pure function of the two: no clock,
no machine state, keys and rows in a fixed order, every number through :func:`fmt`, so writing
it again gives the same bytes. The figures (PNG, next to the page) overlay the variants with
:mod:`mmstiff.visualization.overlays`. ``docs/results/README.md`` indexes every study folder.
"""
import glob
import json
import math
import os
import os.path as osp
import shlex
import string

from study_spec import StudyError, load_study
from study_state import DONE, dump_json

RUNS_FILE = 'runs.json'
PAGE = 'README.md'
CONFIDENCE = 0.95
#: metric name prefix -> position in the tables
METRIC_ORDER = ('test/', 'val/', 'train/', 'tns/', 'spectrum/', 'freq_noise/', 'log/')
#: figure file -> (profile names by preference, y label, title, x label, reference line)
PROFILE_FIGURES = {
    'nsi_per_block.png': (('tns/nsi', 'log/nsi'), 'mean NSI ζ (dimensionless)',
                          'Neural stiffness index per block', 'block', None),
    'step_size_per_block.png': (('tns/step', 'log/step'), 'mean step size Δ (dimensionless)',
                                'Step size per block', 'block', None),
    'dlogamp_per_block.png': (('spectrum/dlogamp', 'log/dlogamp'),
                              'Δ log amplitude at 1.0π (log units)',
                              'High-frequency log amplitude per state', 'state after the step',
                              0.0),
    'hf_ratio_per_block.png': (('spectrum/hf_ratio', 'log/hf_ratio'),
                               '||HC[X]|| / ||X|| (fraction)', 'High-frequency ratio per state',
                               'state after the step', None),
    'nsi_step_corr_per_block.png': (('log/nsi_step_corr', ), 'Pearson r (NSI, Δ) over the batch',
                                    'NSI–step-size correlation per block, last recorded batch',
                                    'block', 0.0),
    'nsi_step_corr_training_mean_per_block.png': (
        ('log/nsi_step_corr_training_mean', ), 'Pearson r (NSI, Δ) over the batch',
        'NSI–step-size correlation per block, mean over training', 'block', 0.0),
    'token_cos_per_block.png': (('log/token_cos', ), 'token cosine similarity M_feat',
                                'Token cosine similarity per state, last recorded batch',
                                'state after the step', None),
    'noise_robustness.png': (('freq_noise/drop',), 'accuracy drop (percentage points)',
                             'Accuracy drop under frequency-band noise',
                             'noise band centre frequency (×π rad/sample)', 0.0),
}
SOURCES = {'tns': 'tools/analysis/tns.py', 'spectrum': 'tools/analysis/spectrum.py',
           'freq_noise': 'tools/analysis/freq_noise.py',
           'log': 'training log, last recorded iteration'}
CURVE_KEYWORDS = ('top1', 'accuracy', 'mAP')


# ---------------------------------------------------------------------------- formatting
def fmt(value):
    """A number as the page writes it: 4 significant digits, no exponent between 1e-3 and 1e4."""
    if value is None or not math.isfinite(value):
        return '–'
    magnitude = abs(value)
    if magnitude == 0:
        return '0'
    if magnitude >= 1e9 or magnitude < 1e-3:
        return f'{value:.3e}'
    if magnitude >= 1e4:
        return f'{value:.0f}'
    return f'{value:.4g}'


def fmt_signed(value):
    text = fmt(value)
    return text if text.startswith(('-', '–')) or text == '0' else '+' + text


def fmt_p(value):
    if value is None:
        return '–'
    return '< 0.001' if value < 0.001 else f'{value:.3f}'


def fmt_duration(seconds):
    """``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds is None:
        return '–'
    if seconds < 60:
        return f'{seconds:.1f} s'
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f'{minutes} min {secs:02d} s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours} h {minutes:02d} min'


def _code(text):
    return f'`{text}`'


def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


def _table(header, rows):
    lines = ['| ' + ' | '.join(_cell(h) for h in header) + ' |',
             '|' + '|'.join('---' for _ in header) + '|']
    lines += ['| ' + ' | '.join(_cell(c) for c in row) + ' |' for row in rows]
    return lines


def metric_sort_key(name):
    for i, prefix in enumerate(METRIC_ORDER):
        if name.startswith(prefix):
            return (i, name)
    return (len(METRIC_ORDER), name)


# ---------------------------------------------------------------------------- numbers
class StudyNumbers:
    """The seed statistics of a runs.json: per variant and metric, and against baselines."""

    def __init__(self, runs_data):
        from mmstiff.analysis.statistics import mean_interval, summarize, welch_difference
        self.variants = runs_data['study']['variants']
        self.labels = [v['label'] for v in self.variants]
        self.runs = runs_data['runs']
        self.done = {label: [r for r in self.runs if r['variant'] == label and r['status'] == DONE]
                     for label in self.labels}
        self.values = {}  # label -> metric -> [(seed, value)]
        for label, runs in self.done.items():
            per_metric = self.values.setdefault(label, {})
            for run in runs:
                for metric, value in run['record']['metrics'].items():
                    per_metric.setdefault(metric, []).append((run['seed'], value))
        self.metrics = sorted({m for per in self.values.values() for m in per},
                              key=metric_sort_key)
        self.summary = {label: {m: summarize([v for _, v in pairs])
                                for m, pairs in self.values[label].items()}
                        for label in self.labels}
        self.mean_intervals = {label: {m: mean_interval([v for _, v in pairs], CONFIDENCE)
                                       for m, pairs in self.values[label].items()}
                               for label in self.labels}
        self.differences = {}  # (label, baseline) -> metric -> Difference
        for variant in self.variants:
            for baseline in variant['compare_to']:
                pair = self.differences.setdefault((variant['label'], baseline), {})
                for metric in self.metrics:
                    a = self.values[baseline].get(metric)
                    b = self.values[variant['label']].get(metric)
                    if a and b:
                        pair[metric] = welch_difference([v for _, v in a], [v for _, v in b],
                                                        CONFIDENCE)

    def verdict_namespace(self):
        """The values a verdict template can use (see tools/study_spec.py), as strings."""
        ns = {name: {} for name in ('mean', 'std', 'n', 'mean_ci', 'diff', 'ci', 'p')}
        for label in self.labels:
            for metric, s in self.summary[label].items():
                ns['mean'].setdefault(label, {})[metric] = fmt(s.mean)
                interval = self.mean_intervals[label][metric]
                ns['mean_ci'].setdefault(label, {})[metric] = (
                    '– (fewer than 2 seeds)' if interval is None else
                    f'[{fmt(interval[0])}, {fmt(interval[1])}]')
                ns['std'].setdefault(label, {})[metric] = fmt(s.std)
                ns['n'].setdefault(label, {})[metric] = str(s.n)
        for variant in self.variants:
            label = variant['label']
            for i, baseline in enumerate(variant['compare_to']):
                for metric, d in self.differences[(label, baseline)].items():
                    texts = dict(diff=fmt_signed(d.difference), ci=_interval(d),
                                 p=fmt_p(d.p_value))
                    for name, text in texts.items():
                        ns[name].setdefault(label, {}).setdefault(baseline, {})[metric] = text
                        if i == 0:
                            ns[name][label][metric] = text
        return ns


def _interval(d):
    if d.low is None:
        return '– (fewer than 2 seeds)'
    return f'[{fmt(d.low)}, {fmt(d.high)}]'


class _VerdictFormatter(string.Formatter):
    def get_field(self, field_name, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, IndexError, AttributeError) as err:
            raise StudyError(f'verdict refers to {{{field_name}}}, which has no value ({err!r} '
                             'is missing); use the variant labels, baseline labels and metric '
                             'names of the results page') from None


def verdict_line(verdict, numbers, strict=True):
    """The verdict with its numbers filled in, or ``not yet judged``.

    A placeholder without a value raises :class:`StudyError`; with ``strict=False`` (a study
    still running) the line says so instead.
    """
    if not verdict:
        return 'not yet judged'
    try:
        return _VerdictFormatter().vformat(verdict, (), numbers.verdict_namespace())
    except StudyError as err:
        if strict:
            raise
        return f'not yet judged ({err})'



# ---------------------------------------------------------------------------- figures
def _series(runs, kind, name):
    """``{x: y}`` of every run that has the curve / profile ``name``."""
    out = []
    for run in runs:
        item = run['record'][kind].get(name)
        if item and item['x']:
            out.append(dict(zip(item['x'], item['y'])))
    return out


def _x_label(runs, kind, name):
    for run in runs:
        item = run['record'][kind].get(name)
        if item:
            return item['x_label']
    return ''


def write_figures(numbers, out_dir):
    """Overlay figures of ``numbers`` in ``out_dir``; returns ``[(file, caption)]``."""
    from mmstiff.visualization.overlays import overlay_curves, overlay_profiles
    colors = {label: f'C{i % 10}' for i, label in enumerate(numbers.labels)}
    runs = [r for label in numbers.labels for r in numbers.done[label]]
    figures = []
    curves = sorted({c for r in runs for c in r['record']['curves']})
    val_curves = [c for c in curves if c.startswith('val/')]
    chosen = [c for c in val_curves if any(k in c for k in CURVE_KEYWORDS)] or val_curves
    for name in [c for c in curves if c == 'train/loss'] + chosen:
        series = {label: _series(numbers.done[label], 'curves', name) for label in numbers.labels}
        series = {k: v for k, v in series.items() if v}
        if not series:
            continue
        file = name.replace('/', '_') + '.png'
        x_label = _x_label(runs, 'curves', name)
        what = 'Training loss' if name == 'train/loss' else f'Validation {name[4:]}'
        overlay_curves(series, osp.join(out_dir, file), x_label,
                       name[4:] if name.startswith('val/') else 'loss',
                       f'{what} (mean ± std over seeds)', colors=colors)
        figures.append((file, f'{what} per {x_label}'))
    for file, (sources, ylabel, title, default_x, hline) in PROFILE_FIGURES.items():
        # the source most variants have (the first listed on a tie): one source per figure
        counts = [sum(1 for label in numbers.labels
                      if any(s in r['record']['profiles'] for r in numbers.done[label]))
                  for s in sources]
        if not max(counts):
            continue
        name = sources[counts.index(max(counts))]
        series = {label: _series(numbers.done[label], 'profiles', name)
                  for label in numbers.labels}
        series = {k: v for k, v in series.items() if v}
        source = ('training log, mean over the recorded iterations'
                  if name.endswith('_training_mean') else SOURCES[name.split('/')[0]])
        overlay_profiles(series, osp.join(out_dir, file),
                         _x_label(runs, 'profiles', name) or default_x, ylabel,
                         f'{title} (mean ± std over seeds)', colors=colors, hline=hline)
        figures.append((file, f'{title} ({source})'))
    return figures


# ---------------------------------------------------------------------------- the page
def _options(options):
    return ' '.join(_code(o) for o in options) if options else '–'


def _setup(study):
    rows = []
    for v in study['variants']:
        compare = ('baseline' if v['is_baseline'] else '') + (
            (' ' if v['is_baseline'] else '') + ', '.join(v['compare_to'])
            if v['compare_to'] else '')
        rows.append([v['label'], _code(v['config']), _options(v['cfg_options']),
                     compare or '–', ', '.join(str(s) for s in v['seeds']),
                     ', '.join(v['analysis']) or '–'])
    lines = _table(['variant', 'config', '--cfg-options', 'compared with', 'seeds', 'analysis'],
                   rows)
    lines += ['', f'Options of every run: {_options(study["cfg_options"])}; each run adds '
              '`randomness.seed=<seed>`.']
    if study['analysis_args']:
        lines += ['Analysis flags: ' + '; '.join(
            f'{tool} {_code(shlex.join(args))}' for tool, args in study['analysis_args'].items())
            + '.']
    return lines


def _results(numbers):
    header = ['metric'] + [f'{label} (n)' for label in numbers.labels]
    rows = []
    for metric in numbers.metrics:
        row = [metric]
        for label in numbers.labels:
            s = numbers.summary[label].get(metric)
            row.append('–' if s is None else f'{fmt(s.mean)} ± {fmt(s.std)} ({s.n})')
        rows.append(row)
    return _table(header, rows)


def _per_seed(numbers):
    header = ['metric'] + [
        f'{label}, seeds ' + ', '.join(str(r['seed']) for r in numbers.done[label])
        for label in numbers.labels]
    rows = []
    for metric in numbers.metrics:
        row = [metric]
        for label in numbers.labels:
            by_seed = dict(numbers.values[label].get(metric, []))
            row.append(', '.join(fmt(by_seed.get(r['seed'])) for r in numbers.done[label])
                       or '–')
        rows.append(row)
    return _table(header, rows)


def _differences(numbers):
    rows = []
    for (label, baseline), per_metric in numbers.differences.items():
        for metric in numbers.metrics:
            d = per_metric.get(metric)
            if d is None:
                continue
            excludes = d.low is not None and (d.low > 0 or d.high < 0)
            rows.append([f'{label} − {baseline}', metric, fmt_signed(d.difference),
                         _interval(d) + (' *' if excludes else ''),
                         fmt(d.df) if d.df is not None else '–', fmt_p(d.p_value)])
    if not rows:
        return ['No variant has a baseline with finished runs to compare with.']
    return _table(['variant − baseline', 'metric', 'difference of means',
                   f'{CONFIDENCE:.0%} CI', 'ν (Welch)', 'p (two-sided)'], rows) + [
        '', '`*`: the interval excludes 0.']


def _wall_times(runs_data):
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
            notes = [f'{n} {what}' for n, what in ((interrupted, 'interrupted'),
                                                   (failed, 'failed')) if n]
            if notes and len(attempts) > 1:
                text += f' ({len(attempts)} attempts: ' + ', '.join(notes) + ')'
            elif notes:
                text += f' ({notes[0].split()[1]})'
            row.append(text)
        rows.append(row)
    lines = _table(['run', 'status', 'wall time'] + stage_names, rows)
    errors = [f'{r["key"]}: {r["error"]}' for r in runs_data['runs'] if r.get('error')]
    reused = [f'{r["key"]} is {r["reused_from"]}' for r in runs_data['runs']
              if r.get('reused_from')]
    if reused:
        lines += ['', 'Runs taken from other studies (same config, options and seed; their '
                  'times are those of the original runs): ' + '; '.join(reused) + '.']
    if errors:
        lines += ['', 'Not finished: ' + '; '.join(errors) + '.']
    environments = sorted({r['environment'] for r in runs_data['runs'] if r.get('environment')})
    if environments:
        lines += ['', 'Machines: ' + '; '.join(environments) + '.']
    return lines


def _commands(runs_data):
    lines = ['Run from the repository root; `python` is the interpreter of the environment '
             '(`.venv/bin/python`). Every attempt is listed, an interrupted one included.']
    for run in runs_data['runs']:
        commands = [a['command'] for s in run.get('stages', []) for a in s.get('attempts', [])]
        if not commands:
            continue
        origin = f' (the run {run["reused_from"]})' if run.get('reused_from') else ''
        lines += ['', f'`{run["key"]}`{origin}:', '', '```bash'] + commands + ['```']
    return lines


def render_page(runs_data, claim, verdict, study_file, figures, strict=True):
    """The Markdown of a study page (a string); ``strict``: see :func:`verdict_line`."""
    study = runs_data['study']
    numbers = StudyNumbers(runs_data)
    done = sum(1 for r in runs_data['runs'] if r['status'] == DONE)
    lines = [f'# {study["name"]}', '',
             '<!-- Written by tools/reproduce.py from runs.json and the study file; regenerate '
             f'with: python tools/reproduce.py {study_file} --report-only -->', '',
             f'Study file: {_code(study_file)} · raw data: [{RUNS_FILE}]({RUNS_FILE}) · '
             f'{done} of {len(runs_data["runs"])} runs done.', '',
             '## Claim', '', *[f'> {line}' if line else '>' for line in
                               claim['quote'].splitlines()],
             '', f'— {claim["source"]}', '']
    if claim.get('tested'):
        lines += [f'Tested here: {claim["tested"]}', '']
    lines += [f'**Verdict:** {verdict_line(verdict, numbers, strict)}', '',
              '## Setup', '', *_setup(study), '',
              '## Results: mean ± std over seeds', '',
              'Sample standard deviation (n − 1); n = finished seeds. `test/` from '
              '`tools/test.py --out`, `val/` the last validation during training, `train/` '
              'from the JSON log (time per iteration: MMEngine\'s smoothed iteration time), '
              '`log/` the last values of the diagnostic hooks, the others from the analysis '
              'tools.', '', *_results(numbers), '',
              f'## Difference to the baseline (Welch t, {CONFIDENCE:.0%} confidence interval)',
              '', 'Difference = mean(variant) − mean(baseline); the interval uses Welch\'s t '
              'with the Welch–Satterthwaite degrees of freedom ν '
              '(mmstiff/analysis/statistics.py).', '', *_differences(numbers), '',
              '## Per seed', '', *_per_seed(numbers), '',
              '## Wall time', '', *_wall_times(runs_data), '']
    if figures:
        lines += ['## Figures', '', 'One line per variant: the mean over its seeds; shaded or '
                  'error bars: ± one standard deviation.', '']
        for file, caption in figures:
            lines += [f'![{caption}]({file})', '', f'*{caption}.*', '']
    lines += ['## Commands', '', *_commands(runs_data), '']
    return '\n'.join(lines)


def read_runs(results_dir, name):
    path = osp.join(results_dir, name, RUNS_FILE)
    if not osp.isfile(path):
        raise StudyError(f'{path} does not exist; run the study first (without --report-only)')
    with open(path) as f:
        return json.load(f)


def write_page(results_dir, name, claim, verdict, study_file, strict=True):
    """Write ``<results_dir>/<name>/README.md`` and its figures from its runs.json."""
    runs_data = read_runs(results_dir, name)
    out_dir = osp.join(results_dir, name)
    numbers = StudyNumbers(runs_data)
    verdict_line(verdict, numbers, strict)  # a verdict that cannot be filled fails first
    figures = write_figures(numbers, out_dir)
    for stale in glob.glob(osp.join(out_dir, '*.png')):
        if osp.basename(stale) not in {f for f, _ in figures}:
            os.remove(stale)
    text = render_page(runs_data, claim, verdict, study_file, figures, strict)
    path = osp.join(out_dir, PAGE)
    with open(path, 'w') as f:
        f.write(text)
    return path


def write_runs(results_dir, runs_data):
    """Write ``<results_dir>/<study>/runs.json`` (sorted keys: equal data, equal bytes)."""
    return dump_json(runs_data, osp.join(results_dir, runs_data['study']['name'], RUNS_FILE))


# ---------------------------------------------------------------------------- the index
def write_index(results_dir):
    """``<results_dir>/README.md``: one row per study folder that holds a runs.json."""
    rows = []
    for path in sorted(glob.glob(osp.join(results_dir, '*', RUNS_FILE))):
        with open(path) as f:
            runs_data = json.load(f)
        study = runs_data['study']
        verdict = 'not yet judged'
        claim = study['claim']
        study_file = study['file']
        try:
            current = load_study(study_file)
            claim = current.claim._asdict()
            verdict = verdict_line(current.verdict, StudyNumbers(runs_data), strict=False)
        except StudyError as err:
            verdict = f'(study file {study_file} unreadable: {err})'
        done = sum(1 for r in runs_data['runs'] if r['status'] == DONE)
        folder = osp.basename(osp.dirname(path))
        rows.append([f'[{study["name"]}]({folder}/{PAGE})', claim['source'],
                     ', '.join(v['label'] for v in study['variants']),
                     f'{done}/{len(runs_data["runs"])}', verdict])
    lines = ['# Reproduction studies', '',
             'Each folder holds one study run by `tools/reproduce.py`: its page (`README.md`), '
             'the raw numbers of every run (`runs.json`) and the figures. A study file in '
             '`configs/studies/` names the claim, the variants and the seeds; run one with',
             '', '```bash', 'make reproduce STUDY=configs/studies/<study>.py   # or: python '
             'tools/reproduce.py configs/studies/<study>.py [--jobs N]', '```', '',
             'and regenerate its page (after filling in its verdict) with '
             '`python tools/reproduce.py configs/studies/<study>.py --report-only`. This index '
             'is rewritten with every page.', '']
    if rows:
        lines += _table(['study', 'claim from', 'variants', 'runs done', 'verdict'], rows)
    else:
        lines += ['No study has been run yet.']
    path = osp.join(results_dir, PAGE)
    os.makedirs(results_dir, exist_ok=True)
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return path
