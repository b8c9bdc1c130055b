"""Hutchinson's trace and stochastic Lanczos quadrature against the exact Hessian of a small
network (torch.autograd.functional.hessian)."""
import pytest
import torch
import torch.nn.functional as F

from mmstiff.analysis.hessian import loss_hessian
from mmstiff.analysis.hessian_density import (density_on_grid, hutchinson_trace, quadrature_moment,
                                              slq_density, smoothing_width)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _network_loss():
    """A 2-layer tanh network regressing random targets: its loss as a function of the flat
    parameters, the flat parameters, and the exact Hessian there (26 × 26, indefinite; a
    squared error, so no shift invariance of a softmax leaves it a repeated zero eigenvalue)."""
    gen = _gen(7)
    x = torch.randn(12, 3, generator=gen, dtype=torch.float64)
    y = 3 * torch.randn(12, 2, generator=gen, dtype=torch.float64)
    shapes = [(4, 3), (4, ), (2, 4), (2, )]
    sizes = [int(torch.tensor(s).prod()) for s in shapes]

    def loss_of(flat):
        w1, b1, w2, b2 = [t.view(s) for t, s in zip(flat.split(sizes), shapes)]
        return F.mse_loss(torch.tanh(x @ w1.T + b1) @ w2.T + b2, y)

    flat = torch.randn(sum(sizes), generator=gen, dtype=torch.float64)
    exact = torch.autograd.functional.hessian(loss_of, flat)
    return loss_of, flat, exact


def _operator():
    loss_of, flat, exact = _network_loss()
    params = flat.clone().requires_grad_(True)
    matvec, dim = loss_hessian(loss_of(params), [params])
    return matvec, dim, exact


def test_hessian_vector_products_are_the_exact_hessians():
    matvec, dim, exact = _operator()
    assert torch.allclose(matvec(torch.eye(dim, dtype=torch.float64)[3]), exact[3], atol=1e-12)
    eigenvalues = torch.linalg.eigvalsh(exact)
    assert eigenvalues.min() < 0 < eigenvalues.max()  # a non-trivial, indefinite Hessian


@pytest.mark.parametrize('distribution', ['rademacher', 'gaussian'])
def test_hutchinson_trace_is_within_its_error_of_the_exact_trace(distribution):
    matvec, dim, exact = _operator()
    n = 400
    found = hutchinson_trace(matvec, dim, n, _gen(1), torch.float64, distribution=distribution)
    trace = float(exact.trace())
    # the variance of one draw, in closed form: 2 Σ_{i≠j} H_ij² (Rademacher), 2 ‖H‖_F²
    # (Gaussian)
    off = exact - torch.diag(exact.diag())
    variance = 2 * float((off**2).sum() if distribution == 'rademacher' else (exact**2).sum())
    assert abs(found.trace - trace) < 4 * (variance / n)**0.5
    assert found.std_error == pytest.approx((variance / n)**0.5, rel=0.3)
    assert len(found.samples) == n
    # each sample is vᵀ H v of its own draw
    gen = _gen(1)
    first = torch.randint(0, 2, (dim, ), generator=gen).double() * 2 - 1
    if distribution == 'rademacher':
        assert float(found.samples[0]) == pytest.approx(float(first @ exact @ first), rel=1e-10)


def test_hutchinson_of_a_diagonal_operator_is_exact_with_rademacher_vectors():
    d = torch.tensor([3.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    found = hutchinson_trace(lambda v: d * v, 4, 3, _gen(), torch.float64)
    assert found.trace == pytest.approx(4.5, rel=1e-12)
    assert found.std_error == pytest.approx(0.0, abs=1e-12)


def test_slq_with_full_lanczos_gives_the_exact_eigenvalues_and_start_projections():
    matvec, dim, exact = _operator()
    density = slq_density(matvec, dim, num_runs=1, steps=dim, generator=_gen(2),
                          dtype=torch.float64)
    values, vectors = torch.linalg.eigh(exact)
    assert len(density.nodes[0]) == dim
    assert torch.allclose(density.nodes[0], values, atol=1e-9)
    # the weights are the squared projections of the (unit Rademacher) start on the
    # eigenvectors
    gen = _gen(2)
    start = torch.randint(0, 2, (dim, ), generator=gen).double() * 2 - 1
    start = start / start.norm()
    assert torch.allclose(density.weights[0], (vectors.T @ start)**2, atol=1e-9)
    assert float(density.weights[0].sum()) == pytest.approx(1.0, abs=1e-12)


def test_slq_quadrature_is_exact_for_moments_below_twice_the_steps():
    matvec, dim, exact = _operator()
    steps = 5
    density = slq_density(matvec, dim, num_runs=1, steps=steps, generator=_gen(3),
                          dtype=torch.float64)
    gen = _gen(3)
    start = torch.randint(0, 2, (dim, ), generator=gen).double() * 2 - 1
    start = start / start.norm()
    for power in range(2 * steps):
        moment = float(start @ torch.linalg.matrix_power(exact, power) @ start)
        assert quadrature_moment(density, power) == pytest.approx(moment, rel=1e-8, abs=1e-12)
    # several runs: dim · first moment estimates the trace (Hutchinson on unit Rademacher)
    many = slq_density(matvec, dim, num_runs=200, steps=steps, generator=_gen(4),
                       dtype=torch.float64)
    off = exact - torch.diag(exact.diag())
    error = (2 * float((off**2).sum()) / 200)**0.5
    assert abs(dim * quadrature_moment(many, 1) - float(exact.trace())) < 4 * error


def test_density_on_grid_integrates_to_one_and_peaks_at_the_eigenvalues():
    matvec, dim, exact = _operator()
    density = slq_density(matvec, dim, num_runs=2, steps=dim, generator=_gen(5),
                          dtype=torch.float64)
    sigma = smoothing_width(density, 1e-3)
    values = torch.linalg.eigvalsh(exact)
    grid = torch.linspace(
        float(values.min()) - 1,
        float(values.max()) + 1, 20001, dtype=torch.float64)
    phi = density_on_grid(density, grid, sigma)
    assert float(torch.trapezoid(phi, grid)) == pytest.approx(1.0, abs=1e-6)
    # with full Lanczos, φ is the Gaussian mixture over the exact eigenvalues
    gen = _gen(5)
    expected = torch.zeros_like(grid)
    _, vectors = torch.linalg.eigh(exact)
    for _ in range(2):
        start = torch.randint(0, 2, (dim, ), generator=gen).double() * 2 - 1
        tau = (vectors.T @ (start / start.norm()))**2
        expected += torch.exp(-(grid[:, None] - values)**2 / (2 * sigma**2)) @ tau
    expected /= 2 * sigma * (2 * torch.pi)**0.5
    assert torch.allclose(phi, expected, atol=1e-6 * float(expected.max()))
    with pytest.raises(ValueError, match='sigma=0'):
        density_on_grid(density, grid, 0)


def test_bad_arguments_are_named():
    matvec, dim, _ = _operator()
    with pytest.raises(ValueError, match="distribution='uniform'"):
        hutchinson_trace(matvec, dim, 2, distribution='uniform')
    with pytest.raises(ValueError, match='num_samples'):
        hutchinson_trace(matvec, dim, 0)
    with pytest.raises(ValueError, match='steps'):
        slq_density(matvec, dim, steps=0)
