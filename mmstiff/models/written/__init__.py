"""Step-size adaptors written onto the residual steps of any backbone the recorders read."""
from .step_writer import StepWriter, WrittenStep, written_steps
from .with_steps import PLACEMENTS, WithSteps, WrittenBackbone, written_class

__all__ = [
    'WithSteps', 'WrittenBackbone', 'written_class', 'PLACEMENTS', 'StepWriter', 'WrittenStep',
    'written_steps'
]
