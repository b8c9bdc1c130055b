"""Models: step-size adaptors, layers and backbones (imported for registration)."""
from . import backbones, layers, steps  # noqa: F401
