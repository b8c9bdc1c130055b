"""Relaxation systems whose stiffness is known by construction, and their exact flow
(docs/methods.md §14).

A system of ``d = 2m`` coordinates is written in mode coordinates ``z = (s, y) = Qᵀ x`` (``Q``
a random rotation, so every coordinate of ``x`` mixes modes): ``m`` slow modes and ``m`` fast
modes relaxing to 0 at rates ``r_1 < … < r_d`` spaced geometrically in ``[1, S]``, ``S`` the
eigenvalue spread (the stiffness ratio of the linear system):

    s_j' = −r_j s_j,        y_j' = −r_{m+j} (1 + c s_j²) y_j        (j = 1 … m)

``c = 0`` is the linear system; ``c > 0`` makes the rate of each fast mode grow with its slow
partner's amplitude, so the local stiffness changes along every trajectory and between
trajectories. Both have a closed-form flow (:func:`flow`), and the Jacobian in mode coordinates
is triangular, so its eigenvalues are ``−r_j`` and ``−r_{m+j} (1 + c s_j²)``
(:func:`local_eigenvalues`). Everything is float64 torch, deterministic from its seeds.
"""
from typing import NamedTuple

import torch

from mmstiff.utils.checks import check_positive_int


class RelaxationSystem(NamedTuple):
    """A relaxation system (module docstring).

    Attributes:
        rotation (Tensor): ``Q``, ``(d, d)`` orthogonal float64; ``x = Q z``.
        rates (Tensor): ``r``, ``(d,)`` ascending positive float64 (slow half first).
        coupling (float): ``c`` (0: linear).
    """
    rotation: torch.Tensor
    rates: torch.Tensor
    coupling: float

    @property
    def dim(self) -> int:
        """``d``, the number of coordinates."""
        return self.rates.numel()


def make_system(dim: int = 8, spread: float = 100.0, coupling: float = 0.0,
                seed: int = 0) -> RelaxationSystem:
    """The system of ``dim`` coordinates (even) with rates geometric in ``[1, spread]``.

    Args:
        dim (int): ``d = 2m``, even, at least 2.
        spread (float): ``S ≥ 1``, the ratio of the largest to the smallest rate.
        coupling (float): ``c ≥ 0``.
        seed (int): the seed of the rotation ``Q`` (QR of a Gaussian matrix, signs fixed).
    """
    check_positive_int('dim', dim)
    if dim % 2:
        raise ValueError(f'dim={dim!r} is not supported; expected an even number of '
                         'coordinates (half slow, half fast modes)')
    spread, coupling = float(spread), float(coupling)
    if not spread >= 1:
        raise ValueError(f'spread={spread!r} is not supported; expected a float >= 1')
    if not coupling >= 0:
        raise ValueError(f'coupling={coupling!r} is not supported; expected a float >= 0')
    gen = torch.Generator().manual_seed(int(seed))
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))  # a unique Q for the draw
    rates = torch.logspace(0, torch.log10(torch.tensor(spread)).item(), dim, dtype=torch.float64)
    return RelaxationSystem(q, rates, coupling)


def _split(system, z):
    m = system.dim // 2
    return z[..., :m], z[..., m:], system.rates[:m], system.rates[m:]


def vector_field(system: RelaxationSystem, x: torch.Tensor) -> torch.Tensor:
    """``x' = F(x)`` for states ``(..., d)`` (the right-hand side, for an ODE solver)."""
    z = x @ system.rotation  # z = Qᵀ x, row-wise
    s, y, slow, fast = _split(system, z)
    dz = torch.cat([-slow * s, -fast * (1 + system.coupling * s**2) * y], dim=-1)
    return dz @ system.rotation.T


def flow(system: RelaxationSystem, x0: torch.Tensor, t: float) -> torch.Tensor:
    """The exact state at time ``t`` of the trajectories starting at ``x0`` ``(..., d)``.

    ``s(t) = s₀ e^{−r t}``; ``y(t) = y₀ exp(−r' (t + c s₀² (1 − e^{−2 r t}) / (2 r)))``.
    """
    t = float(t)
    z0 = x0.to(torch.float64) @ system.rotation
    s0, y0, slow, fast = _split(system, z0)
    s = s0 * torch.exp(-slow * t)
    integral = s0**2 * (1 - torch.exp(-2 * slow * t)) / (2 * slow)  # ∫₀ᵗ s² dτ
    y = y0 * torch.exp(-fast * (t + system.coupling * integral))
    return torch.cat([s, y], dim=-1) @ system.rotation.T


def trajectory(system: RelaxationSystem, x0: torch.Tensor, horizon: float,
               num_steps: int) -> torch.Tensor:
    """The exact states at ``t_l = l · horizon / num_steps``, ``l = 1 … num_steps``:
    ``(..., num_steps, d)``."""
    check_positive_int('num_steps', num_steps)
    times = [horizon * (i + 1) / num_steps for i in range(num_steps)]
    return torch.stack([flow(system, x0, t) for t in times], dim=-2)


def local_eigenvalues(system: RelaxationSystem, x: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of the Jacobian ``∂F/∂x`` at ``x`` ``(..., d)``: ``−r_j`` and
    ``−r_{m+j} (1 + c s_j²)`` (the Jacobian is triangular in mode coordinates)."""
    s, _, slow, fast = _split(system, x.to(torch.float64) @ system.rotation)
    slow = slow.expand_as(s)
    return torch.cat([-slow, -fast * (1 + system.coupling * s**2)], dim=-1)


def local_stiffness(system: RelaxationSystem, x: torch.Tensor) -> torch.Tensor:
    """The local stiffness at ``x``: the spectral radius ``max |λ|`` of the Jacobian (the rate
    of the fastest mode there, which bounds an explicit step), ``(...)``."""
    return local_eigenvalues(system, x).abs().amax(dim=-1)


def stiffness_ratio(system: RelaxationSystem, x: torch.Tensor) -> torch.Tensor:
    """``max |λ| / min |λ|`` of the Jacobian at ``x``; ``S`` everywhere for the linear system."""
    magnitudes = local_eigenvalues(system, x).abs()
    return magnitudes.amax(dim=-1) / magnitudes.amin(dim=-1)


def initial_states(num: int, dim: int, seed: int) -> torch.Tensor:
    """``num`` starting states ``x₀ ~ N(0, I_d)``, deterministic from ``seed``."""
    check_positive_int('num', num)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(num, dim, generator=gen, dtype=torch.float64)


__all__ = [
    'RelaxationSystem', 'make_system', 'vector_field', 'flow', 'trajectory', 'local_eigenvalues',
    'local_stiffness', 'stiffness_ratio', 'initial_states'
]
