"""NSI, μ, max/mean ratio, TNS and the NSI–step correlation against hand-computed values."""
import math

import pytest
import torch

from mmstiff.analysis import (columnwise_pearson_correlation, mean_step_size,
                              neural_stiffness_index, nsi_step_correlation, pearson_correlation,
                              stiffness_event, stiffness_event_probability, stiffness_norms,
                              stiffness_ratio, tns_per_trajectory, total_neural_stiffness,
                              trajectory_mean, trajectory_statistics)


def test_nsi_plain_step_is_relative_displacement():
    # ||x_next - x_t|| = ||(3, 4)|| = 5, ||x_t|| = 5 -> 1; second: ||(0, 1)|| / ||(1, 0)|| = 1
    x_t = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    x_next = torch.tensor([[6.0, 8.0], [1.0, 1.0]])
    assert torch.allclose(neural_stiffness_index(x_t, x_next), torch.tensor([1.0, 1.0]))
    # Δt = 1 given explicitly changes nothing
    assert torch.allclose(neural_stiffness_index(x_t, x_next, 1.0), torch.tensor([1.0, 1.0]))


def test_nsi_divides_by_the_reported_step():
    # Appendix B: ζ = ||(x_{t+1} - x_t) / Δ_t|| / ||x_t||, so a half step along the same slope
    # gives the same NSI as the full step: it measures the slope f, not the displacement.
    x_t = torch.tensor([[3.0, 4.0]])
    f = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(neural_stiffness_index(x_t, x_t + 0.5 * f, 0.5), torch.tensor([1.0]))
    # scalar step 0.5 on a displacement (3, 4): ||(6, 8)|| / 5 = 2
    assert torch.allclose(neural_stiffness_index(x_t, x_t + f, 0.5), torch.tensor([2.0]))


def test_nsi_per_channel_step_is_elementwise():
    x_t = torch.tensor([3.0, 4.0]).reshape(1, 2, 1, 1)
    step = torch.tensor([0.5, 2.0]).reshape(1, 2, 1, 1)
    f = torch.ones(1, 2, 1, 1)
    x_next = x_t + step * f  # (3.5, 6.0)
    # (x_next - x_t) / step = (1, 1): sqrt(2) / 5
    assert torch.allclose(
        neural_stiffness_index(x_t, x_next, step), torch.tensor([math.sqrt(2) / 5]))


def test_nsi_ignores_channels_whose_step_underflowed_to_zero():
    # channel 0 saturated (Δ = 0, so it did not move): 0 / 0 carries no slope; channel 1 has
    # slope (x_next - x_t) / Δ = 2 / 0.5 = 4, so ζ = 4 / ||(3, 4)|| = 0.8
    x_t = torch.tensor([3.0, 4.0]).reshape(1, 2, 1, 1)
    step = torch.tensor([0.0, 0.5]).reshape(1, 2, 1, 1)
    x_next = x_t + torch.tensor([0.0, 2.0]).reshape(1, 2, 1, 1)
    assert torch.allclose(neural_stiffness_index(x_t, x_next, step), torch.tensor([0.8]))
    # a zero step with a displacement has no finite slope: reported as inf for callers to skip
    moved = x_t + torch.tensor([1.0, 2.0]).reshape(1, 2, 1, 1)
    assert torch.isinf(neural_stiffness_index(x_t, moved, step)).all()


def test_stiffness_norms_are_the_two_sides_of_the_nsi():
    # per sample: ||(x_next - x_t) / Δ|| and ||x_t||, with Δ per sample and channel
    x_t = torch.tensor([[[[3.0]], [[4.0]]], [[[1.0]], [[0.0]]]])  # (2, 2, 1, 1)
    x_next = x_t + torch.tensor([[[[1.0]], [[1.0]]], [[[2.0]], [[0.0]]]])
    step = torch.tensor([[[[0.5]], [[1.0]]], [[[2.0]], [[1.0]]]])
    slope, state = stiffness_norms(x_t, x_next, step)
    assert torch.allclose(slope, torch.tensor([math.sqrt(2**2 + 1**2), 1.0]))
    assert torch.allclose(state, torch.tensor([5.0, 1.0]))
    assert torch.allclose(neural_stiffness_index(x_t, x_next, step), slope / state)
    # one number per sample, with a step per sample
    slope, state = stiffness_norms(
        torch.tensor([1.0, -2.0]), torch.tensor([2.0, 2.0]), torch.tensor([0.5, 4.0]))
    assert torch.allclose(slope, torch.tensor([2.0, 1.0]))
    assert torch.allclose(state, torch.tensor([1.0, 2.0]))


