"""Eigenvalues of the loss Hessian by power iteration and Lanczos on Hessian-vector products.

The How-do-ViTs paper's Hessian max-eigenvalue spectrum, NEP and APE, the deflation, the shift
for the most negative eigenvalue and when to use Lanczos: docs/methods.md §12.
The trace (Hutchinson) and the whole spectrum's density (stochastic Lanczos quadrature) are in
:mod:`mmstiff.analysis.hessian_density`.
"""
import contextlib
import math
from typing import Callable, Iterable, Iterator, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch.types import Device

from mmstiff.utils.checks import check_positive_int
from mmstiff.utils.reference_steps import reference_steps

#: PyHessian's defaults: at most 100 products per eigenvalue, stop at a relative change < 1e-3.
MAX_ITER = 100
TOL = 1e-3
#: Lanczos steps (Hessian-vector products) by default; they keep ``steps`` vectors in memory.
LANCZOS_STEPS = 50
METHODS = ('power', 'lanczos')
CRITERIA = ('eigenvalue', 'residual')
#: ``v -> M v``: a symmetric operator on flat vectors
_MatVec = Callable[[torch.Tensor], torch.Tensor]


class EigenPairs(NamedTuple):
    """Eigenvalues found by power iteration, in the order found (decreasing ``|λ|``).

    Attributes:
        values (Tensor): ``(k,)`` float64.
        vectors (Tensor): ``(k, P)`` unit eigenvectors (flat, in the operator's dtype).
        iterations (tuple[int]): Hessian-vector products spent on each eigenvalue.
        converged (tuple[bool]): whether each met its stopping rule before ``max_iter``.
    """
    values: torch.Tensor
    vectors: torch.Tensor
    iterations: Tuple[int, ...]
    converged: Tuple[bool, ...]


class HessianEigenvalues(NamedTuple):
    """What :func:`hessian_eigenvalues` finds on one loss.

    Attributes:
        values (Tensor): ``(k,)`` float64, the eigenvalues of largest magnitude.
        most_negative (float | None): the smallest eigenvalue ``λ_min`` (None if not asked).
        iterations (int): Hessian-vector products spent in all.
        converged (bool): whether every power iteration met its stopping rule (always True
            for Lanczos, which runs its steps).
    """
    values: torch.Tensor
    most_negative: object
    iterations: int
    converged: bool


@contextlib.contextmanager
def double_backward_kernels(*models: torch.nn.Module) -> Iterator[None]:
    """Run the kernels that have a double backward inside: ``scaled_dot_product_attention``'s
    math kernel (the fused flash and memory-efficient kernels have none) and, in the residual
    blocks of ``models``, the reference step (the fused step's backward passes are not
    differentiable: :mod:`mmstiff.utils.reference_steps`)."""
    with reference_steps(*models):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:  # pragma: no cover - torch < 2.3
            yield
            return
        with sdpa_kernel([SDPBackend.MATH]):
            yield


def flat_gradient(loss: torch.Tensor, params: Iterable[torch.Tensor]) -> torch.Tensor:
    """``∇L`` as one flat vector, with its graph (``create_graph=True``) for the double backward;
    parameters the loss does not depend on get zeros."""
    params = list(params)
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                      for p, g in zip(params, grads)])


def hessian_vector_product(grad: torch.Tensor, params: Iterable[torch.Tensor],
                           vector: torch.Tensor) -> torch.Tensor:
    """``H v``: the gradient of ``∇L · v`` (``grad`` from :func:`flat_gradient`), flat.

    The graph of ``grad`` is kept, so that the product can be taken again with other vectors.
    """
    params = list(params)
    if not grad.requires_grad:  # the loss is linear in every parameter: H = 0
        return torch.zeros_like(vector)
    products = torch.autograd.grad(grad, params, grad_outputs=vector, retain_graph=True,
                                   allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if h is None else h).reshape(-1)
                      for p, h in zip(params, products)])


def loss_hessian(loss: torch.Tensor, params: Iterable[torch.Tensor]) -> Tuple[_MatVec, int]:
    """The operator ``v -> H v`` of the Hessian of the scalar ``loss`` in ``params`` (flat
    vectors of ``sum(p.numel())`` entries), and that size."""
    params = list(params)
    grad = flat_gradient(loss, params)
    return (lambda v: hessian_vector_product(grad, params, v)), grad.numel()


