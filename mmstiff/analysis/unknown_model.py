"""The message for a model in which the recorders find no residual block."""
from collections import Counter
from typing import List, Tuple

import torch.nn as nn

from .zoo import non_residual_reason

#: containers, never blocks themselves
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def frequent_composites(model: nn.Module, top: int = 3) -> List[Tuple[str, int]]:
    """The ``top`` most frequent classes of ``model``'s modules that have submodules (the
    candidates for a block class; of all its modules where none has), as ``(class name,
    count)``, most frequent first."""
    modules = [m for m in model.modules() if m is not model and not isinstance(m, _CONTAINERS)]
    composites = [m for m in modules if next(m.children(), None) is not None]
    counts = Counter(type(module).__name__ for module in composites or modules)
    return counts.most_common(top)


def no_block_message(model: nn.Module) -> str:
    """Why ``model`` has no block to record, and what to add to the config."""
    name = type(model).__name__
    reason = non_residual_reason(model)
    if reason:
        return (f'{name} has no residual step to record: {reason}. The stiffness and frequency '
                'instruments read residual networks (docs/diagnostics.md, "Which modules are '
                'steps")')
    frequent = frequent_composites(model)
    listed = ', '.join(f'{cls} ({count})' for cls, count in frequent) or 'none'
    example = frequent[0][0] if frequent else 'MyBlock'
    return (f'{name} has no residual block the recorder knows; its most frequent module classes '
            f'with submodules are {listed}. If {example} computes x + f(x), declare it in the '
            f"hook: dict(type='mmstiff.StiffnessHook', block_types=dict({example}='conv')) (the "
            "same for FrequencyHook and --block-types in the analysis tools; 'transformer' for "
            'attention + MLP layers, or a dict of its steps: docs/diagnostics.md, "Which modules '
            'are steps"; in Python: mmstiff.analysis.register_block_type)')


__all__ = ['frequent_composites', 'no_block_message']
