"""Helpers the backbones share: layer selections, the unsupported-depth error, type aliases."""
from .depth import UnsupportedDepthError, check_depth
from .layers import select_layers
from .types import Fused, InitConfig, LayerSelection

__all__ = [
    'UnsupportedDepthError', 'check_depth', 'select_layers', 'Fused', 'InitConfig', 'LayerSelection'
]
