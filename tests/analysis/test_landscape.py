"""Filter-normalised directions and the loss landscape against closed forms."""
import pytest
import torch
import torch.nn as nn

from mmstiff.analysis.landscape import (displaced, filter_normalised_direction, grid_coordinates,
                                        l2_penalty, loss_landscape, normalise_across_outputs,
                                        normalise_filters, param_weight_decays, preserved_buffers)


def _net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5), nn.ReLU(), nn.Flatten(), nn.Linear(5 * 4 * 4, 7),
        nn.LayerNorm(7))


def test_each_filter_of_the_direction_has_the_norm_of_the_weight_filter():
    net = _net()
    named = dict(net.named_parameters())
    directions = filter_normalised_direction(named, torch.Generator().manual_seed(0))
    assert list(directions) == list(named)
    for name, w in named.items():
        d = directions[name]
        assert d.shape == w.shape and d.dtype == w.dtype
        if w.dim() <= 1:  # biases, BN / LN scales and shifts: zeroed
            assert torch.count_nonzero(d) == 0, name
            continue
        # one norm per output filter (conv: out channel over in × kh × kw; linear: row)
        w_norms = w.detach().flatten(1).norm(dim=1)
        d_norms = d.flatten(1).norm(dim=1)
        assert torch.allclose(d_norms, w_norms, rtol=1e-5), name
        assert len(d_norms) == w.shape[0]
        # a random direction, not the weight rescaled
        assert not torch.allclose(d / d_norms.view(-1, *[1] * (w.dim() - 1)),
                                  w / w_norms.view(-1, *[1] * (w.dim() - 1)), atol=1e-2)


def test_bias_bn_weight_and_excluded_parameters():
    net = _net()
    named = dict(net.named_parameters())
    same = filter_normalised_direction(named, torch.Generator().manual_seed(3))
    directions = filter_normalised_direction(named,
                                             torch.Generator().manual_seed(3), bias_bn='weight',
                                             exclude=['4.*'])
    assert torch.equal(directions['1.weight'], named['1.weight'].detach())  # BN scale
    assert torch.equal(directions['0.bias'], named['0.bias'].detach())
    assert torch.count_nonzero(directions['4.weight']) == 0  # excluded linear layer
    assert torch.count_nonzero(directions['4.bias']) == 0
    # excluding a parameter leaves the random draws of the others as they were
    assert torch.equal(directions['0.weight'], same['0.weight'])
    again = filter_normalised_direction(named, torch.Generator().manual_seed(3))
    assert all(torch.equal(again[k], same[k]) for k in same)


def test_normalise_filters_by_hand():
    w = torch.tensor([[3.0, 4.0], [0.0, 2.0]])  # filter norms 5, 2
    d = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    expected = torch.tensor([[5.0, 0.0], [2**0.5, 2**0.5]])
    assert torch.allclose(normalise_filters(d, w), expected, atol=1e-6)
    with pytest.raises(ValueError, match='same shape of two or more axes'):
        normalise_filters(torch.ones(3), torch.ones(3))


def _quadratic():
    gen = torch.Generator().manual_seed(1)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    a = q @ torch.diag(torch.tensor([3.0, 1.0, -0.5, 2.0], dtype=torch.float64)) @ q.T
    w_star = torch.randn(4, generator=gen, dtype=torch.float64)
    w = nn.Parameter(torch.randn(4, generator=gen, dtype=torch.float64))
    return a, w_star, w


def test_one_dimensional_landscape_of_a_quadratic_equals_its_closed_form():
    a, w_star, w = _quadratic()
    decay = 0.2
    w0 = w.detach().clone()

    @torch.no_grad()
    def loss_fn():
        r = w - w_star
        return float(0.5 * r @ a @ r + l2_penalty([w], [decay]))

    d = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float64)
    alphas = grid_coordinates(1.5, 7)
    landscape = loss_landscape(loss_fn, [w], [[d]], [alphas])
    # L(w0 + α d) = L(w0) + α gᵀd + α²/2 dᵀ(A + λI)d, g = A(w0 - w*) + λ w0
    r0 = w0 - w_star
    l0 = 0.5 * r0 @ a @ r0 + 0.5 * decay * w0 @ w0
    g = a @ r0 + decay * w0
    curvature = d @ a @ d + decay * d @ d
    expected = l0 + alphas * (g @ d) + 0.5 * alphas**2 * curvature
    assert landscape.losses.shape == (7, )
    assert torch.allclose(landscape.losses, expected, atol=1e-12)
    assert torch.equal(w.detach(), w0)  # restored


def test_two_dimensional_landscape_rows_are_beta_columns_alpha():
    a, w_star, w = _quadratic()
    w0 = w.detach().clone()

    @torch.no_grad()
    def loss_fn():
        r = w - w_star
        return float(0.5 * r @ a @ r)

    d1 = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    d2 = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    alphas, betas = grid_coordinates(1.0, 3), grid_coordinates(2.0, 5)
    calls = []
    landscape = loss_landscape(loss_fn, [w], [[d1], [d2]], [alphas, betas],
                               on_point=lambda: calls.append(1))
    assert landscape.losses.shape == (5, 3) and len(calls) == 15
    for i, beta in enumerate(betas):
        for j, alpha in enumerate(alphas):
            r = w0 + alpha * d1 + beta * d2 - w_star
            assert float(landscape.losses[i, j]) == pytest.approx(float(0.5 * r @ a @ r))
    assert torch.equal(w.detach(), w0)


