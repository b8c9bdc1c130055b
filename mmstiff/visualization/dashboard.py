"""One figure of a training run: its curves, and the per-step diagnostics over training.

The training loss and learning rate, the validation metrics and, where ``HessianHook`` ran, the
Hessian's top eigenvalue on the first row; below it one heat strip per per-step quantity the
run logged, steps (in trajectory order, top to bottom) against training iterations: the NSI,
the step size Δ, the high-frequency ratio of the state after each step and the adjoint gain
``‖a_t‖ / ‖a_{t+1}‖`` (docs/diagnostics.md, "The dashboard"; docs/methods.md §16). A strip labels
every k-th step so that 12 steps and 200 read alike, and marks where each stage starts.

:func:`dashboard_data` reads the rows of a JSON log (``vis_data/scalars.json``),
:func:`build_figure` draws them into a matplotlib figure whose axes carry their panel's name
(``Axes.get_label()``), and :func:`write_dashboard` saves it (PNG, SVG, PDF) with the list of
its panels in the file's metadata (:func:`read_panels`).
"""
import json
import math
import os
import os.path as osp
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from mmstiff.analysis.quantities import PREFIXES, QUANTITIES
from mmstiff.analysis.trajectory import stage_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: how to read the strips, under the title
READING = ('Heat strips: one row per Euler step x_t+1 = x_t + Δ_t ⊙ f(x_t) (the first on top), '
           'one column per recorded iteration. NSI: how far the step moves the state, relative '
           'to the state.\nHigh-frequency ratio: the share of the state that is not its '
           'spatial mean. Adjoint gain: red where the step amplifies the gradient on its way '
           'back, blue where it damps it.')
#: a series: ``(steps, values)``
Series = Tuple[List[int], List[float]]

#: the heat strips, in order: (logged group, title, colour-bar label, scale), one per declared
#: quantity with a strip (docs/diagnostics.md, "Logged quantities")
STRIPS = tuple(
    (q.group, q.title, q.symbol if q.strip != 'gain' else f'log₂ {q.symbol}\n(+: grows backwards)',
     q.strip) for q in QUANTITIES if q.strip is not None)
#: the first row's panels
LOSS_PANEL = 'Training loss and learning rate'
VAL_PANEL = 'Validation metrics'
HESSIAN_PANEL = 'Hessian top eigenvalue (HessianHook)'
#: names a row carries besides its scalars, and MMEngine's timings
ROW_KEYS = ('step', 'iter', 'epoch')
TIMINGS = ('time', 'data_time', 'memory')
DIAGNOSTIC_PREFIXES = PREFIXES
#: most step labels on a strip's axis; more steps are labelled every k-th
MAX_STEP_LABELS = 24
#: the metadata key of the panel list (PNG and SVG: 'Description'; PDF: 'Subject')
PANELS_KEY = 'mmstiff-dashboard'


class Strip(NamedTuple):
    """One heat strip: ``values[i, j]`` of step ``steps[i]`` at iteration ``iters[j]`` (NaN
    where that iteration did not log it)."""
    group: str
    title: str
    label: str
    scale: str
    steps: List[str]
    iters: List[int]
    values: np.ndarray


class Dashboard(NamedTuple):
    """The numbers of a dashboard: every field plain data, read from a log's rows."""
    loss: Dict[str, Series]
    lr: Dict[str, Series]
    val: Dict[str, Series]
    val_by_epoch: bool
    hessian: Dict[str, Series]
    strips: List[Strip]
    last_iter: int


def _is_validation_row(row):
    # MMEngine's validation rows carry the metrics and timings but no 'iter'
    return 'iter' not in row and not any(k.startswith(DIAGNOSTIC_PREFIXES) for k in row)


def _add(series, key, step, value):
    series.setdefault(key, {})[int(step)] = float(value)


def _sorted(series):
    return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in series.items()}


