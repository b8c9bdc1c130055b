"""``mmstiff.DetStepResNet`` registered without importing mmdet.

Classification, the ViT family and the diagnostics need neither mmdet nor mmcv's compiled ops
(mmcv-lite is enough), so ``import mmstiff.models`` must not load mmdet. The registry therefore
first holds :class:`LazyDetStepResNet` under the name ``DetStepResNet``: building it imports
:mod:`mmstiff.models.backbones.det_step_resnet`, whose real class then takes the name over, and
returns the real model. Where mmdet (or mmcv's ops) is missing, the build fails with one line
that says what to install.
"""
import importlib

from mmstiff.registry import MODELS

#: what to install for detection (the ``det`` extra of setup.py)
DET_INSTALL_HINT = 'pip install "mmstiff[det]"'
_MODULE = 'mmstiff.models.backbones.det_step_resnet'


def load_det_step_resnet():
    """Import the detection backbone and return its class.

    Raises:
        ImportError: mmdet is not installed, or mmcv comes without its compiled ops
            (mmcv-lite); the message names the package and the command that installs it.
    """
    try:
        return importlib.import_module(_MODULE).DetStepResNet
    except ModuleNotFoundError as e:
        missing = (e.name or '').split('.')[0]
        if missing == 'mmdet':
            raise ImportError('mmstiff.DetStepResNet needs mmdet, which is not installed: '
                              f'{DET_INSTALL_HINT}') from None
        if (e.name or '').startswith(('mmcv._ext', 'mmcv.ops')):
            raise ImportError('mmstiff.DetStepResNet needs mmdet, and mmdet needs mmcv with its '
                              'compiled ops, but this mmcv has none (mmcv-lite?): install mmcv '
                              '(mim install "mmcv>=2.0.0rc4,<2.2.0"), then '
                              f'{DET_INSTALL_HINT}') from None
        raise


@MODELS.register_module(name='DetStepResNet')
class LazyDetStepResNet:
    """Stands for ``mmstiff.DetStepResNet`` until the first build; see the module docstring."""

    def __new__(cls, *args, **kwargs):
        return load_det_step_resnet()(*args, **kwargs)