def test_nsi_checks_shapes_and_step_type():
    with pytest.raises(ValueError, match='x_next has shape'):
        neural_stiffness_index(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match='step='):
        neural_stiffness_index(torch.ones(2, 3), torch.ones(2, 3), 'big')
    with pytest.raises(ValueError, match='broadcasts to the states'):
        neural_stiffness_index(
            torch.ones(2, 2, 1, 1), torch.ones(2, 2, 1, 1), torch.ones(1, 3, 1, 1))


def test_step_shape_check_follows_torch_broadcasting():
    """The step's shape check (plain Python) agrees with ``torch.broadcast_shapes``: a shape
    passes exactly when broadcasting it against the states leaves their shape."""
    from mmstiff.analysis.stiffness import _broadcasts_to

    def torch_rule(shape, target):
        try:
            return torch.broadcast_shapes(shape, target) == target
        except RuntimeError:
            return False

    target = (2, 3, 4, 5)
    shapes = [(), (1, ), (5, ), (4, 5), (4, 1), (3, 1, 1), (2, 3, 1, 1), (1, 3, 1, 1), (2, 1, 1, 1),
              (2, 3, 4, 5), (3, ), (2, 3, 4, 1), (2, 3, 1, 5), (1, 2, 3, 4, 5), (2, 2, 4, 5),
              (2, 3, 4, 6), (6, ), (0, ), (2, 3, 4, 5, 1)]
    verdicts = {shape: _broadcasts_to(shape, target) for shape in shapes}
    assert verdicts == {shape: torch_rule(shape, target) for shape in shapes}
    assert sum(verdicts.values()) == 12  # both outcomes exercised
    assert _broadcasts_to(torch.Size((2, 1, 1, 1)), torch.Size(target))


def test_mean_step_size():
    assert torch.equal(mean_step_size(0.25, 3), torch.full((3, ), 0.25))
    step = torch.tensor([[0.2, 0.4], [0.6, 1.0]]).reshape(2, 2, 1, 1)
    assert torch.allclose(mean_step_size(step, 2), torch.tensor([0.3, 0.8]))
    shared = torch.tensor([0.2, 0.4]).reshape(1, 2, 1, 1)
    assert torch.allclose(mean_step_size(shared, 3), torch.full((3, ), 0.3))
    with pytest.raises(ValueError, match='batch size 2'):
        mean_step_size(step, 5)


def test_mean_ratio_and_tns_by_hand():
    zeta = torch.tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    assert torch.allclose(trajectory_mean(zeta), torch.tensor([2.0, 2.0], dtype=torch.float64))
    assert torch.allclose(stiffness_ratio(zeta), torch.tensor([1.5, 1.0], dtype=torch.float64))
    # (ζ*/μ - 1) ζ* = 0.5 * 3 and 0 * 2
    assert torch.allclose(tns_per_trajectory(zeta), torch.tensor([1.5, 0.0], dtype=torch.float64))
    assert total_neural_stiffness(zeta) == pytest.approx(0.75)
    # an all-zero trajectory has no stiffness
    assert total_neural_stiffness(torch.zeros(1, 4)) == 0.0
    with pytest.raises(ValueError, match='num_samples, num_steps'):
        total_neural_stiffness(torch.ones(3))


def test_trajectory_statistics_in_one_pass():
    zeta = torch.tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
    mu, ratio, area = trajectory_statistics(zeta)
    # by hand: μ = (2, 2, 0); ζ*/μ = (1.5, 1, 1 by convention); (ζ*/μ - 1) ζ* = (1.5, 0, 0)
    assert mu.tolist() == [2.0, 2.0, 0.0]
    assert ratio.tolist() == [1.5, 1.0, 1.0]
    assert area.tolist() == [1.5, 0.0, 0.0]


def test_stiffness_event_thresholds():
    zeta = torch.tensor([[1.0, 3.0]])  # μ = 2, ζ* = 3
    assert stiffness_event(zeta, 0.5, 0.0).item()  # 3 >= 2 * 1.5
    assert not stiffness_event(zeta, 0.51, 0.0).item()
    assert stiffness_event(zeta, 0.0, 3.0).item()
    assert not stiffness_event(zeta, 0.0, 3.01).item()
    with pytest.raises(ValueError, match='positive quadrant'):
        stiffness_event(zeta, -1.0, 0.0)