def dashboard_data(rows: Sequence[dict]) -> Dashboard:
    """The :class:`Dashboard` of a JSON log's rows (later rows win on a repeated step)."""
    loss, lr, val, hessian = {}, {}, {}, {}
    per_step = {group: {} for group, *_ in STRIPS}  # group -> step name -> {iter: value}
    by_epoch = any('epoch' in r for r in rows if 'lr' in r)
    last = 0
    for row in rows:
        step = row.get('step', row.get('iter'))
        if not isinstance(step, (int, float)):
            continue
        validation = _is_validation_row(row)
        if not validation:
            last = max(last, int(step))
        for key, value in row.items():
            if key in ROW_KEYS or key in TIMINGS or not isinstance(value, (int, float)):
                continue
            if validation:
                _add(val, key, step, value)
            elif key == 'loss' or key.startswith('loss_'):
                _add(loss, key, step, value)
            elif key in ('lr', 'base_lr'):
                _add(lr, key, step, value)
            elif key.startswith('hessian/eigenvalue_') or key == 'hessian/min_eigenvalue':
                _add(hessian, key.split('/', 1)[1], step, value)
            else:
                group, _, name = key.rpartition('/')
                if group in per_step and name:
                    per_step[group].setdefault(_step_name(key, group), {})[int(step)] = float(value)
    strips = []
    for group, title, label, scale in STRIPS:
        steps = per_step[group]
        if not steps:
            continue
        names = list(steps)  # the order the hook wrote them: the trajectory's
        iters = sorted({i for values in steps.values() for i in values})
        column = {it: j for j, it in enumerate(iters)}
        values = np.full((len(names), len(iters)), np.nan)
        for i, name in enumerate(names):
            for it, value in steps[name].items():
                values[i, column[it]] = value
        strips.append(Strip(group, title, label, scale, names, iters, values))
    return Dashboard(
        _sorted(loss), _sorted(lr), _sorted(val), by_epoch, _sorted(hessian), strips, last)


def _step_name(key, group):
    return key[len(group) + 1:]


