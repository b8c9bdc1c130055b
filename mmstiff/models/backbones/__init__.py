from .det_step_resnet import DetStepResNet  # noqa: F401
from .step_resnet import StepResNet  # noqa: F401
from .preact_resnet import PreActStepResNet  # noqa: F401
from .step_resnet_cifar import StepResNet_CIFAR  # noqa: F401
from .step_vit import StepViT  # noqa: F401
from .step_swin import StepSwin  # noqa: F401
