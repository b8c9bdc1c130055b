"""``mmstiff.DetStepResNet`` registered without importing mmdet.

Classification, the ViT family and the diagnostics need neither mmdet nor mmcv's compiled ops
(mmcv-lite is enough), so ``import mmstiff.models`` must not load mmdet. The registry therefore
first holds :class:`LazyDetStepResNet` under the name ``DetStepResNet``: building it imports
:mod:`mmstiff.models.backbones.det_step_resnet`, whose real class then takes the name over, and
returns the real model. Where mmdet (or mmcv's ops) is missing, or mmdet cannot run with the
installed mmcv, the build fails with one line that says what to install
(:func:`mmstiff.dependencies.missing_dependency`).
"""
from mmstiff.dependencies import import_detection_class
from mmstiff.registry import MODELS

_MODULE = 'mmstiff.models.backbones.det_step_resnet'


def load_det_step_resnet() -> type:
    """Import the detection backbone and return its class.

    Raises:
        ImportError: mmdet is not installed or cannot run with the installed mmcv, or mmcv
            comes without its compiled ops (mmcv-lite); the message names the package and
            the command that installs it.
    """
    return import_detection_class(_MODULE, 'DetStepResNet', 'mmstiff.DetStepResNet')


@MODELS.register_module(name='DetStepResNet')
class LazyDetStepResNet:
    """Stands for ``mmstiff.DetStepResNet`` until the first build; see the module docstring."""

    def __new__(cls, *args, **kwargs):
        return load_det_step_resnet()(*args, **kwargs)
