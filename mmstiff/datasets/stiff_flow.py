"""The flow of a relaxation system as a dataset (docs/methods.md §14).

Each sample is a starting state ``x₀`` with the exact states ``x(t_1) … x(t_L)`` of its
trajectory at ``t_l = l · horizon / L`` and the local stiffness (the spectral radius of the
Jacobian) at ``x(t_0) … x(t_{L−1})``, the state each of the ``L`` steps starts from. The
system comes from ``system_seed``, the starting states from ``seed`` (offset for the test
split), so the data are a pure function of the config.
"""
import torch
from torch.utils.data import Dataset

from mmstiff.registry import DATASETS
from mmstiff.testbed.systems import initial_states, local_stiffness, make_system, trajectory
from mmstiff.utils.checks import check_positive_int

SPLITS = ('train', 'test')
#: added to ``seed`` for the test split's starting states, so the two splits never share one.
TEST_SEED_OFFSET = 1_000_003


@DATASETS.register_module()
class StiffFlowDataset(Dataset):
    """Starting states and the exact trajectories of a relaxation system.

    Args:
        dim (int): coordinates ``d`` (even).
        spread (float): eigenvalue spread ``S`` of the rates.
        coupling (float): ``c`` (0: the linear system).
        num_samples (int): starting states.
        horizon (float): the final time ``T``.
        num_steps (int): ``L``, the states recorded along each trajectory (one per step of the
            network that learns the flow).
        split (str): ``'train'`` or ``'test'``.
        seed (int): the seed of the starting states.
        system_seed (int): the seed of the rotation.

    Each item is ``dict(inputs=x₀ (d,), trajectory=(L, d), stiffness=(L,))`` in float32.
    """

    def __init__(self, dim: int = 8, spread: float = 100.0, coupling: float = 0.0,
                 num_samples: int = 1024, horizon: float = 1.0, num_steps: int = 8,
                 split: str = 'train', seed: int = 0, system_seed: int = 0):
        if split not in SPLITS:
            raise ValueError(f'split={split!r} is not supported; expected one of {SPLITS}')
        check_positive_int('num_samples', num_samples)
        check_positive_int('num_steps', num_steps)
        if not float(horizon) > 0:
            raise ValueError(f'horizon={horizon!r} is not supported; expected a positive float')
        self.system = make_system(dim, spread, coupling, system_seed)
        offset = TEST_SEED_OFFSET if split == 'test' else 0
        x0 = initial_states(num_samples, dim, seed + offset)
        states = trajectory(self.system, x0, float(horizon), num_steps)
        starts = torch.cat([x0[:, None], states[:, :-1]], dim=1)
        self.inputs = x0.float()
        self.trajectories = states.float()
        self.stiffness = local_stiffness(self.system, starts).float()
        self.metainfo = dict(dim=dim, spread=float(spread), coupling=float(coupling),
                             horizon=float(horizon), num_steps=num_steps, split=split)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, index):
        return dict(inputs=self.inputs[index], trajectory=self.trajectories[index],
                    stiffness=self.stiffness[index])
