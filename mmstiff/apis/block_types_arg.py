"""``--block-types``: the analysis tools' way to declare block classes the tables do not know."""
import argparse
from typing import Optional

#: the mmstiff hooks whose ``block_types`` a config may carry (the tools take them over)
_HOOKS = ('StiffnessHook', 'FrequencyHook')


def add_block_types_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--block-types CLASS=KIND ...`` to an analysis tool's parser."""
    parser.add_argument(
        '--block-types', nargs='+', default=None, metavar='CLASS=KIND',
        help="block classes of the model that the built-in tables do not know, each "
        "CLASS=conv|preact|transformer (e.g. ConvNeXtBlock=conv); the config's StiffnessHook / "
        'FrequencyHook block_types are taken too')


def _parse(items):
    declared = {}
    for item in items or ():
        name, sep, kind = item.partition('=')
        if not sep or not name or not kind:
            raise ValueError(f'--block-types holds {item!r}; expected CLASS=KIND, e.g. '
                             'ConvNeXtBlock=conv')
        declared[name] = kind
    return declared


def block_types_for(args: argparse.Namespace, cfg=None) -> Optional[dict]:
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


__all__ = ['add_block_types_arg', 'block_types_for']
