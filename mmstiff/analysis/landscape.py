"""The loss landscape along filter-normalised random directions (docs/methods.md §12).

Plain torch: the model is perturbed in place for each evaluation and restored afterwards,
buffers included.
"""
import contextlib
import math
from collections import OrderedDict
from typing import (Any, Callable, Iterable, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import torch

from mmstiff.utils.checks import check_patterns, matches_any

#: what a parameter of at most one axis (bias, norm scale / shift) gets as its direction.
BIAS_BN_MODES = ('zero', 'weight')
#: how a direction is rescaled: per filter (Li et al.) or across output channels (the
#: How-do-ViTs authors' ``normalize_filter``, docs/methods.md §12).
CONVENTIONS = ('li', 'paper')
#: added to a filter's direction norm before dividing (Li et al.'s code uses 1e-10).
EPS = 1e-10
#: the How-do-ViTs authors' code adds 1e-7.
PAPER_EPS = 1e-7

#: a direction: a tensor per parameter, in order (or by name)
_Direction = Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]]
#: the coordinates along one direction
_Axis = Union[torch.Tensor, Sequence[float]]


class Landscape(NamedTuple):
    """Losses on a grid of coordinates around the trained weights.

    Attributes:
        coords (list[Tensor]): the coordinates along each direction, ``(steps,)`` each.
        losses (Tensor): ``(steps,)`` for one direction, ``(steps_β, steps_α)`` for two
            (row ``i`` is ``β = coords[1][i]``, as ``meshgrid(..., indexing='xy')``).
    """
    coords: list
    losses: torch.Tensor


def l2_penalty(params: Sequence[torch.Tensor], weight_decays: Sequence[float]) -> torch.Tensor:
    """The ``ℓ2`` term of the paper's ``NLL + ℓ2`` loss: ``Σ_i (λ_i / 2) ‖w_i‖²``.

    Args:
        params (Sequence[Tensor]): the parameters ``w_i``.
        weight_decays (Sequence[float]): ``λ_i``, one per parameter (0 for a parameter without
            decay).

    Returns:
        Tensor: a scalar, differentiable in the parameters (its Hessian is ``diag(λ_i)``).
    """
    params, weight_decays = list(params), [float(d) for d in weight_decays]
    if len(params) != len(weight_decays):
        raise ValueError(f'weight_decays has {len(weight_decays)} values for {len(params)} '
                         'parameters; expected one per parameter')
    total = None
    for p, decay in zip(params, weight_decays):
        if decay:
            term = 0.5 * decay * p.pow(2).sum()
            total = term if total is None else total + term
    if total is None:
        device = params[0].device if params else None
        return torch.zeros((), device=device)
    return total


def param_weight_decays(params: Sequence[torch.Tensor], param_groups: Sequence[dict],
                        default: float = 0.0) -> List[float]:
    """The weight decay of each parameter, read from a torch optimizer's ``param_groups``.

    Args:
        params (Sequence[Tensor]): the parameters to look up.
        param_groups (Sequence[dict]): ``optimizer.param_groups`` (each a dict with ``params``
            and ``weight_decay``), e.g. built with the training config's paramwise settings.
        default (float): the decay of a parameter that is in no group.

    Returns:
        list[float]: one decay per parameter.
    """
    decay_of = {}
    for group in param_groups:
        decay = float(group.get('weight_decay', 0.0) or 0.0)
        for p in group['params']:
            decay_of[id(p)] = decay
    return [decay_of.get(id(p), float(default)) for p in params]