def _orthogonalise(v, basis):
    for u in basis:
        v = v - torch.dot(u, v) * u
    return v


def _unit(v):
    norm = v.norm()
    return v / norm if norm > 0 else v


def _check_iteration(max_iter, tol):
    check_positive_int('max_iter', max_iter)
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol > 0):
        raise ValueError(f'tol={tol!r} is not supported; expected a positive float')


def _random_unit(dim, generator, dtype, device, basis=()):
    v = torch.randn(dim, generator=generator, dtype=torch.float64).to(dtype=dtype, device=device)
    return _unit(_orthogonalise(v, basis))


def power_iteration(matvec: _MatVec, dim: int, num_eigs: int = 1, max_iter: int = MAX_ITER,
                    tol: float = TOL, generator: Optional[torch.Generator] = None,
                    dtype: torch.dtype = torch.float32, device: Device = None,
                    criterion: str = 'eigenvalue') -> EigenPairs:
    """The ``num_eigs`` eigenvalues of largest magnitude of a symmetric operator, by power
    iteration with deflation (PyHessian's algorithm).

    For each eigenvalue: start from a random unit vector orthogonal to the eigenvectors already
    found; repeat ``λ = vᵀ M v``, ``v ← M v / ‖M v‖`` (orthogonalised again) until the stopping
    rule holds or ``max_iter`` products are spent.

    Args:
        matvec (callable): ``v -> M v`` on flat ``(dim,)`` tensors.
        dim (int): the size of the vectors.
        num_eigs (int): how many eigenvalues. At most ``dim``.
        max_iter (int): products per eigenvalue at most.
        tol (float): the tolerance of the stopping rule.
        generator (torch.Generator, optional): for the random starts (drawn on the CPU).
        dtype, device: of the vectors.
        criterion (str): ``'eigenvalue'`` (PyHessian's: ``|λ − λ_prev| < tol · (|λ_prev| +
            1e-6)``) or ``'residual'`` (``‖M v − λ v‖ < tol · |λ|``, stricter: it does not stop
            while ``v`` is a mixture of eigenvectors).

    Returns:
        EigenPairs: ``values`` (float64) in the order found, the unit ``vectors``, the products
        spent per eigenvalue and whether each converged.
    """
    check_positive_int('num_eigs', num_eigs)
    check_positive_int('dim', dim)
    _check_iteration(max_iter, tol)
    if criterion not in CRITERIA:
        raise ValueError(f'criterion={criterion!r} is not supported; expected one of {CRITERIA}')
    if num_eigs > dim:
        raise ValueError(f'num_eigs={num_eigs} is larger than the dimension {dim}')
    values, vectors, iterations, converged = [], [], [], []
    for _ in range(num_eigs):
        v = _random_unit(dim, generator, dtype, device, vectors)
        eigenvalue, count, done = None, 0, False
        for count in range(1, max_iter + 1):
            mv = _orthogonalise(matvec(v), vectors)
            current = float(torch.dot(mv.double(), v.double()))
            if criterion == 'residual':
                done = float((mv - current * v).norm()) < tol * abs(current)
            elif eigenvalue is not None:
                done = abs(current - eigenvalue) < tol * (abs(eigenvalue) + 1e-6)
            eigenvalue = current
            v = _unit(mv)
            if done:
                break
        values.append(eigenvalue)
        vectors.append(v)
        iterations.append(count)
        converged.append(done)
    return EigenPairs(
        torch.tensor(values, dtype=torch.float64), torch.stack(vectors), tuple(iterations),
        tuple(converged))


