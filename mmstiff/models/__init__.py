"""Models: step-size adaptors, layers and backbones (imported for registration)."""
from . import backbones, layers, plugins, steps, written  # noqa: F401
from .flow_resnet import FlowResNet

__all__ = ['FlowResNet']