def filter_normalised_direction(named_params: Union[Mapping[str, torch.Tensor],
                                                    Iterable[Tuple[str, torch.Tensor]]],
                                generator: Optional[torch.Generator] = None, bias_bn: str = 'zero',
                                exclude: Optional[Sequence[str]] = None,
                                convention: str = 'li') -> 'OrderedDict[str, torch.Tensor]':
    """A Gaussian random direction rescaled filter by filter to the weights' norms (Li et al.
    2018, Eq. 1; docs/methods.md §12), or across output channels as the How-do-ViTs authors'
    code does (``convention='paper'``).

    Args:
        named_params (Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]): the weights ``w``
            (e.g. ``model.named_parameters()``).
        generator (torch.Generator, optional): for the Gaussian draw (on the CPU, so equal seeds
            give equal directions on every device).
        bias_bn (str): ``'zero'`` (direction 0 for parameters of at most one axis) or
            ``'weight'`` (the direction is the weight itself).
        exclude (Sequence[str], optional): ``fnmatch`` patterns of parameter names whose
            direction is 0 (e.g. ``['*pos_embed*']``).
        convention (str): ``'li'`` (:func:`normalise_filters`) or ``'paper'``
            (:func:`normalise_across_outputs`).

    Returns:
        OrderedDict[str, Tensor]: a direction per parameter, of its shape, dtype and device.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f'convention={convention!r} is not supported; expected one of '
                         f'{CONVENTIONS}')
    normalise = normalise_filters if convention == 'li' else normalise_across_outputs
    if bias_bn not in BIAS_BN_MODES:
        raise ValueError(f'bias_bn={bias_bn!r} is not supported; expected one of '
                         f'{BIAS_BN_MODES}')
    patterns = check_patterns('exclude', exclude, what='parameter names')
    items = named_params.items() if hasattr(named_params, 'items') else named_params
    directions = OrderedDict()
    for name, w in items:
        w = w.detach()
        # drawn for every parameter, excluded ones too, so that excluding one leaves the
        # directions of the others unchanged
        d = torch.randn(w.shape, generator=generator, dtype=torch.float64)
        d = d.to(device=w.device, dtype=w.dtype)
        if patterns and matches_any(name, patterns):
            d = torch.zeros_like(w)
        elif w.dim() <= 1:
            d = torch.zeros_like(w) if bias_bn == 'zero' else w.clone()
        else:
            d = normalise(d, w)
        directions[name] = d
    return directions


def normalise_filters(direction: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``direction`` with each filter (slice along the first axis) rescaled to the norm of the
    same filter of ``weight``: ``d_j · ‖w_j‖ / (‖d_j‖ + ε)``."""
    if direction.shape != weight.shape or weight.dim() < 2:
        raise ValueError(f'direction {tuple(direction.shape)} and weight '
                         f'{tuple(weight.shape)} must have the same shape of two or more axes')
    shape = (-1, ) + (1, ) * (weight.dim() - 1)
    w_norm = weight.flatten(1).norm(dim=1).view(shape)
    d_norm = direction.flatten(1).norm(dim=1).view(shape)
    return direction * (w_norm / (d_norm + EPS))


