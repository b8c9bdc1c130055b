"""Step-size adaptors ``(x_t, f) -> Δ_t``: constant (plain ResNet), SE, StepNet."""
from .base import ConstantStep, StepAdaptor, apply_step, pool_state

__all__ = ['StepAdaptor', 'ConstantStep', 'apply_step', 'pool_state']
