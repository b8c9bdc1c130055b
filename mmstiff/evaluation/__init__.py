"""Metrics mmstiff adds (imported for registration)."""
from .flow_metric import FlowMetric, step_stiffness_correlations

__all__ = ['FlowMetric', 'step_stiffness_correlations']