def normalise_across_outputs(direction: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The How-do-ViTs authors' ``normalize_filter``: ``direction`` rescaled, at every index of
    the axes after the first (an input channel and kernel position of a convolution, a column
    of a linear layer), to the norm of ``weight`` across the first axis (the output channels):
    ``d[:, k] · ‖w[:, k]‖ / (‖d[:, k]‖ + 10⁻⁷)``."""
    if direction.shape != weight.shape or weight.dim() < 2:
        raise ValueError(f'direction {tuple(direction.shape)} and weight '
                         f'{tuple(weight.shape)} must have the same shape of two or more axes')
    w_norm = weight.norm(dim=0, keepdim=True)
    d_norm = direction.norm(dim=0, keepdim=True)
    return direction * (w_norm / (d_norm + PAPER_EPS))


def _check_directions(params, directions):
    for d in directions:
        if len(d) != len(params):
            raise ValueError(f'a direction has {len(d)} tensors for {len(params)} parameters; '
                             'expected one per parameter, in the same order')
        for p, t in zip(params, d):
            if p.shape != t.shape:
                raise ValueError(f'a direction tensor has shape {tuple(t.shape)} for a '
                                 f'parameter of shape {tuple(p.shape)}')


@contextlib.contextmanager
def preserved_buffers(module: 'torch.nn.Module') -> Iterator['torch.nn.Module']:
    """Restore ``module``'s buffers (BN running statistics, counters) on exit: a forward pass
    in training mode inside leaves the model as it was."""
    saved = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        yield module
    finally:
        with torch.no_grad():
            for b, value in saved:
                b.copy_(value)


@contextlib.contextmanager
def displaced(params: Sequence[torch.Tensor], directions: Sequence[_Direction],
              coords: Sequence[float]) -> Iterator[List[torch.Tensor]]:
    """Set ``params`` to ``w + Σ_k coords[k] · directions[k]`` inside, back to ``w`` on exit.

    Args:
        params (Sequence[Tensor]): the parameters, changed in place.
        directions (Sequence[Sequence[Tensor] | Mapping[str, Tensor]]): each a tensor per
            parameter.
        coords (Sequence[float]): one coordinate per direction.
    """
    params = list(params)
    directions = [list(d.values()) if hasattr(d, 'values') else list(d) for d in directions]
    _check_directions(params, directions)
    if len(coords) != len(directions):
        raise ValueError(f'{len(coords)} coordinates for {len(directions)} directions')
    origin = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for i, p in enumerate(params):
                value = origin[i]
                for c, d in zip(coords, directions):
                    if c:
                        value = value + float(c) * d[i]
                p.copy_(value)
        yield params
    finally:
        with torch.no_grad():
            for p, w in zip(params, origin):
                p.copy_(w)


def grid_coordinates(span: float, steps: int) -> torch.Tensor:
    """``steps`` evenly spaced coordinates in ``[-span, span]`` (0 included for odd steps)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 2:
        raise ValueError(f'steps={steps!r} is not supported; expected an int >= 2')
    span = float(span)
    if not span > 0 or not math.isfinite(span):
        raise ValueError(f'span={span!r} is not supported; expected a positive finite float')
    return torch.linspace(-span, span, steps, dtype=torch.float64)


def loss_landscape(loss_fn: Callable[[], float], params: Sequence[torch.Tensor],
                   directions: Sequence[_Direction], coords: Sequence[_Axis],
                   on_point: Optional[Callable[[], Any]] = None) -> Landscape:
    """The loss at ``w + α d₁ (+ β d₂)`` for every point of a 1-D or 2-D grid.

    Args:
        loss_fn (callable): ``() -> float``, the loss at the parameters' current values (e.g.
            the mean over fixed batches of ``NLL`` plus :func:`l2_penalty`).
        params (Sequence[Tensor]): the parameters, perturbed in place and restored.
        directions (Sequence): one or two directions, each a sequence (or dict) of tensors
            shaped like ``params``.
        coords (Sequence[Tensor | Sequence[float]]): the coordinates along each direction.
        on_point (callable, optional): called with no argument after each point (a progress
            bar).

    Returns:
        Landscape: ``losses`` ``(n,)`` for one direction, ``(n_β, n_α)`` for two.
    """
    if len(directions) not in (1, 2) or len(coords) != len(directions):
        raise ValueError(f'{len(directions)} directions and {len(coords)} coordinate axes; '
                         'expected one or two directions with one axis each')
    coords = [torch.as_tensor(c, dtype=torch.float64).flatten() for c in coords]
    if len(directions) == 1:
        points = [(float(a), ) for a in coords[0]]
        shape = (len(coords[0]), )
    else:
        points = [(float(a), float(b)) for b in coords[1] for a in coords[0]]
        shape = (len(coords[1]), len(coords[0]))
    losses = []
    for point in points:
        with displaced(params, directions, point):
            losses.append(float(loss_fn()))
        if on_point is not None:
            on_point()
    return Landscape(coords, torch.tensor(losses, dtype=torch.float64).view(shape))


__all__ = [
    'Landscape', 'l2_penalty', 'param_weight_decays', 'filter_normalised_direction',
    'normalise_filters', 'normalise_across_outputs', 'preserved_buffers', 'displaced',
    'grid_coordinates', 'loss_landscape', 'BIAS_BN_MODES', 'CONVENTIONS'
]
