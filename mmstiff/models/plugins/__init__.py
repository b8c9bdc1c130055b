"""Plugins for mmdet's ``ResNet(plugins=[...])`` mechanism."""
from .step_plugin import StepPlugin

__all__ = ['StepPlugin']
