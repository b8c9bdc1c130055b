"""PNG figures of the diagnostics (matplotlib, Agg backend; imported lazily).

Every function takes plain numbers (lists, tensors, dicts), writes one PNG with labelled axes,
units and a legend where there is more than one series, and returns the path.
"""
import os
import os.path as osp
from typing import Dict, Optional, Sequence, Tuple, Union

import torch

#: record-name suffixes of the two Euler steps of a transformer layer, shaded like
#: Fig. 8 of "How Do Vision Transformers Work?" (arXiv:2202.06709; MSA grey, MLP white).
MSA_SUFFIX = '.msa'
#: A series of numbers as the figures take it: a sequence of floats or a tensor.
Values = Union[Sequence[float], torch.Tensor]


def _pyplot():
    import matplotlib
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def _as_list(values):
    if torch.is_tensor(values):
        return values.detach().double().tolist()
    return [float(v) for v in values]


def _tick_labels(ax, names, axis='x', max_ticks=40):
    step = max(1, (len(names) + max_ticks - 1) // max_ticks)
    ticks = list(range(0, len(names), step))
    if axis == 'x':
        ax.set_xticks(ticks)
        ax.set_xticklabels([names[i] for i in ticks], rotation=90, fontsize=7)
    else:
        ax.set_yticks(ticks)
        ax.set_yticklabels([names[i] for i in ticks], fontsize=7)


def _shade_msa(ax, names):
    for i, name in enumerate(names):
        if name.endswith(MSA_SUFFIX):
            ax.axvspan(i - 0.5, i + 0.5, color='0.88', zorder=0)


def nsi_heatmap(nsi: torch.Tensor, block_names: Sequence[str], path: str,
                title: str = 'NSI per block and sample') -> str:
    """Blocks × samples heat map of NSI (StepNet paper, Appendix E, Fig. 3).

    Args:
        nsi (Tensor): ``(num_samples, num_blocks)``.
        block_names (Sequence[str]): one per column of ``nsi``.
    """
    plt = _pyplot()
    data = torch.as_tensor(nsi).double().T.numpy()
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.22 * len(block_names) + 1.2)))
    image = ax.imshow(data, aspect='auto', cmap='viridis', interpolation='nearest')
    fig.colorbar(image, ax=ax, label='NSI ζ (dimensionless)')
    ax.set_xlabel('sample index')
    ax.set_ylabel('block (x_t → x_{t+1})')
    _tick_labels(ax, block_names, axis='y')
    ax.set_title(title)
    return _save(fig, path)


def nsi_step_scatter(pairs: Dict[str, Tuple[torch.Tensor, torch.Tensor]], path: str,
                     title: str = 'NSI vs mean step size') -> str:
    """Scatter of per-sample NSI against mean(Δ_t), one colour per block (Appendix D, Fig. 2a).

    Args:
        pairs (dict[str, tuple[Tensor, Tensor]]): block name -> ``(nsi (S,), step (S,))``;
            the legend shows each block's Pearson r.
    """
    from mmstiff.analysis.stiffness import pearson_correlation
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    cmap = plt.get_cmap('viridis')
    for i, (name, (nsi, step)) in enumerate(pairs.items()):
        nsi, step = torch.as_tensor(nsi).double(), torch.as_tensor(step).double()
        r = pearson_correlation(step, nsi)
        ax.scatter(step.numpy(), nsi.numpy(), s=8, alpha=0.6, color=cmap(i / max(1,
                                                                                 len(pairs) - 1)),
                   label=f'{name} (r={r:.2f})')
    ax.set_xlabel('mean step size Δ_t (dimensionless)')
    ax.set_ylabel('NSI ζ (dimensionless)')
    ax.set_title(title)
    if pairs:
        ax.legend(fontsize=6, ncol=2 if len(pairs) > 8 else 1, loc='best')
    return _save(fig, path)