def most_negative_eigenvalue(matvec: _MatVec, dim: int, shift: Union[float, torch.Tensor],
                             max_iter: int = MAX_ITER, tol: float = TOL,
                             generator: Optional[torch.Generator] = None,
                             dtype: torch.dtype = torch.float32,
                             device: Device = None) -> Tuple[float, int, bool]:
    """The smallest eigenvalue ``λ_min`` of a symmetric operator ``M``: power iteration on
    ``M − s I`` with ``s = |shift|``, stopped on the residual.

    With ``s ≥ λ_max`` every eigenvalue of ``M − s I`` is ``≤ 0`` and the one of largest
    magnitude is ``λ_min − s``; ``|λ_dom|`` (the first value of :func:`power_iteration`)
    bounds ``λ_max`` and is the shift to pass.

    Returns:
        tuple[float, int, bool]: ``λ_min``, the products spent and whether it converged.
    """
    s = abs(float(shift))
    if not math.isfinite(s):
        raise ValueError(f'shift={shift!r} is not supported; expected a finite float')
    pairs = power_iteration(lambda v: matvec(v) - s * v, dim, 1, max_iter, tol, generator, dtype,
                            device, criterion='residual')
    return float(pairs.values[0]) + s, pairs.iterations[0], pairs.converged[0]


def lanczos_tridiagonal(matvec: _MatVec, start: torch.Tensor,
                        steps: int = LANCZOS_STEPS) -> Tuple[torch.Tensor, torch.Tensor]:
    """``steps`` Lanczos steps on a symmetric operator from the unit vector ``start``: the
    diagonal ``α`` and off-diagonal ``β`` of ``T = Q_mᵀ M Q_m``, each new vector
    reorthogonalised against all the previous ones, twice.

    Stops early where a Krylov space closes (then ``T`` holds its eigenvalues exactly).

    Returns:
        tuple[Tensor, Tensor]: ``α`` ``(m,)`` and ``β`` ``(m − 1,)``, float64, ``m ≤ steps``.
    """
    check_positive_int('steps', steps)
    dim = start.numel()
    steps = min(steps, dim)
    basis = torch.empty(steps, dim, dtype=start.dtype, device=start.device)  # by row
    basis[0] = start
    alphas, betas = [], []
    for j in range(steps):
        w = matvec(basis[j])
        alpha = float(torch.dot(w.double(), basis[j].double()))
        alphas.append(alpha)
        if j == steps - 1:
            break
        done = basis[:j + 1]
        for _ in range(2):
            w = w - done.T @ (done @ w)
        beta = float(w.norm())
        if beta <= 1e-10 * max(1.0, abs(alpha)):
            break  # an invariant subspace: T holds its eigenvalues exactly
        betas.append(beta)
        basis[j + 1] = w / beta
    return (torch.tensor(alphas, dtype=torch.float64), torch.tensor(betas, dtype=torch.float64))


def tridiagonal(alphas: torch.Tensor, betas: torch.Tensor) -> torch.Tensor:
    """The symmetric tridiagonal matrix with diagonal ``alphas`` and off-diagonal ``betas``."""
    t = torch.diag(alphas.double())
    if len(betas):
        t = t + torch.diag(betas.double(), 1) + torch.diag(betas.double(), -1)
    return t


def lanczos_ritz_values(matvec: _MatVec, dim: int, steps: int = LANCZOS_STEPS,
                        generator: Optional[torch.Generator] = None,
                        dtype: torch.dtype = torch.float32, device: Device = None) -> torch.Tensor:
    """The Ritz values of ``steps`` Lanczos steps on a symmetric operator from a random start
    (:func:`lanczos_tridiagonal`). They interlace the spectrum and their extremes converge to
    ``λ_min`` and ``λ_max`` first; with ``steps = dim`` they are the whole spectrum.

    Returns:
        Tensor: ascending ``(m,)`` float64, ``m ≤ steps`` (fewer when a Krylov space closes).
    """
    check_positive_int('steps', steps)
    check_positive_int('dim', dim)
    alphas, betas = lanczos_tridiagonal(matvec, _random_unit(dim, generator, dtype, device), steps)
    return torch.linalg.eigvalsh(tridiagonal(alphas, betas))


