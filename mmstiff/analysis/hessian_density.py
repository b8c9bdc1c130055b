"""The trace and the spectral density of a loss Hessian from Hessian-vector products
(docs/methods.md §12).

PyHessian (Yao et al., https://arxiv.org/abs/1912.07145, §3) summarises the whole Hessian, not
only its top eigenvalues, in two ways, both here:

* :func:`hutchinson_trace`: ``tr H ≈ (1/n) Σ_l v_lᵀ H v_l`` with Rademacher (or Gaussian)
  ``v_l``, unbiased, with the standard error of the mean over the ``n`` draws.
* :func:`slq_density`: stochastic Lanczos quadrature (Ubaru et al. 2017; Ghorbani et al. 2019).
  From each of ``n`` random unit starts ``v_l``, ``m`` Lanczos steps give ``T_l = U Θ Uᵀ``; the
  nodes ``θ_{l,k}`` and weights ``τ_{l,k} = U_{0,k}²`` are the Gauss quadrature of the measure
  ``Σ_i (q_iᵀ v_l)² δ(t − λ_i)``, exact for polynomials of degree ``< 2m``.
  :func:`density_on_grid` smooths them with a Gaussian into ``φ(t) = (1/n) Σ_l Σ_k τ_{l,k}
  g_σ(t − θ_{l,k})``, which integrates to 1.
"""
from typing import Callable, NamedTuple, Optional, Sequence, Union

import torch
from torch.types import Device

from mmstiff.analysis.hessian import lanczos_tridiagonal, tridiagonal
from mmstiff.utils.checks import check_positive_int

DISTRIBUTIONS = ('rademacher', 'gaussian')
#: PyHessian's defaults: 100 Lanczos steps, one run; its smoothing σ² = 1e-5 · (range or 1).
SLQ_STEPS = 100
SLQ_RUNS = 1
SIGMA_SQUARED = 1e-5
#: ``v -> M v``: a symmetric operator on flat vectors
_MatVec = Callable[[torch.Tensor], torch.Tensor]


class TraceEstimate(NamedTuple):
    """Hutchinson's estimate of ``tr H``.

    Attributes:
        trace (float): the mean of ``vᵀ H v`` over the draws.
        std_error (float): its standard error (nan for one draw).
        samples (Tensor): ``(n,)`` float64, each ``vᵀ H v``.
    """
    trace: float
    std_error: float
    samples: torch.Tensor


class SpectralDensity(NamedTuple):
    """The quadrature of stochastic Lanczos quadrature, one row per run.

    Attributes:
        nodes (list[Tensor]): per run, the Ritz values ``θ`` (ascending, float64).
        weights (list[Tensor]): per run, ``τ = U_{0,k}²`` (summing to 1).
        dim (int): the operator's size (``dim · Σ τ θ`` estimates the trace).
    """
    nodes: list
    weights: list
    dim: int


def _random_vector(dim, distribution, generator, dtype, device):
    if distribution == 'rademacher':
        v = torch.randint(0, 2, (dim, ), generator=generator).double() * 2 - 1
    else:
        v = torch.randn(dim, generator=generator, dtype=torch.float64)
    return v.to(dtype=dtype, device=device)


def _check_distribution(distribution):
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f'distribution={distribution!r} is not supported; expected one of '
                         f'{DISTRIBUTIONS}')


def hutchinson_trace(matvec: _MatVec, dim: int, num_samples: int = 100,
                     generator: Optional[torch.Generator] = None,
                     dtype: torch.dtype = torch.float32, device: Device = None,
                     distribution: str = 'rademacher') -> TraceEstimate:
    """Hutchinson's estimate of the trace of a symmetric operator.

    Args:
        matvec (callable): ``v -> M v`` on flat ``(dim,)`` tensors.
        dim (int): the size of the vectors.
        num_samples (int): random vectors (one product each).
        generator (torch.Generator, optional): for the draws (on the CPU).
        dtype, device: of the vectors.
        distribution (str): ``'rademacher'`` (entries ±1, the least variance: ``2 Σ_{i≠j}
            M_ij²`` per draw) or ``'gaussian'``.

    Returns:
        TraceEstimate
    """
    check_positive_int('num_samples', num_samples)
    check_positive_int('dim', dim)
    _check_distribution(distribution)
    samples = []
    for _ in range(num_samples):
        v = _random_vector(dim, distribution, generator, dtype, device)
        samples.append(float(torch.dot(matvec(v).double(), v.double())))
    samples = torch.tensor(samples, dtype=torch.float64)
    error = float(samples.std() / num_samples**0.5) if num_samples > 1 else float('nan')
    return TraceEstimate(float(samples.mean()), error, samples)


def slq_density(matvec: _MatVec, dim: int, num_runs: int = SLQ_RUNS, steps: int = SLQ_STEPS,
                generator: Optional[torch.Generator] = None, dtype: torch.dtype = torch.float32,
                device: Device = None) -> SpectralDensity:
    """Stochastic Lanczos quadrature: per run, the Ritz values and their weights from a random
    Rademacher start scaled to unit norm (PyHessian's ``density``).

    Returns:
        SpectralDensity
    """
    check_positive_int('num_runs', num_runs)
    check_positive_int('steps', steps)
    check_positive_int('dim', dim)
    nodes, weights = [], []
    for _ in range(num_runs):
        v = _random_vector(dim, 'rademacher', generator, dtype, device)
        alphas, betas = lanczos_tridiagonal(matvec, v / v.norm(), steps)
        theta, u = torch.linalg.eigh(tridiagonal(alphas, betas))
        nodes.append(theta)
        weights.append(u[0]**2)
    return SpectralDensity(nodes, weights, dim)


def quadrature_moment(density: SpectralDensity, power: int) -> float:
    """``(1/n) Σ_l Σ_k τ_{l,k} θ_{l,k}^power``: the estimate of ``tr(H^power) / dim`` (exact for
    one run's start ``v``: ``vᵀ H^power v`` while ``power < 2m``)."""
    return float(
        sum((w * t**power).sum()
            for t, w in zip(density.nodes, density.weights)) / len(density.nodes))


def smoothing_width(density: SpectralDensity, sigma_squared: float = SIGMA_SQUARED) -> float:
    """PyHessian's Gaussian width: ``σ² = sigma_squared · max(1, θ_max − θ_min)``."""
    theta = torch.cat(density.nodes)
    return (sigma_squared * max(1.0, float(theta.max() - theta.min())))**0.5


def density_on_grid(density: SpectralDensity, grid: Union[torch.Tensor, Sequence[float]],
                    sigma: float) -> torch.Tensor:
    """``φ(t)`` on the points ``grid``: the quadrature smoothed by a Gaussian of width
    ``sigma``, averaged over the runs.

    Returns:
        Tensor: ``(len(grid),)`` float64.
    """
    if not sigma > 0:
        raise ValueError(f'sigma={sigma!r} is not supported; expected a positive float')
    grid = torch.as_tensor(grid, dtype=torch.float64).flatten()
    total = torch.zeros_like(grid)
    for theta, tau in zip(density.nodes, density.weights):
        kernel = torch.exp(-(grid[:, None] - theta[None])**2 / (2 * sigma**2))
        total += kernel @ tau / (sigma * (2 * torch.pi)**0.5)
    return total / len(density.nodes)


__all__ = [
    'TraceEstimate', 'SpectralDensity', 'hutchinson_trace', 'slq_density', 'quadrature_moment',
    'smoothing_width', 'density_on_grid', 'DISTRIBUTIONS'
]
