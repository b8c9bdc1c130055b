"""A residual network that learns the flow of an ODE step by step (docs/methods.md §14).

The state is the system's own state ``x ∈ ℝ^d`` (no lifting), so block ``l`` is one step
``x_l = x_{l−1} + Δ_l ⊙ f_l(x_{l−1})`` with ``f_l`` a small MLP and ``Δ_l`` from the block's
step-size adaptor (None: the plain step, ``Δ ≡ 1``; ``mmstiff.SEAdaptor``;
``mmstiff.StepNetAdaptor``), built per block with ``channels=d`` and ``layout='nlc'`` on the
state as one token. The ``L`` states are trained against the exact trajectory at
``t_1 … t_L`` (``supervise='trajectory'``) or the last one only (``'final'``).
"""
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel, BaseModule

from mmstiff.models.steps import build_adaptor, resolve_adaptor
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_positive_int

SUPERVISION = ('trajectory', 'final')


class FlowStep(BaseModule):
    """One residual step on a ``(B, 1, d)`` state: ``x + Δ ⊙ f(x)``, ``f = W₂ tanh(W₁ x)``."""

    def __init__(self, dim: int, hidden: int, adaptor: Optional[dict] = None):
        super().__init__()
        self.residual = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.adaptor = build_adaptor(adaptor, dim, 'nlc')

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The next state and the step size ``(B, d)`` (ones for the plain step)."""
        f = self.residual(x)
        if self.adaptor is None:
            return x + f, torch.ones_like(x[:, 0])
        step = self.adaptor(x, f)
        return x + step * f, step.expand_as(x)[:, 0]


@MODELS.register_module()
class FlowResNet(BaseModel):
    """``depth`` residual steps learning the flow of a ``dim``-dimensional system.

    Args:
        dim (int): the state's size ``d``.
        depth (int): steps ``L`` (the dataset's ``num_steps``).
        hidden (int): width of each step's MLP.
        adaptor (dict, optional): the step-size adaptor of every step (None: plain).
        supervise (str): ``'trajectory'`` (mean squared error over all ``L`` states) or
            ``'final'`` (the last state only).

    ``forward(inputs, trajectory, stiffness, mode)``: ``'loss'`` gives ``dict(loss=...)``;
    ``'predict'`` one dict per sample with the predicted and exact trajectories, the step
    sizes ``(L, d)`` (None for the plain step) and the local stiffness ``(L,)``; ``'tensor'``
    the final states ``(B, d)``.
    """

    def __init__(self, dim: int = 8, depth: int = 8, hidden: int = 32,
                 adaptor: Optional[dict] = None, supervise: str = 'trajectory',
                 data_preprocessor: Optional[Union[dict, nn.Module]] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        check_positive_int('dim', dim)
        check_positive_int('depth', depth)
        check_positive_int('hidden', hidden)
        if supervise not in SUPERVISION:
            raise ValueError(f'supervise={supervise!r} is not supported; expected one of '
                             f'{SUPERVISION}')
        adaptor = resolve_adaptor(adaptor)
        self.dim, self.supervise, self.adapted = dim, supervise, adaptor is not None
        self.steps = nn.ModuleList(FlowStep(dim, hidden, adaptor) for _ in range(depth))

    def integrate(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The states after each step ``(B, L, d)`` and the step sizes ``(B, L, d)``."""
        if inputs.dim() != 2 or inputs.shape[1] != self.dim:
            raise ValueError(f'inputs have shape {tuple(inputs.shape)}; expected (B, {self.dim})')
        x, states, steps = inputs[:, None], [], []
        for block in self.steps:
            x, step = block(x)
            states.append(x[:, 0])
            steps.append(step)
        return torch.stack(states, dim=1), torch.stack(steps, dim=1)

    def forward(self, inputs: torch.Tensor, trajectory: Optional[torch.Tensor] = None,
                stiffness: Optional[torch.Tensor] = None,
                mode: str = 'tensor') -> Union[torch.Tensor, Dict[str, torch.Tensor], List[dict]]:
        states, steps = self.integrate(inputs)
        if mode == 'tensor':
            return states[:, -1]
        if mode == 'loss':
            if self.supervise == 'final':
                return dict(loss=F.mse_loss(states[:, -1], trajectory[:, -1]))
            return dict(loss=F.mse_loss(states, trajectory))
        if mode == 'predict':
            return [
                dict(states=s.detach(), trajectory=t, stiffness=k,
                     steps=d.detach() if self.adapted else None)
                for s, t, k, d in zip(states, trajectory, stiffness, steps)
            ]
        raise ValueError(f'mode={mode!r} is not supported; expected tensor, loss or predict')
