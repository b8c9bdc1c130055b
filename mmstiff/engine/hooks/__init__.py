"""Training diagnostics hooks (registered in mmstiff's HOOKS; use ``type='mmstiff.Name'``)."""
from .diagnostic_hook import TrajectoryDiagnosticHook, reduce_scalars_across_ranks
from .frequency_hook import FrequencyHook
from .stiffness_hook import StiffnessHook

__all__ = ['TrajectoryDiagnosticHook', 'reduce_scalars_across_ranks', 'StiffnessHook',
           'FrequencyHook']
