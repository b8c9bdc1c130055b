"""mmstiff: stiffness-aware step-size adaptors and frequency-aware attention for OpenMMLab."""
from .dependencies import check_core_stack, check_det_stack

check_core_stack()  # torch, mmengine, mmcv or mmpretrain missing: one line saying what to install

from .config_package import register_config_package  # noqa: E402
from .version import __version__, version_info  # noqa: E402

register_config_package()  # `_base_ = 'mmstiff::...'` in configs outside the repository
check_det_stack()  # an mmdet that cannot run with this mmcv: one warning, classification works

__all__ = ['__version__', 'version_info']
