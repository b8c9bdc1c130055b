# mmdet is optional: DetStepResNet is registered by lazy_det and imported on first use
from .alternet import AlterNet  # noqa: F401
from .cait import CaiT  # noqa: F401
from .lazy_det import LazyDetStepResNet  # noqa: F401
from .preact_resnet import PreActStepResNet  # noqa: F401
from .step_resnet import StepResNet  # noqa: F401
from .step_resnet_cifar import StepResNet_CIFAR  # noqa: F401
from .step_swin import StepSwin  # noqa: F401
from .step_vit import StepViT  # noqa: F401


def __getattr__(name: str) -> type:
    """``from mmstiff.models.backbones import DetStepResNet`` imports mmdet only then."""
    if name == 'DetStepResNet':
        from .lazy_det import load_det_step_resnet
        return load_det_step_resnet()
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