def _tns_by_grid(zeta, n=400):
    """∬ δ(M) dM with δ from its definition (∃t: ζ_t >= max(μ(1+M1), M2)), midpoint rule."""
    mu = zeta.mean(dim=1)
    ratio_max = float((zeta.max(dim=1).values / mu).max()) - 1.0
    peak_max = float(zeta.max())
    h1, h2 = ratio_max * 1.05 / n, peak_max * 1.05 / n
    m1 = (torch.arange(n, dtype=torch.float64) + 0.5) * h1
    m2 = (torch.arange(n, dtype=torch.float64) + 0.5) * h2
    threshold = torch.maximum(mu[:, None, None] * (1 + m1)[None, :, None], m2[None, None, :])
    event = (zeta[:, :, None, None] >= threshold[:, None]).any(dim=1)  # (S, n, n)
    delta = event.double().mean(dim=0)
    return float(delta.sum() * h1 * h2)


def test_tns_closed_form_matches_grid_integration_of_the_definition():
    gen = torch.Generator().manual_seed(0)
    zeta = torch.exp(torch.randn(40, 6, generator=gen, dtype=torch.float64) * 0.6)
    closed = total_neural_stiffness(zeta)
    grid = _tns_by_grid(zeta)
    assert closed > 0
    assert grid == pytest.approx(closed, rel=0.02)


def test_event_probability_is_the_integrand():
    zeta = torch.tensor([[1.0, 3.0], [1.0, 1.0]])
    # second trajectory: μ = 1, ζ* = 1: an event only while M1 = 0 and M2 <= 1
    assert stiffness_event_probability(zeta, 0.0, 1.0) == 1.0
    assert stiffness_event_probability(zeta, 0.25, 1.0) == 0.5
    assert stiffness_event_probability(zeta, 0.6, 1.0) == 0.0


def test_pearson_by_hand():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): 4 / sqrt(5 * 5)
    assert pearson_correlation(a, torch.tensor([1.0, 3.0, 2.0, 4.0])) == pytest.approx(0.8)
    assert nsi_step_correlation(a, -2 * a + 1) == pytest.approx(-1.0)
    assert math.isnan(nsi_step_correlation(a, torch.full((4, ), 0.27)))
    assert math.isnan(pearson_correlation(a[:1], a[:1]))
    with pytest.raises(ValueError, match='same length'):
        pearson_correlation(a, a[:3])


def test_columnwise_pearson_against_numpy():
    import numpy as np
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(9, 4, generator=gen)
    b = -0.5 * a + 0.3 * torch.randn(9, 4, generator=gen)
    b[:, 3] = 0.25  # a constant column: undefined
    corr = columnwise_pearson_correlation(a, b)
    for k in range(3):
        expected = np.corrcoef(a[:, k].numpy(), b[:, k].numpy())[0, 1]
        assert float(corr[k]) == pytest.approx(float(expected), abs=1e-6)
    assert math.isnan(float(corr[3]))
    assert torch.isnan(columnwise_pearson_correlation(a[:1], b[:1])).all()
    with pytest.raises(ValueError, match='same shape'):
        columnwise_pearson_correlation(a, b[:, :2])


def test_trajectory_statistics_of_groups_equal_each_group_alone():
    gen = torch.Generator().manual_seed(2)
    zeta = torch.rand(5, 6, generator=gen, dtype=torch.float64) * 3
    zeta[0, 4] = math.inf  # a non-finite step poisons only the groups that hold it
    groups = torch.tensor(
        [[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0], [0, 1, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1]],
        dtype=torch.bool)
    together = trajectory_statistics(zeta, groups)
    for g, row in enumerate(groups):
        alone = (trajectory_mean(zeta[:, row]), stiffness_ratio(zeta[:, row]),
                 tns_per_trajectory(zeta[:, row]))
        for got, expected in zip(together, alone):
            torch.testing.assert_close(got[:, g], expected, equal_nan=True)
    # the inf step: μ of its groups is inf and their ratio and area NaN, for that sample only
    for stat in together:
        assert torch.isfinite(stat[:, 0]).all() and not torch.isfinite(stat[0, 1])
        assert torch.isfinite(stat[1:]).all()
    with pytest.raises(ValueError, match='groups='):
        trajectory_statistics(zeta, torch.zeros(2, 6, dtype=torch.bool))
