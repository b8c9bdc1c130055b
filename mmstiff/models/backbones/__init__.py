from .det_step_resnet import DetStepResNet  # noqa: F401
from .step_resnet import StepResNet  # noqa: F401
from .step_vit import StepViT  # noqa: F401
from .step_swin import StepSwin  # noqa: F401
