"""Training diagnostics hooks (registered in mmstiff's HOOKS; use ``type='mmstiff.Name'``)."""
from .dashboard_hook import DashboardHook
from .diagnostic_hook import TrajectoryDiagnosticHook
from .divergence_hook import DivergenceError, DivergenceHook
from .frequency_hook import FrequencyHook
from .hessian_hook import HessianHook
from .safe_checkpoint_hook import SafeCheckpointHook
from .scalar_rows import reduce_scalars_across_ranks
from .stiffness_hook import StiffnessHook

__all__ = [
    'TrajectoryDiagnosticHook', 'reduce_scalars_across_ranks', 'StiffnessHook', 'FrequencyHook',
    'HessianHook'
]
__all__ += ['SafeCheckpointHook', 'DivergenceHook', 'DivergenceError', 'DashboardHook']