def read_rows(path: str) -> List[dict]:
    """The JSON rows of a JSON-lines log (lines that are not JSON objects skipped)."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                rows.append(entry)
    return rows


def step_ticks(names: Sequence[str], max_labels: int = MAX_STEP_LABELS) -> List[int]:
    """The indices of the steps a strip labels: every k-th, k the smallest that keeps at most
    ``max_labels`` labels, and the first step of every stage where that leaves room."""
    n = len(names)
    k = max(1, math.ceil(n / max_labels))
    ticks = set(range(0, n, k))
    starts = stage_starts(names)
    if len(starts) <= max_labels // 2:
        for start, _ in starts:
            ticks = {t for t in ticks if abs(t - start) >= max(1, math.ceil(0.6 * k))} | {start}
    return sorted(ticks)


def stage_starts(names: Sequence[str]) -> List[Tuple[int, str]]:
    """``(index, stage)`` of the first step of each stage, in order (the stage of a step name as
    :func:`~mmstiff.analysis.stage_of` reads it; ``input`` and top-level names have none)."""
    starts, last = [], None
    for i, name in enumerate(names):
        stage = stage_of(name)
        if stage and stage != last:
            starts.append((i, stage))
        last = stage or last
    return starts


def _pyplot():
    import matplotlib
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt


def _edges(iters):
    """Cell edges along the iterations: midway between recorded iterations."""
    x = np.asarray(iters, dtype=float)
    if len(x) == 1:
        return np.array([x[0] - 0.5, x[0] + 0.5])
    mids = (x[1:] + x[:-1]) / 2
    return np.concatenate([[x[0] - (mids[0] - x[0])], mids, [x[-1] + (x[-1] - mids[-1])]])


def _strip_norm(strip):
    """``(values to draw, colour map, norm)`` of a strip."""
    from matplotlib import colors
    values = strip.values
    finite = values[np.isfinite(values)]
    if strip.scale == 'gain':
        with np.errstate(divide='ignore', invalid='ignore'):
            logs = np.log2(np.where(values > 0, values, np.nan))
        spread = logs[np.isfinite(logs)]
        limit = float(np.percentile(np.abs(spread), 98)) if spread.size else 1.0
        limit = max(limit, 0.05)
        return logs, 'RdBu_r', colors.Normalize(-limit, limit)
    if strip.scale == 'log':
        positive = finite[finite > 0]
        if positive.size:
            low, high = np.percentile(positive, [2, 98])
            high = max(high, low * 1.01)
            return values, 'viridis', colors.LogNorm(low, high)
    if finite.size:
        low, high = np.percentile(finite, [2, 98])
        if high <= low:
            low, high = low - 0.5, high + 0.5
        return values, 'viridis' if strip.scale == 'log' else 'magma', colors.Normalize(low, high)
    return values, 'viridis', colors.Normalize(0, 1)


def _strip_height(n):
    return min(4.6, max(1.5, 0.9 + 0.02 * n + (0.12 * n if n <= 16 else 0.3)))


def build_figure(data: Dashboard, title: str = 'Training run') -> Tuple['Figure', List[str]]:
    """The matplotlib figure of ``data``; each panel's axes is labelled with its title
    (``Axes.get_label()``), the colour bars with ``'colorbar'``. Returns ``(figure, panels)``,
    ``panels`` the titles in drawing order."""
    plt = _pyplot()
    strips = data.strips
    heights = [3.0] + [_strip_height(len(s.steps)) for s in strips]
    fig = plt.figure(figsize=(13.0, sum(heights) + 0.9), layout='constrained')
    grid = fig.add_gridspec(len(heights), 3, height_ratios=heights)
    panels = []
    with_hessian = bool(data.hessian)
    loss_ax = fig.add_subplot(grid[0, :2] if not with_hessian else grid[0, 0])
    _loss_panel(loss_ax, data)
    panels.append(LOSS_PANEL)
    val_ax = fig.add_subplot(grid[0, 2] if not with_hessian else grid[0, 1])
    _val_panel(val_ax, data)
    panels.append(VAL_PANEL)
    if with_hessian:
        ax = fig.add_subplot(grid[0, 2])
        _hessian_panel(ax, data)
        panels.append(HESSIAN_PANEL)
    shared = None
    for row, strip in enumerate(strips, start=1):
        ax = fig.add_subplot(grid[row, :], sharex=shared)
        shared = shared or ax
        _strip_panel(fig, ax, strip, last=row == len(strips))
        panels.append(strip.title)
    if strips:
        # the strips and the loss share the iteration axis
        low = min(s.iters[0] for s in strips)
        high = max(max(s.iters[-1] for s in strips), data.last_iter)
        pad = max(0.5, 0.01 * (high - low))
        shared.set_xlim(min(low, 0) - pad, high + pad)
        loss_ax.set_xlim(shared.get_xlim())
    else:
        note = ('no per-step diagnostics in this log: add custom_hooks=[dict(type='
                "'mmstiff.StiffnessHook'), dict(type='mmstiff.FrequencyHook')]")
        loss_ax.text(0.0, -0.28, note, transform=loss_ax.transAxes, fontsize=8, color='0.35')
    fig.suptitle(title, fontsize=12, fontweight='bold')
    if strips:  # how to read the strips, in small print under them
        fig.supxlabel(READING, fontsize=8, color='0.3')
    return fig, panels


def _loss_panel(ax, data):
    ax.set_label(LOSS_PANEL)
    ax.set_title(LOSS_PANEL, fontsize=10, loc='left')
    lines = []
    for i, (key, (steps,
                  values)) in enumerate(sorted(data.loss.items(), key=lambda kv: kv[0] != 'loss')):
        lines += ax.plot(steps, values, linewidth=1.4 if key == 'loss' else 0.8,
                         color='tab:blue' if key == 'loss' else None, alpha=1 if i == 0 else 0.7,
                         label=key)
    ax.set_xlabel('training iteration')
    ax.set_ylabel('training loss')
    if data.lr:
        twin = ax.twinx()
        twin.set_label(LOSS_PANEL + ' (lr)')
        for key, (steps, values) in data.lr.items():
            lines += twin.plot(steps, values, color='tab:orange', linewidth=1.0, linestyle='--',
                               label=key)
        twin.set_ylabel('learning rate', color='tab:orange')
        twin.tick_params(axis='y', labelcolor='tab:orange', labelsize=7)
    if lines:
        ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc='upper right')
    else:
        ax.text(0.5, 0.5, 'no training rows logged yet', ha='center', va='center',
                transform=ax.transAxes, color='0.4')
    ax.grid(alpha=0.3)


def _val_panel(ax, data):
    ax.set_label(VAL_PANEL)
    ax.set_title(VAL_PANEL, fontsize=10, loc='left')
    metrics = list(data.val.items())[:4]
    for key, (steps, values) in metrics:
        ax.plot(steps, values, marker='o', markersize=3, linewidth=1.2, label=key)
    ax.set_xlabel('epoch' if data.val_by_epoch else 'training iteration')
    if metrics:
        ax.set_ylabel('validation metric')
        last = metrics[0]
        ax.legend(fontsize=7, loc='best', title=f'last {last[0]}: {last[1][1][-1]:.4g}',
                  title_fontsize=7)
    else:
        ax.text(0.5, 0.5, 'no validation yet', ha='center', va='center', transform=ax.transAxes,
                color='0.4')
    ax.grid(alpha=0.3)


def _hessian_panel(ax, data):
    ax.set_label(HESSIAN_PANEL)
    ax.set_title(HESSIAN_PANEL, fontsize=10, loc='left')
    for key, (steps, values) in sorted(data.hessian.items()):
        ax.plot(steps, values, marker='o', markersize=3, linewidth=1.2,
                label='λ_max' if key == 'eigenvalue_1' else key)
    ax.set_xlabel('training iteration')
    ax.set_ylabel('eigenvalue')
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _strip_panel(fig, ax, strip, last=True):
    ax.set_label(strip.title)
    values, cmap, norm = _strip_norm(strip)
    n = len(strip.steps)
    mesh = ax.pcolormesh(
        _edges(strip.iters), np.arange(n + 1), np.ma.masked_invalid(values), cmap=cmap, norm=norm,
        shading='flat')
    ax.set_ylim(n, 0)  # the first step on top
    ticks = step_ticks(strip.steps)
    ax.set_yticks([t + 0.5 for t in ticks])
    ax.set_yticklabels([strip.steps[t] for t in ticks], fontsize=6 if n > 16 else 7)
    for start, stage in stage_starts(strip.steps):
        if start:
            ax.axhline(start, color='white', linewidth=0.9)
        ax.annotate(stage, xy=(1.0, start + 0.5), xycoords=('axes fraction', 'data'), xytext=(3, 0),
                    textcoords='offset points', fontsize=6, va='top', color='0.25',
                    annotation_clip=False)
    every = math.ceil(n / MAX_STEP_LABELS)
    where = f'{n} steps' + (f', every {every}th labelled' if every > 1 else '')
    ax.set_title(f'{strip.title}   [{where}; lines: stage starts]', fontsize=10, loc='left')
    if last:
        ax.set_xlabel('training iteration')
    bar = fig.colorbar(mesh, ax=ax, pad=0.04, fraction=0.03)
    if strip.scale == 'log':  # a few plain numbers, not only the decades a narrow range spans
        low, high = mesh.norm.vmin, mesh.norm.vmax
        bar.set_ticks(np.geomspace(low, high, 5))
        bar.set_ticklabels([f'{t:.3g}' for t in np.geomspace(low, high, 5)])
        bar.ax.minorticks_off()
    bar.ax.set_label('colorbar')
    bar.set_label(strip.label, fontsize=7)
    bar.ax.tick_params(labelsize=6)


def write_dashboard(data: Dashboard, path: str, formats: Sequence[str] = ('png', ),
                    title: str = 'Training run', dpi: int = 100) -> List[str]:
    """Save the dashboard of ``data`` as ``<path without extension>.<format>`` for each of
    ``formats`` (``'png'``, ``'svg'``, ``'pdf'``), each with its panel titles in its metadata
    (:func:`read_panels`). Returns the paths written."""
    unknown = [f for f in formats if f not in ('png', 'svg', 'pdf')]
    if unknown or not formats:
        raise ValueError(f'formats={list(formats)!r} is not supported; expected some of '
                         "'png', 'svg', 'pdf'")
    plt = _pyplot()
    fig, panels = build_figure(data, title)
    stem = osp.splitext(path)[0] if osp.splitext(path)[1] in ('.png', '.svg', '.pdf') else path
    os.makedirs(osp.dirname(osp.abspath(stem)), exist_ok=True)
    about = json.dumps({PANELS_KEY: panels})
    written = []
    for fmt in formats:
        target = f'{stem}.{fmt}'
        key = 'Subject' if fmt == 'pdf' else 'Description'
        tmp = f'{target}.tmp.{fmt}'  # a reader never sees a half-written figure
        fig.savefig(tmp, dpi=dpi, format=fmt, metadata={'Title': title, key: about})
        os.replace(tmp, target)
        written.append(target)
    plt.close(fig)
    return written


def read_panels(path: str) -> List[str]:
    """The panel titles a dashboard file written by :func:`write_dashboard` lists in its
    metadata (PNG, SVG); ``ValueError`` for a file without them."""
    if path.endswith('.svg'):
        import re
        with open(path, encoding='utf-8') as f:
            text = f.read()
        found = re.search(r'<dc:description>(.*?)</dc:description>', text, re.S)
        about = found and found.group(1)
        if about:
            import html
            about = html.unescape(about)
    else:
        from PIL import Image
        with Image.open(path) as image:
            about = image.info.get('Description')
    if not about:
        raise ValueError(f'{path} holds no dashboard metadata')
    return json.loads(about)[PANELS_KEY]


def dashboard_from_log(log: str, path: str, formats: Sequence[str] = ('png', ),
                       title: Optional[str] = None) -> List[str]:
    """:func:`write_dashboard` of the JSON log ``log`` (``vis_data/scalars.json``)."""
    data = dashboard_data(read_rows(log))
    if title is None:
        run = osp.basename(osp.dirname(osp.dirname(osp.abspath(log))))
        title = f'Training run {run}: up to iteration {data.last_iter}'
    return write_dashboard(data, path, formats, title)


def dashboard_image(path: str) -> np.ndarray:
    """The RGB pixels ``(H, W, 3)`` (uint8) of a written PNG dashboard, for a visualizer
    backend's ``add_image``."""
    from PIL import Image
    with Image.open(path) as image:
        return np.asarray(image.convert('RGB'))


__all__ = [
    'Dashboard', 'Strip', 'STRIPS', 'dashboard_data', 'build_figure', 'write_dashboard',
    'read_panels', 'read_rows', 'dashboard_from_log', 'dashboard_image', 'step_ticks',
    'stage_starts'
]
