"""The figures of a study page: every variant's curves and per-block profiles overlaid.

Reads runs.json entries (their ``record``: curves over training, profiles along the network);
each figure shows the mean over seeds ± one standard deviation per variant (docs/studies.md).
"""
import os.path as osp
from typing import Dict, List, Optional, Sequence, Tuple

from mmstiff.analysis.quantities import QUANTITIES
from .overlays import overlay_curves, overlay_profiles, scatter_runs

#: the x label of a profile along the steps or along the states
X_LABELS = {'step': 'block', 'state': 'state after the step'}


def _profile_figures():
    """figure file -> (profile names by preference, y label, title, x label, reference line):
    one per declared quantity with a study figure (docs/diagnostics.md, "Logged
    quantities"), a second one over training for those with stage means, and the noise
    robustness of ``tools/analysis/freq_noise.py``."""
    figures = {}
    for q in QUANTITIES:
        if q.figure is None:
            continue
        x_label = X_LABELS[q.along]
        sources = tuple(s for s in (q.tool_profile, q.profile) if s)
        figures[q.figure] = (sources, q.label, q.title, x_label, q.reference)
        if q.stage_means:
            figures[q.figure.replace(
                '_per_block',
                '_training_mean_per_block')] = ((f'{q.profile}_training_mean', ), q.label,
                                                f'{q.title}, mean over training', x_label,
                                                q.reference)
    figures['noise_robustness.png'] = (('freq_noise/drop', ), 'accuracy drop (percentage points)',
                                       'Accuracy drop under frequency-band noise',
                                       'noise band centre frequency (×π rad/sample)', 0.0)
    return figures


PROFILE_FIGURES = _profile_figures()
SOURCES = {
    'tns': 'tools/analysis/tns.py',
    'spectrum': 'tools/analysis/spectrum.py',
    'freq_noise': 'tools/analysis/freq_noise.py',
    'log': 'training log, last recorded iteration'
}
CURVE_KEYWORDS = ('top1', 'accuracy', 'mAP')


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


def correlation_points(labels: Sequence[str], done: Dict[str, List[dict]], x_metric: str,
                       y_metric: str) -> Dict[str, List[Tuple[float, float]]]:
    """``{label: [(x, y)]}``: the two metrics of every finished run that has both."""
    points = {}
    for label in labels:
        pairs = [(r['record']['metrics'][x_metric], r['record']['metrics'][y_metric])
                 for r in done[label]
                 if x_metric in r['record']['metrics'] and y_metric in r['record']['metrics']]
        if pairs:
            points[label] = pairs
    return points


def draw_study_figures(labels: Sequence[str], done: Dict[str, List[dict]], out_dir: str,
                       correlation: Optional[Tuple[str, str]] = None) -> List[Tuple[str, str]]:
    """Overlay figures of a study's finished runs in ``out_dir``; returns ``[(file, caption)]``.

    Args:
        labels (list[str]): the variants, in table order (one colour each).
        done (dict[str, list[dict]]): the finished runs of each variant (runs.json entries).
        out_dir (str): where the PNG files go.
        correlation (tuple[str, str], optional): the metrics of a correlation outcome; first
            figure: every run's pair of them.
    """
    colors = {label: f'C{i % 10}' for i, label in enumerate(labels)}
    runs = [r for label in labels for r in done[label]]
    figures = []
    if correlation:
        x_metric, y_metric = correlation
        points = correlation_points(labels, done, x_metric, y_metric)
        if points:
            file = f'{x_metric}_vs_{y_metric}'.replace('/', '_') + '.png'
            scatter_runs(points, osp.join(out_dir, file), x_metric, y_metric,
                         f'{y_metric} against {x_metric}, one point per run', colors=colors)
            figures.append((file, f'{y_metric} against {x_metric} for every finished run (the '
                            'declared correlation)'))
    curves = sorted({c for r in runs for c in r['record']['curves']})
    val_curves = [c for c in curves if c.startswith('val/')]
    chosen = [c for c in val_curves if any(k in c for k in CURVE_KEYWORDS)] or val_curves
    for name in [c for c in curves if c == 'train/loss'] + chosen:
        series = {label: _series(done[label], 'curves', name) for label in labels}
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
        counts = [
            sum(1 for label in labels if any(s in r['record']['profiles'] for r in done[label]))
            for s in sources
        ]
        if not max(counts):
            continue
        name = sources[counts.index(max(counts))]
        series = {label: _series(done[label], 'profiles', name) for label in labels}
        series = {k: v for k, v in series.items() if v}
        source = ('training log, mean over the recorded iterations'
                  if name.endswith('_training_mean') else SOURCES[name.split('/')[0]])
        overlay_profiles(series, osp.join(out_dir, file),
                         _x_label(runs, 'profiles', name) or default_x, ylabel,
                         f'{title} (mean ± std over seeds)', colors=colors, hline=hline)
        figures.append((file, f'{title} ({source})'))
    return figures
