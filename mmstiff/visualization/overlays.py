"""Figures that overlay the variants of a reproduction study: one line per variant.

Each variant was run with several seeds; every function takes, per variant label, the list of
its seeds' series (``{x: y}`` dicts), draws the pointwise mean over the seeds as the line and
the pointwise standard deviation as a band (curves) or error bars (profiles), where at least
two seeds have the point. Colours follow the order of the variants (``colors`` keeps a variant's
colour when another one is missing from a figure). The figures are written with matplotlib's
Agg backend and the helpers of :mod:`.plots`, so equal inputs give equal PNG bytes.
"""
import math
from typing import Dict, List, Optional, Tuple

from mmstiff.analysis.statistics import pointwise_summary
from .plots import _pyplot, _save


def _color(colors, label, index):
    return (colors or {}).get(label, f'C{index % 10}')


def _finish(ax, count, xlabel, ylabel, title):
    ax.ticklabel_format(axis='y', useOffset=False)  # plain values on the y axis
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if count:
        ax.legend(fontsize=8, loc='best', title='variant (seeds)', title_fontsize=8)


def overlay_curves(series: Dict[str, List[dict]], path: str, xlabel: str, ylabel: str, title: str,
                   colors: Optional[Dict[str, str]] = None) -> str:
    """Curves over training (loss, accuracy): the seed mean per variant, ± std shaded.

    Args:
        series (dict[str, list[dict]]): variant label -> one ``{step: value}`` per seed.
        path (str): the PNG to write.
        xlabel, ylabel, title (str): axis labels (with units) and title.
        colors (dict[str, str], optional): variant label -> matplotlib colour.

    Returns:
        str: ``path``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    for i, (label, seeds) in enumerate(series.items()):
        summary = pointwise_summary(seeds)
        color = _color(colors, label, i)
        ax.plot(summary.x, summary.mean, color=color, linewidth=1.4, marker='.', markersize=3,
                label=f'{label} ({len(seeds)})')
        spread = [(x, m, s) for x, m, s in zip(summary.x, summary.mean, summary.std)
                  if s is not None]
        if spread:
            xs = [p[0] for p in spread]
            ax.fill_between(xs, [m - s for _, m, s in spread], [m + s for _, m, s in spread],
                            color=color, alpha=0.2, linewidth=0)
    ax.xaxis.get_major_locator().set_params(integer=True)  # steps: iterations or epochs
    _finish(ax, len(series), xlabel, ylabel, title)
    return _save(fig, path)


def overlay_profiles(series: Dict[str, List[dict]], path: str, xlabel: str, ylabel: str, title: str,
                     colors: Optional[Dict[str, str]] = None, hline: Optional[float] = None) -> str:
    """Values along the network (per block or state) or along a numeric axis (noise frequency):
    the seed mean per variant, ± std as error bars.

    Args:
        series (dict[str, list[dict]]): variant label -> one ``{x: value}`` per seed; ``x`` are
            names (blocks, in trajectory order: the order they first appear) or numbers.
        path (str): the PNG to write.
        xlabel, ylabel, title (str): axis labels (with units) and title.
        colors (dict[str, str], optional): variant label -> matplotlib colour.
        hline (float, optional): a dashed reference line at this value.

    Returns:
        str: ``path``.
    """
    plt = _pyplot()
    everything = pointwise_summary([s for seeds in series.values() for s in seeds])
    names = everything.x
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in names)
    width = 6.5 if numeric else max(6.5, 0.22 * len(names) + 3)
    fig, ax = plt.subplots(figsize=(width, 4.5))
    position = {x: (x if numeric else i) for i, x in enumerate(names)}
    for i, (label, seeds) in enumerate(series.items()):
        summary = pointwise_summary(seeds)
        xs = [position[x] for x in summary.x]
        errors = [0.0 if s is None else s for s in summary.std]
        ax.errorbar(xs, summary.mean, yerr=errors if any(errors) else None,
                    color=_color(colors, label, i), marker='o', markersize=3, linewidth=1.2,
                    capsize=2, label=f'{label} ({len(seeds)})')
    if hline is not None and math.isfinite(hline):
        ax.axhline(hline, color='0.5', linewidth=0.8, linestyle='--')
    if not numeric:
        step = max(1, math.ceil(len(names) / 40))
        ticks = list(range(0, len(names), step))
        ax.set_xticks(ticks)
        ax.set_xticklabels([names[t] for t in ticks], rotation=90, fontsize=7)
    _finish(ax, len(series), xlabel, ylabel, title)
    return _save(fig, path)


def scatter_runs(points: Dict[str, List[Tuple[float, float]]], path: str, xlabel: str, ylabel: str,
                 title: str, colors: Optional[Dict[str, str]] = None) -> str:
    """One point per run, one colour per variant: two metrics of every finished run (the
    declared correlation of a study). The x axis is logarithmic when every x is positive and
    they span more than two decades (a rank correlation does not depend on the scale).

    Args:
        points (dict[str, list[tuple[float, float]]]): variant label -> ``(x, y)`` of each of
            its runs.
        path (str): the PNG to write.
        xlabel, ylabel, title (str): axis labels (with units) and title.
        colors (dict[str, str], optional): variant label -> matplotlib colour.

    Returns:
        str: ``path``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    xs = [x for pairs in points.values() for x, _ in pairs]
    for i, (label, pairs) in enumerate(points.items()):
        ax.scatter([x for x, _ in pairs], [y for _, y in pairs], color=_color(colors, label, i),
                   s=22, label=f'{label} ({len(pairs)})')
    if xs and min(xs) > 0 and max(xs) / min(xs) > 100:
        ax.set_xscale('log')
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if points:
        ax.legend(fontsize=8, loc='best', title='variant (runs)', title_fontsize=8)
    return _save(fig, path)