def hessian_eigenvalues(loss: torch.Tensor, params: Iterable[torch.Tensor], num_eigs: int = 5,
                        negative: bool = False, max_iter: int = MAX_ITER, tol: float = TOL,
                        generator: Optional[torch.Generator] = None, method: str = 'power',
                        lanczos_steps: int = LANCZOS_STEPS) -> HessianEigenvalues:
    """The ``num_eigs`` Hessian eigenvalues of largest magnitude of one scalar ``loss`` (with its
    graph) in ``params``, and optionally the most negative one.

    Args:
        loss (Tensor): a scalar computed from ``params`` (e.g. the training loss of one batch
            plus :func:`~mmstiff.analysis.landscape.l2_penalty`).
        params (Iterable[Tensor]): the parameters (requiring grad).
        num_eigs (int): eigenvalues of largest magnitude to find (the paper: 5).
        negative (bool): also find ``λ_min``.
        max_iter, tol, generator: see :func:`power_iteration`.
        method (str): ``'power'`` (the paper's: :func:`power_iteration` with PyHessian's rule,
            ``λ_min`` by :func:`most_negative_eigenvalue`) or ``'lanczos'`` (the Ritz values of
            :func:`lanczos_ritz_values` ranked by magnitude, ``λ_min`` the smallest).
        lanczos_steps (int): Lanczos steps (products), at least ``num_eigs``.

    Returns:
        HessianEigenvalues
    """
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError('no parameter requires grad; expected at least one to differentiate')
    if not torch.is_tensor(loss) or loss.numel() != 1:
        raise ValueError(f'loss must be a scalar tensor, got {type(loss).__name__} '
                         f'{tuple(getattr(loss, "shape", ()))}')
    if method not in METHODS:
        raise ValueError(f'method={method!r} is not supported; expected one of {METHODS}')
    matvec, dim = loss_hessian(loss.reshape(()), params)
    dtype, device = params[0].dtype, params[0].device
    if method == 'lanczos':
        check_positive_int('num_eigs', num_eigs)
        if check_positive_int('lanczos_steps', lanczos_steps) < min(num_eigs, dim):
            raise ValueError(f'lanczos_steps={lanczos_steps} is smaller than num_eigs='
                             f'{num_eigs}; expected at least as many steps as eigenvalues')
        if num_eigs > dim:
            raise ValueError(f'num_eigs={num_eigs} is larger than the dimension {dim}')
        ritz = lanczos_ritz_values(matvec, dim, lanczos_steps, generator, dtype, device)
        order = sorted(range(len(ritz)), key=lambda i: -abs(float(ritz[i])))[:num_eigs]
        lowest = float(ritz[0]) if negative else None
        return HessianEigenvalues(ritz[order], lowest, len(ritz), True)
    pairs = power_iteration(matvec, dim, num_eigs, max_iter, tol, generator, dtype, device)
    spent, converged = sum(pairs.iterations), all(pairs.converged)
    lowest = None
    if negative:
        lowest, count, done = most_negative_eigenvalue(matvec, dim, pairs.values[0], max_iter, tol,
                                                       generator, dtype, device)
        spent, converged = spent + count, converged and done
    return HessianEigenvalues(pairs.values, lowest, spent, converged)


def negative_eigenvalue_proportion(values: Union[torch.Tensor, Sequence[float]]) -> float:
    """NEP (How-do-ViTs paper, Appendix C.5): the share of the spectrum's eigenvalues that are
    negative, ``∫_{-∞}^0 p(λ) dλ``; nan for an empty spectrum."""
    values = torch.as_tensor(values, dtype=torch.float64).flatten()
    if values.numel() == 0:
        return float('nan')
    return float((values < 0).double().mean())


def average_positive_eigenvalue(values: Union[torch.Tensor, Sequence[float]]) -> float:
    """APE (How-do-ViTs paper, Appendix C.5): the mean of the positive eigenvalues,
    ``∫_0^∞ λ p(λ) dλ / ∫_0^∞ p(λ) dλ``; nan when none is positive."""
    values = torch.as_tensor(values, dtype=torch.float64).flatten()
    positive = values[values > 0]
    return float(positive.mean()) if positive.numel() else float('nan')


__all__ = [
    'EigenPairs', 'HessianEigenvalues', 'double_backward_kernels', 'flat_gradient',
    'hessian_vector_product', 'loss_hessian', 'power_iteration', 'most_negative_eigenvalue',
    'lanczos_tridiagonal', 'tridiagonal', 'lanczos_ritz_values', 'hessian_eigenvalues',
    'negative_eigenvalue_proportion', 'average_positive_eigenvalue', 'MAX_ITER', 'TOL',
    'LANCZOS_STEPS', 'METHODS'
]
