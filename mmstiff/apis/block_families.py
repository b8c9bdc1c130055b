"""Which family and block class each recorded step belongs to, for the tools' outputs."""
from typing import TYPE_CHECKING, Dict

if TYPE_CHECKING:
    from mmstiff.analysis import TrajectoryRecorder


def block_families(recorder: 'TrajectoryRecorder') -> Dict[str, dict]:
    """``{block name: dict(block_class=, family=)}`` of the blocks a ``TrajectoryRecorder``
    records: the family its spec names, else the block class's module's package."""
    families = {}
    for block in recorder.blocks:
        cls = type(block.module)
        family = block.spec.family if block.spec is not None else cls.__module__.split('.')[-1]
        families[block.name] = dict(block_class=cls.__name__, family=family)
    return families


def families_label(blocks: Dict[str, dict]) -> str:
    """``'ConvNeXt: ConvNeXtBlock'`` (``; ``-separated) of the families of per-step entries."""
    seen = {}
    for entry in blocks.values():
        if 'family' in entry:
            seen.setdefault(entry['family'], set()).add(entry['block_class'])
    return '; '.join(f'{family}: {", ".join(sorted(classes))}'
                     for family, classes in seen.items()) or 'no block'


__all__ = ['block_families', 'families_label']
