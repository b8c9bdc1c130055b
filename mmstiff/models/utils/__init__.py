"""Helpers the backbones share: layer selections and the unsupported-depth error."""
from .depth import UnsupportedDepthError, check_depth
from .layers import select_layers

__all__ = ['UnsupportedDepthError', 'check_depth', 'select_layers']
