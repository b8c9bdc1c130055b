"""Figures of the How-do-ViTs paper's optimisation instruments (docs/methods.md §12).

"How Do Vision Transformers Work?" (Park and Kim, ICLR 2022, https://arxiv.org/abs/2202.06709):
the Hessian max-eigenvalue spectrum (Fig. 1c, 4), the loss landscape along filter-normalised
directions (Fig. 1a, C.4a) and the feature-map variance along the depth (Fig. 9, D.1). Every
function takes plain numbers (lists, tensors), writes one PNG with labelled axes and units and
returns its path; matplotlib loads on the first figure, through :mod:`.plots`.
"""
import math
from typing import Collection, Dict, Sequence, Union

import torch

from .plots import Values, _as_list, _pyplot, _save

#: A grid of numbers as the landscape figures take it: a 2-D tensor or rows of floats.
Grid = Union[torch.Tensor, Sequence[Sequence[float]]]


def _finite(values):
    return [v for v in _as_list(values) if math.isfinite(v)]


def _grid(values):
    return torch.as_tensor(values, dtype=torch.float64).numpy()


def eigenvalue_spectrum(spectra: Dict[str, Values], path: str, bins: int = 40,
                        title: str = 'Hessian max-eigenvalue spectrum') -> str:
    """Density of the Hessian eigenvalues found on each batch, one histogram per label
    (How-do-ViTs paper, Fig. 4).

    Args:
        spectra (dict[str, Values]): label (e.g. with its NEP and APE) -> eigenvalues,
            all batches together.
        bins (int): histogram bins over the range of every spectrum.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    values = {label: _finite(v) for label, v in spectra.items()}
    every = [v for vs in values.values() for v in vs]
    if every:
        low, high = min(every), max(every)
        if low == high:
            low, high = low - 0.5 * (abs(low) or 1.0), high + 0.5 * (abs(high) or 1.0)
        edges = torch.linspace(low, high, bins + 1).tolist()
        for label, vs in values.items():
            if vs:
                ax.hist(vs, bins=edges, density=True, histtype='stepfilled', alpha=0.45,
                        label=f'{label} ({len(vs)} values)')
    ax.axvline(0.0, color='0.3', linewidth=0.8, linestyle='--')
    ax.set_xlabel('Hessian eigenvalue λ (loss units per squared weight unit)')
    ax.set_ylabel('density p(λ) (1/λ units)')
    ax.set_title(title)
    if every:
        ax.legend(fontsize=7, loc='best')
    return _save(fig, path)


def landscape_line(coords: Values, series: Dict[str, Values], path: str,
                   title: str = 'Loss along a filter-normalised direction') -> str:
    """The loss along one direction, ``L(w + α d)``, one line per series (total, NLL, ℓ2).

    Args:
        coords (Values): the coordinates α.
        series (dict[str, Values]): label -> loss at each coordinate.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    alphas = _as_list(coords)
    for label, values in series.items():
        ax.plot(alphas, _as_list(values), marker='o', markersize=3, label=label)
    ax.axvline(0.0, color='0.5', linewidth=0.8, linestyle='--')
    ax.set_xlabel('α (step along d, in units of the filter norms)')
    ax.set_ylabel('loss (nats per sample)')
    ax.set_title(title)
    ax.legend(fontsize=8, loc='best')
    return _save(fig, path)


def landscape_contour(alphas: Values, betas: Values, losses: Grid, path: str, levels: int = 30,
                      title: str = 'Loss landscape (contours)') -> str:
    """Contours of ``L(w + α d₁ + β d₂)`` (How-do-ViTs paper, Fig. 1a as a map).

    Args:
        alphas, betas (Values): the coordinates.
        losses (Tensor | Sequence[Sequence[float]]): ``(len(betas), len(alphas))``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    z = _grid(losses)
    contours = ax.contourf(_as_list(alphas), _as_list(betas), z, levels=levels, cmap='plasma')
    ax.contour(_as_list(alphas), _as_list(betas), z, levels=levels, colors='k', linewidths=0.3)
    fig.colorbar(contours, ax=ax, label='loss (nats per sample)')
    ax.plot([0.0], [0.0], marker='*', color='white', markersize=10, label='trained weights')
    ax.set_xlabel('α (along d₁)')
    ax.set_ylabel('β (along d₂)')
    ax.set_title(title)
    ax.legend(fontsize=7, loc='upper right')
    return _save(fig, path)


def landscape_surface(alphas: Values, betas: Values, losses: Grid, path: str,
                      title: str = 'Loss landscape (surface)') -> str:
    """``L(w + α d₁ + β d₂)`` as a 3-D surface (How-do-ViTs paper, Fig. 1a)."""
    plt = _pyplot()
    fig = plt.figure(figsize=(6.0, 5.0))
    ax = fig.add_subplot(projection='3d')
    a, b = torch.meshgrid(
        torch.as_tensor(_as_list(alphas), dtype=torch.float64),
        torch.as_tensor(_as_list(betas), dtype=torch.float64), indexing='xy')
    z = _grid(losses)
    finite = z[z == z]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    surface = ax.plot_surface(a.numpy(), b.numpy(), z, cmap='plasma', vmin=low, vmax=high,
                              linewidth=0, antialiased=True)
    fig.colorbar(surface, ax=ax, shrink=0.6, pad=0.15, label='loss (nats per sample)')
    ax.set_xlabel('α (along d₁)')
    ax.set_ylabel('β (along d₂)')
    ax.set_zlabel('loss (nats per sample)')
    ax.set_title(title)
    return _save(fig, path)


def feature_variance(names: Sequence[str], values: Values, path: str, msa: Collection[str] = (),
                     subsampling: Collection[str] = (),
                     title: str = 'Feature-map variance along the depth') -> str:
    """Feature-map variance per state against the normalised depth, MSA steps shaded grey and
    subsampling states blue (How-do-ViTs paper, Fig. 9).

    Args:
        names (Sequence[str]): the states, in trajectory order.
        values (Values): the variance of each.
        msa (Collection[str]): states that follow an MSA step.
        subsampling (Collection[str]): states made by a subsampling (projected shortcut).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 0.12 * len(names) + 4), 4.2))
    depth = max(1, len(names) - 1)
    x = [i / depth for i in range(len(names))]
    for i, name in enumerate(names):
        if name in msa or name in subsampling:
            ax.axvspan((i - 1) / depth, i / depth, lw=0, alpha=0.18,
                       color='tab:gray' if name in msa else 'tab:blue')
    ax.plot(x, _as_list(values), marker='o', markersize=3, color='tab:red',
            label='mean over samples')
    handles = []
    if msa:
        handles.append(plt.Rectangle((0, 0), 1, 1, color='tab:gray', alpha=0.18, label='MSA step'))
    if subsampling:
        handles.append(
            plt.Rectangle((0, 0), 1, 1, color='tab:blue', alpha=0.18, label='subsampling'))
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel('normalised depth (state index / last index)')
    ax.set_ylabel('feature-map variance (squared feature units)')
    ax.set_title(title)
    line_handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=line_handles + handles, fontsize=8, loc='upper left')
    secondary = ax.secondary_xaxis('top')
    step = max(1, (len(names) + 29) // 30)
    secondary.set_xticks(x[::step])
    secondary.set_xticklabels(names[::step], rotation=90, fontsize=6)
    return _save(fig, path)


__all__ = [
    'eigenvalue_spectrum', 'landscape_line', 'landscape_contour', 'landscape_surface',
    'feature_variance'
]