def test_displaced_restores_the_weights_after_an_error():
    w = nn.Parameter(torch.ones(3))
    with pytest.raises(RuntimeError):
        with displaced([w], [[torch.ones(3)]], [2.0]):
            assert torch.equal(w.detach(), torch.full((3, ), 3.0))
            raise RuntimeError('inside')
    assert torch.equal(w.detach(), torch.ones(3))
    with pytest.raises(ValueError, match='one per parameter'):
        with displaced([w], [[torch.ones(3), torch.ones(1)]], [1.0]):
            pass


def test_l2_penalty_and_the_decays_of_optimizer_groups():
    net = _net()
    decayed = [net[0].weight, net[4].weight]
    others = [p for p in net.parameters() if all(p is not q for q in decayed)]
    optimizer = torch.optim.SGD(
        [dict(params=decayed, weight_decay=0.1),
         dict(params=others, weight_decay=0.0)], lr=0.1)
    params = list(net.parameters())
    decays = param_weight_decays(params, optimizer.param_groups)
    assert decays == [0.1 if any(p is q for q in decayed) else 0.0 for p in params]
    expected = 0.05 * sum(float(p.detach().pow(2).sum()) for p in decayed)
    assert float(l2_penalty(params, decays).detach()) == pytest.approx(expected, rel=1e-6)
    # SGD's weight decay is the gradient of this penalty
    grads = torch.autograd.grad(l2_penalty(params, decays), decayed)
    assert all(torch.allclose(g, 0.1 * p) for g, p in zip(grads, decayed))
    assert float(l2_penalty(params, [0.0] * len(params))) == 0.0
    with pytest.raises(ValueError, match='one per parameter'):
        l2_penalty(params, [0.1])


def test_preserved_buffers_undo_a_training_forward():
    net = _net().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with preserved_buffers(net):
        net(torch.randn(4, 3, 6, 6))
        assert not torch.equal(net[1].running_mean, before['1.running_mean'])
    after = net.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)


def test_bad_arguments_fail_naming_them():
    with pytest.raises(ValueError, match="bias_bn='keep'"):
        filter_normalised_direction({'w': torch.ones(2, 2)}, bias_bn='keep')
    with pytest.raises(ValueError, match='steps=1'):
        grid_coordinates(1.0, 1)
    with pytest.raises(ValueError, match='span=0.0'):
        grid_coordinates(0.0, 5)
    with pytest.raises(ValueError, match='one or two directions'):
        loss_landscape(lambda: 0.0, [], [[], [], []], [[0.0]] * 3)


def test_paper_convention_normalises_across_output_channels_by_hand():
    w = torch.tensor([[3.0, 0.0], [4.0, 2.0]])  # column norms (across outputs) 5, 2
    d = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # column norms 1, √2
    expected = torch.tensor([[5.0, 2**0.5], [0.0, 2**0.5]])
    assert torch.allclose(normalise_across_outputs(d, w), expected, atol=1e-5)
    with pytest.raises(ValueError, match='same shape of two or more axes'):
        normalise_across_outputs(torch.ones(3), torch.ones(3))


def test_paper_convention_directions_match_the_explicit_formula():
    net = _net()
    named = dict(net.named_parameters())
    paper = filter_normalised_direction(named, torch.Generator().manual_seed(5), convention='paper')
    li = filter_normalised_direction(named, torch.Generator().manual_seed(5))
    raw = torch.Generator().manual_seed(5)
    for name, w in named.items():
        d = torch.randn(w.shape, generator=raw, dtype=torch.float64).float()
        if w.dim() <= 1:
            assert torch.count_nonzero(paper[name]) == 0, name
            continue
        w = w.detach()
        # every (input channel, kernel position) index: its norm over the output channels
        for index in torch.cartesian_prod(*[torch.arange(n)
                                            for n in w.shape[1:]]).view(-1,
                                                                        w.dim() - 1):
            column = (slice(None), ) + tuple(int(i) for i in index)
            expected = d[column] * w[column].norm() / (d[column].norm() + 1e-7)
            assert torch.allclose(paper[name][column], expected, rtol=1e-5, atol=1e-7)
        # not the per-filter reading: its output-filter norms differ from the weight's
        norms = paper[name].flatten(1).norm(dim=1)
        assert not torch.allclose(norms, w.flatten(1).norm(dim=1), rtol=1e-2), name
        assert torch.allclose(li[name].flatten(1).norm(dim=1), w.flatten(1).norm(dim=1), rtol=1e-5)
    with pytest.raises(ValueError, match="convention='x'"):
        filter_normalised_direction(named, convention='x')
