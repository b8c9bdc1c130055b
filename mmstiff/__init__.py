"""mmstiff: stiffness-aware step-size adaptors and frequency-aware attention for OpenMMLab."""
from .config_package import register_config_package
from .version import __version__, version_info

register_config_package()  # `_base_ = 'mmstiff::...'` in configs outside the repository

__all__ = ['__version__', 'version_info']
