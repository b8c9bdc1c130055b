"""mmstiff: stiffness-aware step-size adaptors and frequency-aware attention for OpenMMLab."""
from .config_package import register_config_package
from .dependencies import check_det_stack
from .version import __version__, version_info

register_config_package()  # `_base_ = 'mmstiff::...'` in configs outside the repository
check_det_stack()  # an mmdet that cannot run with this mmcv: one warning, classification works

__all__ = ['__version__', 'version_info']