def per_block_lines(block_names: Sequence[str], series: Dict[str, Values], path: str, ylabel: str,
                    title: str, hline: Optional[float] = None,
                    xlabel: str = 'block (state after the step)') -> str:
    """Values per block (x: block in trajectory order), one line per series.

    MSA steps of transformer layers are shaded grey (How-do-ViTs paper, Fig. 8).

    Args:
        block_names (Sequence[str]): x-axis labels.
        series (dict[str, Values]): legend label -> one value per block (``nan`` = gap).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.18 * len(block_names) + 3), 4.2))
    _shade_msa(ax, block_names)
    x = list(range(len(block_names)))
    for label, values in series.items():
        ax.plot(x, _as_list(values), marker='o', markersize=3, label=label)
    if hline is not None:
        ax.axhline(hline, color='0.5', linewidth=0.8, linestyle='--')
    _tick_labels(ax, block_names)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc='best')
    return _save(fig, path)


def bar_chart(values: Dict[str, float], path: str, ylabel: str, title: str) -> str:
    """One bar per key of ``values`` (dict[str, float])."""
    plt = _pyplot()
    names = list(values)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.6 * len(names) + 2), 3.8))
    bars = ax.bar(
        range(len(names)), [float(values[n]) for n in names], color='tab:blue', label=ylabel)
    ax.bar_label(bars, fmt='%.3g', fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha='right', fontsize=8)
    ax.set_xlabel('trajectory')
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def frequency_profiles(freqs: Union[Values, Dict[str, Values]], profiles: Dict[str, Values],
                       path: str, title: str = 'Relative log amplitude of feature maps') -> str:
    """Δ log amplitude vs normalised frequency, one curve per block coloured by depth
    (How-do-ViTs paper, Fig. 2a).

    Args:
        freqs (Values | dict[str, Values]): frequencies in units of π, shared by the blocks
            or per block (block -> its frequencies).
        profiles (dict[str, Values]): block -> relative log amplitude per frequency.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    cmap = plt.get_cmap('plasma')
    n = len(profiles)
    for i, (name, profile) in enumerate(profiles.items()):
        if isinstance(freqs, dict):
            f = _as_list(freqs[name])
        else:
            f = _as_list(freqs)
        ax.plot(f, _as_list(profile), color=cmap(i / max(1, n - 1)), linewidth=1,
                label=name if n <= 12 or i in (0, n - 1) else None)
    ax.set_xlabel('normalised frequency (×π rad/sample)')
    ax.set_ylabel('Δ log amplitude (log units, relative to 0π)')
    ax.set_title(title)
    ax.legend(fontsize=6, loc='lower left', title='block (light = deep)', title_fontsize=7)
    return _save(fig, path)


def attention_spectra(responses: Dict[str, Values], path: str,
                      title: str = 'Spectral response of attention maps') -> str:
    """||Λ_i|| per frequency band for each layer (anti-oversmoothing Fig. 2, 5).

    Args:
        responses (dict[str, Values]): layer -> response per band (band 0 = DC), averaged
            over heads and samples.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    cmap = plt.get_cmap('viridis')
    n = len(responses)
    for i, (name, values) in enumerate(responses.items()):
        values = _as_list(values)
        ax.plot(
            range(len(values)), values, color=cmap(i / max(1, n - 1)), marker='.', markersize=3,
            linewidth=1, label=name)
    ax.set_xlabel('frequency band index i of the token sequence (0 = DC)')
    ax.set_ylabel('response ||Λ_i||₂ (dimensionless)')
    ax.set_yscale('log')
    ax.set_title(title)
    ax.legend(fontsize=6, ncol=2 if n > 8 else 1)
    return _save(fig, path)


def noise_robustness(freqs: Values, drops: Dict[str, Values], path: str,
                     title: str = 'Accuracy drop under frequency-band noise') -> str:
    """Accuracy drop vs the noise band's centre frequency (How-do-ViTs paper, Fig. 2b).

    Args:
        freqs (Values): band centres in units of π.
        drops (dict[str, Values]): label -> drop in accuracy (percentage points) per band.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for label, values in drops.items():
        ax.plot(_as_list(freqs), _as_list(values), marker='o', label=label)
    ax.axhline(0.0, color='0.5', linewidth=0.8, linestyle='--')
    ax.set_xlabel('noise band centre frequency (×π rad/sample)')
    ax.set_ylabel('accuracy drop (percentage points)')
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def training_curves(curves: Dict[str, Tuple[Sequence[int], Values]], path: str, ylabel: str,
                    title: str, max_series: int = 12, xlabel: str = 'training iteration') -> str:
    """Scalar curves over training iterations (or epochs: ``xlabel``), one line per series.

    Args:
        curves (dict[str, tuple[Sequence[int], Values]]): label -> ``(steps, values)``.
        max_series (int): more series than this are drawn in a depth colour map with a
            legend showing only the first and the last.
        xlabel (str): what the steps count.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    cmap = plt.get_cmap('viridis')
    n = len(curves)
    for i, (label, (steps, values)) in enumerate(curves.items()):
        color = cmap(i / max(1, n - 1)) if n > max_series else None
        show = n <= max_series or i in (0, n - 1)
        ax.plot(
            list(steps), _as_list(values), color=color, linewidth=1.2, marker='.', markersize=3,
            label=label if show else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if n:
        ax.legend(fontsize=7, loc='best')
    return _save(fig, path)
