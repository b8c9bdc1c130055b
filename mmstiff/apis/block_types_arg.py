"""The ``block_types`` of an analysis tool's run: ``--block-types`` (the option is in
:mod:`mmstiff.apis.cli`) and the config's hooks."""
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    from mmengine.config import Config

#: the mmstiff hooks whose ``block_types`` a config may carry (the tools take them over)
_HOOKS = ('StiffnessHook', 'FrequencyHook')


def _parse(items):
    declared = {}
    for item in items or ():
        name, sep, kind = item.partition('=')
        if not sep or not name or not kind:
            raise ValueError(f'--block-types holds {item!r}; expected CLASS=KIND, e.g. '
                             'ConvNeXtBlock=conv')
        declared[name] = kind
    return declared


def block_types_for(args: Any, cfg: Optional[Union['Config', dict]] = None) -> Optional[dict]:
    """The ``block_types`` of a tool run: those of the config's mmstiff hooks, then those of
    ``--block-types`` (which win), checked; None if neither declares any."""
    from mmstiff.analysis.blocks import block_types_of
    declared = {}
    for hook in (cfg or {}).get('custom_hooks', None) or ():
        kind = str(hook.get('type', '')).rpartition('.')[2]
        if kind in _HOOKS and hook.get('block_types'):
            declared.update(block_types_of(hook['block_types']))
    declared.update(block_types_of(_parse(getattr(args, 'block_types', None))) or {})
    return declared or None


__all__ = ['block_types_for']
