"""Argument checks shared by the backbones, layers, adaptors, recorders and hooks.

Each function checks one kind of value before any work starts and raises ``ValueError`` with a
message that names the field, the bad value and what was expected; on success it returns the
value in the form the caller keeps (a list of patterns, a set of indices, ...). All are pure:
they import nothing from mmstiff, so any layer of the package may use them.
"""
import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any, FrozenSet, Iterable, List, Optional


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name, value, minimum, expected, optional):
    if optional and value is None:
        return None
    if not _is_int(value) or value < minimum:
        expected = f'None or {expected}' if optional else expected
        raise ValueError(f'{name}={value!r} is not supported; expected {expected}')
    return value


def check_positive_int(name: str, value: Any, optional: bool = False) -> Optional[int]:
    """``value`` if it is an int >= 1 (or None, with ``optional``); else ``ValueError``."""
    return _check_int(name, value, 1, 'a positive int', optional)


def check_non_negative_int(name: str, value: Any, optional: bool = False) -> Optional[int]:
    """``value`` if it is an int >= 0 (or None, with ``optional``); else ``ValueError``."""
    return _check_int(name, value, 0, 'an int >= 0', optional)


def check_indices(name: str, value: Any, size: int, what: str = 'items',
                  alternatives: Sequence[str] = ()) -> FrozenSet[int]:
    """The indices of a sequence into ``size`` items, as a frozenset in ``[0, size)``.

    Negative indices count from the end (``-1`` is the last item), as in Python.

    Args:
        name (str): the field, for the message (``'attn_scale_layers'``, ``'adaptor_blocks[1]'``).
        value (Sequence[int]): the indices.
        size (int): the number of items indexed.
        what (str): what the items are, for the message (``'layers'``, ``'blocks'``).
        alternatives (Sequence[str]): the other forms the caller accepts, for the message
            (``("None", "'all'")``).
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        forms = [*alternatives, f'a sequence of indices of the {what}']
        expected = ' or '.join([', '.join(forms[:-1]), forms[-1]] if len(forms) > 1 else forms)
        raise ValueError(f'{name}={value!r} is not supported; expected {expected}')
    selected = set()
    for index in value:
        if not _is_int(index) or not -size <= index < size:
            raise ValueError(f'{name} holds {index!r}, which is not an index of {size} {what}; '
                             f'expected ints in [{-size}, {size - 1}]')
        selected.add(index % size)
    return frozenset(selected)


def check_patterns(name: str, value: Any, what: str = 'block names') -> Optional[List[str]]:
    """``fnmatch`` patterns as a list: None stays None (select everything), a string is one
    pattern; anything but a sequence of strings raises ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value,
                      (list, tuple, set, frozenset)) or not all(isinstance(p, str) for p in value):
        raise ValueError(f'{name}={value!r} is not supported; expected None (all of them) or '
                         f"a list of fnmatch patterns of {what}, e.g. ['layer1.*', 'layer3.0']")
    return list(value)


def matches_any(name: str, patterns: Optional[Iterable[str]]) -> bool:
    """Whether ``name`` matches one of the ``fnmatch`` ``patterns`` (case-sensitive); every
    name matches ``None``."""
    return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def check_config(name: str, cfg: Any, reserved: Sequence[str] = (),
                 example: Optional[str] = None) -> Optional[dict]:
    """A component config: None, or a dict with a ``'type'`` and none of the ``reserved`` keys
    (those the caller fills in itself). Returns a copy (a plain dict) or None.

    Args:
        name (str): the field (``'adaptor'``, ``'msa_adaptor'``).
        cfg (dict | None): the config.
        reserved (Sequence[str]): keys the config must not set.
        example (str, optional): a valid config, for the message.
    """
    if cfg is None:
        return None
    if not isinstance(cfg, Mapping) or 'type' not in cfg:
        hint = f', e.g. {example}' if example else ''
        raise ValueError(f"{name}={cfg!r} is not supported; expected None or a dict with a "
                         f"'type'{hint}")
    for key in reserved:
        if key in cfg:
            raise ValueError(f'{name}={dict(cfg)!r} sets {key!r}, which is filled in for each '
                             'module built from it; remove it from the config')
    return dict(cfg)
