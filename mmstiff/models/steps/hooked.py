"""Whether a module's hooks must see it run: code that computes a module's result without
calling it (SE's excitation as matrix products, the fused step) first asks :func:`hooked`."""
import torch.nn as nn
from torch.nn.modules import module as _module


def hooked(*modules: nn.Module) -> bool:
    """Whether any of ``modules`` (or every module, globally) has a forward or backward hook."""
    if _module._global_forward_hooks or _module._global_forward_pre_hooks or \
            _module._global_backward_hooks or _module._global_backward_pre_hooks:
        return True
    return any(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
        for m in modules)
