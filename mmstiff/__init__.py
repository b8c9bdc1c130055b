"""mmstiff: stiffness-aware step-size adaptors and frequency-aware attention for OpenMMLab."""
from .version import __version__, version_info

__all__ = ['__version__', 'version_info']
