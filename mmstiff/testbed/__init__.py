"""The stiff-dynamics testbed: ODE systems whose stiffness is known by construction, as pure
functions (docs/methods.md §14). Its dataset, model and metric are registered in
:mod:`mmstiff.datasets`, :mod:`mmstiff.models` and :mod:`mmstiff.evaluation`."""
from .systems import (RelaxationSystem, flow, initial_states, local_eigenvalues, local_stiffness,
                      make_system, stiffness_ratio, trajectory, vector_field)

__all__ = [
    'RelaxationSystem', 'flow', 'initial_states', 'local_eigenvalues', 'local_stiffness',
    'make_system', 'stiffness_ratio', 'trajectory', 'vector_field'
]
