"""The relaxation systems of the stiff-dynamics testbed against an ODE solver and their
Jacobians."""
import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from mmstiff.testbed import (flow, initial_states, local_eigenvalues, local_stiffness, make_system,
                             stiffness_ratio, trajectory, vector_field)


def _solve(system, x0, times):

    def rhs(_, x):
        return vector_field(system, torch.from_numpy(x)).numpy()

    solution = solve_ivp(rhs, (0.0, times[-1]), x0.numpy(), method='Radau', t_eval=times,
                         rtol=1e-11, atol=1e-13)
    assert solution.success
    return torch.from_numpy(solution.y.T)


@pytest.mark.slow
@pytest.mark.parametrize('coupling', [0.0, 1.0])
@pytest.mark.parametrize('spread', [2.0, 100.0])
def test_the_closed_form_flow_is_the_solvers_trajectory(spread, coupling):
    system = make_system(dim=6, spread=spread, coupling=coupling, seed=3)
    x0 = initial_states(2, 6, seed=1)
    times = [0.125 * (i + 1) for i in range(8)]
    exact = trajectory(system, x0, horizon=1.0, num_steps=8)  # (4, 8, 6)
    for i in range(len(x0)):
        solved = _solve(system, x0[i], times)
        assert torch.allclose(exact[i], solved, rtol=1e-7, atol=1e-9)
    assert torch.allclose(flow(system, x0, 0.0), x0)


def test_the_linear_flow_is_the_matrix_exponential():
    system = make_system(dim=4, spread=50.0, seed=0)
    a = system.rotation @ torch.diag(-system.rates) @ system.rotation.T
    x0 = initial_states(3, 4, seed=2)
    expected = x0 @ torch.linalg.matrix_exp(0.7 * a).T
    assert torch.allclose(flow(system, x0, 0.7), expected, atol=1e-12)


def test_the_stiffness_ratio_is_the_spread_by_construction():
    system = make_system(dim=8, spread=100.0, seed=0)
    assert float(system.rates.max() / system.rates.min()) == pytest.approx(100.0)
    assert torch.allclose(system.rotation.T @ system.rotation, torch.eye(8, dtype=torch.float64),
                          atol=1e-12)
    x = initial_states(5, 8, seed=4)
    assert torch.allclose(stiffness_ratio(system, x), torch.full((5, ), 100.0, dtype=torch.float64))
    assert torch.allclose(local_stiffness(system, x), torch.full((5, ), 100.0, dtype=torch.float64))


@pytest.mark.parametrize('coupling', [0.0, 2.0])
def test_local_eigenvalues_are_those_of_the_jacobian(coupling):
    system = make_system(dim=6, spread=30.0, coupling=coupling, seed=5)
    for x in initial_states(3, 6, seed=6):
        jacobian = torch.autograd.functional.jacobian(lambda v: vector_field(system, v), x)
        exact = np.sort(np.linalg.eigvals(jacobian.numpy()).real)
        assert np.allclose(np.sort(local_eigenvalues(system, x).numpy()), exact, rtol=1e-9)
        assert float(local_stiffness(system, x)) == pytest.approx(np.abs(exact).max())
    # the coupling makes the fast modes stiffer where their slow partners are large
    if coupling:
        z = torch.zeros(6, dtype=torch.float64)
        z[0] = 3.0  # the first slow mode
        x = system.rotation @ z
        fast = local_eigenvalues(system, x)[3]
        assert float(fast) == pytest.approx(-float(system.rates[3]) * (1 + coupling * 9.0))


def test_bad_systems_are_named():
    with pytest.raises(ValueError, match='dim=5'):
        make_system(dim=5)
    with pytest.raises(ValueError, match='spread=0.5'):
        make_system(spread=0.5)
    with pytest.raises(ValueError, match='coupling=-1'):
        make_system(coupling=-1)


def test_data_are_a_function_of_the_seeds():
    assert torch.equal(initial_states(3, 4, 7), initial_states(3, 4, 7))
    assert not torch.equal(initial_states(3, 4, 7), initial_states(3, 4, 8))
    assert torch.equal(make_system(seed=2).rotation, make_system(seed=2).rotation)
