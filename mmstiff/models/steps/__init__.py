"""Step-size adaptors ``(x_t, f) -> Δ_t``: constant (plain ResNet), SE, StepNet.

The adaptor base (:mod:`.base`), building adaptors from a config (:mod:`.build`), grafting them
onto a plain checkpoint (:mod:`.graft`), the Euler update (:mod:`.update`) and how a block takes
its step (:mod:`.step`); every name is imported from this package.
"""
from mmstiff.utils.layout import pool_state
from .base import STARTS, ConstantStep, StepAdaptor, check_start, step_from_means
from .build import adaptor_with_norm, build_adaptor, resolve_adaptor
from .graft import (ADAPTOR_NORMS, check_adaptor_norm, init_keeping_starts, learns_statistics,
                    release_adaptor_statistics, unfrozen_res_layers)
from .placement import adaptor_placement
from .se import SEAdaptor
from .step import FUSED, StepBlock, check_fused, choose_step, forced_step_kernels, set_fused
from .stepnet import StepNetAdaptor, grouped_pointwise, interleave_states
from .update import apply_step, reference_step

__all__ = ['StepAdaptor', 'ConstantStep', 'apply_step', 'pool_state', 'step_from_means']
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
