from .step_vit import StepViT  # noqa: F401
from .step_swin import StepSwin  # noqa: F401
