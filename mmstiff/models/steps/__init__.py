"""Step-size adaptors ``(x_t, f) -> Δ_t``: constant (plain ResNet), SE, StepNet."""
from mmstiff.utils.layout import pool_state
from .base import (ADAPTOR_NORMS, STARTS, ConstantStep, StepAdaptor, adaptor_with_norm, apply_step,
                   build_adaptor, check_adaptor_norm, check_start, init_keeping_starts,
                   learns_statistics, release_adaptor_statistics, resolve_adaptor,
                   unfrozen_res_layers)
from .placement import adaptor_placement
from .se import SEAdaptor
from .step import (FUSED, StepBlock, check_fused, choose_step, forced_step_kernels, reference_step,
                   set_fused)
from .stepnet import StepNetAdaptor, grouped_pointwise, interleave_states

__all__ = ['StepAdaptor', 'ConstantStep', 'apply_step', 'pool_state']
__all__ += [
    'adaptor_placement', 'SEAdaptor', 'StepNetAdaptor', 'interleave_states', 'grouped_pointwise',
    'build_adaptor', 'resolve_adaptor', 'adaptor_with_norm'
]
__all__ += [
    'STARTS', 'ADAPTOR_NORMS', 'check_start', 'check_adaptor_norm', 'init_keeping_starts',
    'learns_statistics', 'release_adaptor_statistics', 'unfrozen_res_layers'
]
__all__ += [
    'FUSED', 'StepBlock', 'check_fused', 'choose_step', 'forced_step_kernels', 'reference_step',
    'set_fused'
]
