"""Hessian eigenvalues by power iteration against closed-form and explicit Hessians."""
import pytest
import torch
import torch.nn.functional as F

from mmstiff.analysis.hessian import (average_positive_eigenvalue, double_backward_kernels,
                                      flat_gradient, hessian_eigenvalues, hessian_vector_product,
                                      lanczos_ritz_values, most_negative_eigenvalue,
                                      negative_eigenvalue_proportion, power_iteration)
from mmstiff.analysis.landscape import l2_penalty

TIGHT = dict(max_iter=5000, tol=1e-12)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _linear_problem(singular_values, n=40, seed=0):
    """``X`` (n × d) with the given singular values (times √n), targets, and H = 2 XᵀX / n."""
    gen = _gen(seed)
    d = len(singular_values)
    u, _ = torch.linalg.qr(torch.randn(n, d, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    x = u * torch.tensor(singular_values, dtype=torch.float64) @ v.T * n**0.5
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return x, y, 2 * x.T @ x / n


def _symmetric_with_spectrum(values, seed=0):
    q, _ = torch.linalg.qr(
        torch.randn(len(values), len(values), generator=_gen(seed), dtype=torch.float64))
    return q @ torch.diag(torch.tensor(values, dtype=torch.float64)) @ q.T


def test_linear_least_squares_top_k_and_most_negative_match_eigvalsh():
    x, y, hessian = _linear_problem([3.0, 2.5, 2.0, 1.6, 1.3, 1.0, 0.8, 0.5])
    w = torch.randn(8, dtype=torch.float64, generator=_gen(1), requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)  # bias: H gains a row/column
    loss = ((x @ w - y)**2).mean()
    found = hessian_eigenvalues(loss, [w], num_eigs=4, negative=True, generator=_gen(), **TIGHT)
    exact = torch.linalg.eigvalsh(hessian)  # ascending
    assert found.values.tolist() == pytest.approx(exact.flip(0)[:4].tolist(), rel=1e-7)
    assert found.most_negative == pytest.approx(float(exact[0]), rel=1e-6)
    assert found.iterations > 4

    # with a bias the Hessian is 2 [X 1]ᵀ[X 1] / n, still in closed form
    loss = ((x @ w + b - y)**2).mean()
    found = hessian_eigenvalues(loss, [w, b], num_eigs=3, negative=True, generator=_gen(), **TIGHT)
    xb = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
    exact = torch.linalg.eigvalsh(2 * xb.T @ xb / len(x))
    assert found.values.tolist() == pytest.approx(exact.flip(0)[:3].tolist(), rel=1e-7)
    assert found.most_negative == pytest.approx(float(exact[0]), rel=1e-6, abs=1e-9)


def test_indefinite_quadratic_eigenvalues_by_magnitude_and_the_most_negative():
    spectrum = [6.0, -4.0, 3.0, 1.5, -1.0, 0.5, -2.5]
    a = _symmetric_with_spectrum(spectrum)
    w = torch.randn(7, dtype=torch.float64, generator=_gen(2), requires_grad=True)
    loss = 0.5 * w @ a @ w
    found = hessian_eigenvalues(loss, [w], num_eigs=4, negative=True, generator=_gen(), **TIGHT)
    by_magnitude = sorted(spectrum, key=abs, reverse=True)[:4]  # 6, -4, 3, -2.5
    assert found.values.tolist() == pytest.approx(by_magnitude, rel=1e-7)
    assert found.most_negative == pytest.approx(-4.0, rel=1e-6)

    # a dominant negative eigenvalue: the shift |λ_1| still bounds λ_max
    b = _symmetric_with_spectrum([-9.0, 2.0, 1.0, -3.0], seed=3)
    v = torch.randn(4, dtype=torch.float64, generator=_gen(4), requires_grad=True)
    found = hessian_eigenvalues(0.5 * v @ b @ v, [v], num_eigs=1, negative=True, generator=_gen(),
                                **TIGHT)
    assert float(found.values[0]) == pytest.approx(-9.0, rel=1e-7)
    assert found.most_negative == pytest.approx(-9.0, rel=1e-6)


def test_eigenvectors_satisfy_the_eigen_equation_and_are_orthonormal():
    a = _symmetric_with_spectrum([5.0, 3.0, -2.0, 1.0, 0.25])
    pairs = power_iteration(lambda v: a @ v, 5, num_eigs=3, generator=_gen(), dtype=torch.float64,
                            **TIGHT)
    for value, vector in zip(pairs.values, pairs.vectors):
        # the vector converges as the square root of the eigenvalue (tol 1e-12)
        assert torch.allclose(a @ vector, value * vector, atol=1e-5)
    gram = pairs.vectors @ pairs.vectors.T
    assert torch.allclose(gram, torch.eye(3, dtype=torch.float64), atol=1e-6)
    assert len(pairs.iterations) == 3 and all(1 <= n <= TIGHT['max_iter'] for n in pairs.iterations)
    assert pairs.converged == (True, True, True)
    # the residual rule leaves unit vectors with ||A v - λ v|| below tol · |λ|
    strict = power_iteration(lambda v: a @ v, 5, num_eigs=2, tol=1e-8, max_iter=5000,
                             generator=_gen(), dtype=torch.float64, criterion='residual')
    assert strict.converged == (True, True)
    assert strict.values.tolist() == pytest.approx([5.0, 3.0], rel=1e-12)


@pytest.mark.slow
def test_hessian_vector_products_of_a_network_equal_the_explicit_hessian():
    gen = _gen(5)
    x = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    w1 = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(2, 4, generator=gen, dtype=torch.float64, requires_grad=True)

    def loss_of(a, b):
        return F.cross_entropy(torch.tanh(x @ a.T) @ b.T, labels)

    explicit = torch.autograd.functional.hessian(loss_of, (w1, w2))
    h = torch.cat([
        torch.cat([explicit[i][j].reshape(w.numel(), v.numel())
                   for j, v in enumerate((w1, w2))], dim=1) for i, w in enumerate((w1, w2))
    ], dim=0)
    grad = flat_gradient(loss_of(w1, w2), [w1, w2])
    for seed in range(3):
        v = torch.randn(20, generator=_gen(seed), dtype=torch.float64)
        assert torch.allclose(hessian_vector_product(grad, [w1, w2], v), h @ v, atol=1e-10)
    found = hessian_eigenvalues(loss_of(w1, w2), [w1, w2], num_eigs=2, generator=_gen(), **TIGHT)
    exact = torch.linalg.eigvalsh(h)
    assert found.values.tolist() == pytest.approx(
        sorted(exact.tolist(), key=abs, reverse=True)[:2], rel=1e-5)


def test_the_l2_term_shifts_every_eigenvalue_by_the_decay():
    x, y, hessian = _linear_problem([2.0, 1.5, 1.0, 0.7])
    w = torch.randn(4, dtype=torch.float64, generator=_gen(1), requires_grad=True)
    loss = ((x @ w - y)**2).mean() + l2_penalty([w], [0.3])
    found = hessian_eigenvalues(loss, [w], num_eigs=2, negative=True, generator=_gen(), **TIGHT)
    exact = torch.linalg.eigvalsh(hessian + 0.3 * torch.eye(4, dtype=torch.float64))
    assert found.values.tolist() == pytest.approx(exact.flip(0)[:2].tolist(), rel=1e-7)
    assert found.most_negative == pytest.approx(float(exact[0]), rel=1e-6)


def test_attention_inside_double_backward_kernels_has_the_explicit_hessian():
    gen = _gen(6)
    q = torch.randn(1, 2, 5, 4, generator=gen, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, generator=gen)
    v = torch.randn(1, 2, 5, 4, generator=gen)
    vec = torch.randn(q.numel(), generator=gen)
    with double_backward_kernels():
        loss = F.scaled_dot_product_attention(q, k, v).pow(2).sum()
        fused = hessian_vector_product(flat_gradient(loss, [q]), [q], vec)
    attn = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # scale 1/√4
    explicit = hessian_vector_product(flat_gradient((attn @ v).pow(2).sum(), [q]), [q], vec)
    assert torch.allclose(fused, explicit, atol=1e-5, rtol=1e-4)


def test_most_negative_eigenvalue_of_an_operator():
    a = _symmetric_with_spectrum([4.0, 2.0, -1.0, -3.0])
    lowest, spent, converged = most_negative_eigenvalue(lambda v: a @ v, 4, shift=4.0,
                                                        generator=_gen(), dtype=torch.float64,
                                                        **TIGHT)
    assert lowest == pytest.approx(-3.0, rel=1e-6) and spent >= 2 and converged


def test_most_negative_eigenvalue_under_a_near_zero_bulk():
    # a network's Hessian: a large bulk of eigenvalues near 0, a few outliers. Shifted by
    # s = λ_1, the bulk sits at -s and the quotient creeps at first: PyHessian's rule (relative
    # change of λ) stops on the bulk, the residual rule does not.
    n = 20000
    spectrum = torch.linspace(-0.01, 0.01, n, dtype=torch.float64)
    spectrum[:3] = torch.tensor([-0.8, 1.0, 0.9], dtype=torch.float64)

    def matvec(v):
        return spectrum * v

    top = power_iteration(matvec, n, generator=_gen(), dtype=torch.float64)
    assert float(top.values[0]) == pytest.approx(1.0, rel=1e-2) and top.converged == (True, )
    shift = float(top.values[0])
    stopped_early = power_iteration(lambda v: matvec(v) - shift * v, n, generator=_gen(),
                                    dtype=torch.float64)
    assert float(stopped_early.values[0]) + shift > -0.1  # the bulk, taken for converged
    lowest, _, converged = most_negative_eigenvalue(matvec, n, shift, generator=_gen(),
                                                    dtype=torch.float64)
    assert lowest == pytest.approx(-0.8, rel=1e-3) and converged


def test_opposite_eigenvalues_of_equal_magnitude_power_iteration_mixes_lanczos_separates():
    a = _symmetric_with_spectrum([3.0, -3.0, 1.0, 0.5, -0.25, 0.1])
    w = torch.randn(6, dtype=torch.float64, generator=_gen(7), requires_grad=True)
    power = hessian_eigenvalues(0.5 * w @ a @ w, [w], num_eigs=1, generator=_gen(), **TIGHT)
    # the iterate alternates between two vectors of one plane: a constant Rayleigh quotient
    # strictly between -3 and 3, which the stopping rule takes for converged
    assert power.converged and abs(float(power.values[0])) < 2.99
    lanczos = hessian_eigenvalues(0.5 * w @ a @ w, [w], num_eigs=2, negative=True, generator=_gen(),
                                  method='lanczos', lanczos_steps=6)
    assert sorted(lanczos.values.tolist()) == pytest.approx([-3.0, 3.0], rel=1e-9)
    assert lanczos.most_negative == pytest.approx(-3.0, rel=1e-9) and lanczos.iterations == 6


def test_lanczos_ritz_values():
    spectrum = [6.0, -4.0, 3.0, 1.5, -1.0, 0.5, -2.5, 0.2]
    a = _symmetric_with_spectrum(spectrum)
    full = lanczos_ritz_values(lambda v: a @ v, 8, steps=8, generator=_gen(), dtype=torch.float64)
    assert full.tolist() == pytest.approx(sorted(spectrum), rel=1e-8)
    # fewer steps: the Ritz values interlace the spectrum, the extremes converge first
    x, y, hessian = _linear_problem([3.0, 2.9, 2.0, 1.6, 1.3, 1.0, 0.8, 0.5, 0.4, 0.3, 0.2, 0.1])
    part = lanczos_ritz_values(lambda v: hessian @ v, 12, steps=7, generator=_gen(),
                               dtype=torch.float64)
    exact = torch.linalg.eigvalsh(hessian)
    assert len(part) == 7
    assert exact[0] - 1e-9 <= part[0] and part[-1] <= exact[-1] + 1e-9
    assert float(part[-1]) == pytest.approx(float(exact[-1]), rel=1e-3)
    w = torch.zeros(12, dtype=torch.float64, requires_grad=True)
    found = hessian_eigenvalues(((x @ w - y)**2).mean(), [w], num_eigs=3, negative=True,
                                method='lanczos', lanczos_steps=12, generator=_gen())
    assert found.values.tolist() == pytest.approx(exact.flip(0)[:3].tolist(), rel=1e-8)
    assert found.most_negative == pytest.approx(float(exact[0]), rel=1e-8)


def test_nep_and_ape_by_hand():
    values = [-2.0, -0.5, 1.0, 3.0, 5.0]
    assert negative_eigenvalue_proportion(values) == pytest.approx(2 / 5)
    assert average_positive_eigenvalue(values) == pytest.approx(3.0)
    assert average_positive_eigenvalue([-1.0]) != average_positive_eigenvalue([-1.0])  # nan
    assert negative_eigenvalue_proportion([]) != negative_eigenvalue_proportion([])


def test_bad_arguments_fail_naming_them():
    w = torch.zeros(3, requires_grad=True)
    loss = (w**2).sum()
    with pytest.raises(ValueError, match='num_eigs=4 is larger than the dimension 3'):
        hessian_eigenvalues(loss, [w], num_eigs=4)
    with pytest.raises(ValueError, match='tol=0'):
        hessian_eigenvalues(loss, [w], tol=0)
    with pytest.raises(ValueError, match='max_iter=0'):
        hessian_eigenvalues(loss, [w], max_iter=0)
    with pytest.raises(ValueError, match='no parameter requires grad'):
        hessian_eigenvalues(loss, [torch.zeros(3)])
    with pytest.raises(ValueError, match='loss must be a scalar'):
        hessian_eigenvalues(w * 2, [w])
    with pytest.raises(ValueError, match="method='arnoldi'"):
        hessian_eigenvalues(loss, [w], method='arnoldi')
    with pytest.raises(ValueError, match='lanczos_steps=1 is smaller than num_eigs=2'):
        hessian_eigenvalues(loss, [w], num_eigs=2, method='lanczos', lanczos_steps=1)
    with pytest.raises(ValueError, match="criterion='change'"):
        power_iteration(lambda v: v, 3, criterion='change')
