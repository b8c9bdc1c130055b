"""Checks of a whole config that the tools run before the Runner is built.

* :func:`check_mmstiff_types`: every ``type='mmstiff.X'`` of the config names a registered
  mmstiff type; a misspelled one is an error naming the field and the closest registered names
  (``difflib``), where MMEngine would fail later with a ``KeyError`` that suggests nothing.
* :func:`check_train_loop`: the keys of ``train_cfg`` are arguments of the training loop the
  Runner will build; ``train_cfg.max_iters`` on an epoch-based config says that the loop is
  epoch-based and which key to use, where MMEngine would end in a ``TypeError``.

* :func:`check_runner_lists`: every entry of ``custom_hooks``, ``default_hooks``,
  ``param_scheduler`` and ``visualizer.vis_backends`` is a dict with a ``type`` the registries
  of the config's scope know; a stray string or a dict without ``type`` is an error naming the
  field, the index and the value, where MMEngine would fail inside the Runner's constructor.

* :func:`check_options`: every ``--cfg-options`` key names a field of the config, or adds one
  that is not a near-miss of an existing one (the rule: :func:`option_key_problem`); then the
  options are merged and the two checks above run on the result.

All raise ``ValueError`` with a message that names the field, the value and what to write
instead; ``mmstiff.apis.runtime`` turns it into the tools' ``error: ...`` line.
"""
import difflib
import inspect
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Union

if TYPE_CHECKING:
    from mmengine.config import Config

SCOPE_PREFIX = 'mmstiff.'
#: MMEngine's training loops: what ``train_cfg.by_epoch`` or ``train_cfg.type`` selects
TRAIN_LOOPS = {True: 'EpochBasedTrainLoop', False: 'IterBasedTrainLoop'}
#: the key a loop counts its length in, and the same key of the other loop
LENGTH_KEYS = {'EpochBasedTrainLoop': 'max_epochs', 'IterBasedTrainLoop': 'max_iters'}


def registered_mmstiff_types() -> Dict[str, str]:
    """``{'mmstiff.Name': registry name}`` of every type mmstiff registers."""
    from mmstiff import registry
    names = {}
    for reg in (registry.MODELS, registry.HOOKS, registry.DATASETS, registry.METRICS):
        reg.import_from_location()
        names.update({SCOPE_PREFIX + name: reg.name for name in reg.module_dict})
    return names


def _scoped_types(node, field=''):
    """``(field, type)`` of every dict below ``node`` whose ``type`` is a string naming
    ``mmstiff.``; ``field`` is the dotted path (``model.backbone.type``, ``custom_hooks.0.type``).
    """
    if isinstance(node, dict):
        value = node.get('type')
        if isinstance(value, str) and value.startswith(SCOPE_PREFIX):
            yield f'{field}.type' if field else 'type', value
        for key, child in node.items():
            yield from _scoped_types(child, f'{field}.{key}' if field else str(key))
    elif isinstance(node, (list, tuple)):
        for i, child in enumerate(node):
            yield from _scoped_types(child, f'{field}.{i}')


def closest_names(name: str, names: Iterable[str], n: int = 3, cutoff: float = 0.6) -> List[str]:
    """Up to ``n`` of ``names`` closest to ``name`` (``difflib``, case-insensitive)."""
    lowered = {candidate.lower(): candidate for candidate in names}
    return [
        lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=n, cutoff=cutoff)
    ]


def check_mmstiff_types(cfg: Union['Config', dict]) -> None:
    """Every ``type='mmstiff.X'`` in ``cfg`` names a registered type; else ``ValueError``
    naming the field and the closest registered names (all of them when none is close)."""
    registered = None
    for field, value in _scoped_types(cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg):
        registered = registered or registered_mmstiff_types()
        if value in registered:
            continue
        bare = [name[len(SCOPE_PREFIX):] for name in registered]
        close = [SCOPE_PREFIX + name for name in closest_names(value[len(SCOPE_PREFIX):], bare)]
        hint = (f'did you mean {" or ".join(repr(c) for c in close)}?'
                if close else f'mmstiff registers {", ".join(sorted(registered))}')
        raise ValueError(f'{field}={value!r} is not a type mmstiff registers; {hint}')


def train_loop_of(train_cfg: dict) -> Optional[str]:
    """The name of the MMEngine loop ``train_cfg`` builds (``EpochBasedTrainLoop`` or
    ``IterBasedTrainLoop``), or None for any other loop."""
    loop = train_cfg.get('type')
    if loop is None and 'by_epoch' in train_cfg:
        loop = TRAIN_LOOPS[bool(train_cfg['by_epoch'])]
    if isinstance(loop, str):
        loop = loop.split('.')[-1]
    elif isinstance(loop, type):
        loop = loop.__name__
    return loop if loop in LENGTH_KEYS else None


def check_train_loop(cfg: Union['Config', dict]) -> None:
    """Every key of ``cfg.train_cfg`` is an argument of MMEngine's loop it builds; else
    ``ValueError`` naming the key, the loop and the key to use instead."""
    train_cfg = cfg.get('train_cfg')
    if not train_cfg:
        return
    loop = train_loop_of(train_cfg)
    if loop is None:
        return
    from mmengine import runner
    taken = [
        p for p in inspect.signature(getattr(runner, loop).__init__).parameters
        if p not in ('self', 'runner', 'dataloader')
    ]
    length = LENGTH_KEYS[loop]
    for key in train_cfg:
        if key in taken or key in ('type', 'by_epoch', '_scope_'):
            continue
        kind = 'epoch' if loop == 'EpochBasedTrainLoop' else 'iteration'
        if key in LENGTH_KEYS.values():
            how = (f'this config trains for train_cfg.{length}={train_cfg.get(length)!r} '
                   f'({loop}: the loop is {kind}-based), so set train_cfg.{length} instead')
        else:
            close = closest_names(key, taken)
            how = (f'did you mean train_cfg.{close[0]}?'
                   if close else f'{loop} takes {", ".join(taken)}')
        raise ValueError(f'train_cfg.{key}={train_cfg[key]!r} is not an argument of the '
                         f'{kind}-based training loop; {how}')


#: difflib ratio from which a missing key is taken for a misspelling of an existing one
MISSPELLED = 0.8


def _keys_below(node, prefix):
    """``(dotted path, key)`` of every dict key below ``node`` (list items by index)."""
    items = node.items() if isinstance(
        node, dict) else enumerate(node) if isinstance(node, (list, tuple)) else ()
    for key, child in items:
        path = f'{prefix}.{key}' if prefix else str(key)
        if isinstance(node, dict):
            yield path, str(key)
        yield from _keys_below(child, path)


def _dotted(*parts):
    return '.'.join(p for p in parts if p)


def option_key_problem(cfg: dict, key: str) -> Optional[str]:
    """What is wrong with the option key ``key`` (``a.b.c``) on the config dict ``cfg``, or None.

    Walking the key from the root: a part under a list must be an index of it; a part under a
    value that is neither a dict nor a list cannot be set. The first part missing from its dict
    is a misspelling when it is close (difflib ratio >= 0.8) to a key of that dict, or, for a
    part that would create a new dict below the top level, close or equal to a key deeper down
    (``model.adaptr.type`` with ``model.backbone.adaptor``); otherwise it adds a new field, as
    MMEngine allows (``model.backbone.drop_path_rate``, ``optim_wrapper.paramwise_cfg.x``).
    """
    parts = key.split('.')
    node = cfg
    for i, part in enumerate(parts):
        here, rest = _dotted(*parts[:i]), _dotted(*parts[i + 1:])
        if isinstance(node, (list, tuple)):
            if not part.isdigit() or int(part) >= len(node):
                return f'{here} is a list of {len(node)} item(s); {part!r} is not an index of it'
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            return (f'{here}={node!r} in the config is not a dict, so nothing can be set below '
                    f'it (set {here} itself)')
        if part in node:
            node = node[part]
            continue
        close = closest_names(part, [str(k) for k in node], n=1, cutoff=MISSPELLED)
        if close:
            guess = _dotted(here, close[0], rest)
        elif rest and here:
            deeper = [
                path for path, name in _keys_below(node, here)
                if name == part or closest_names(part, [name], cutoff=MISSPELLED)
            ]
            if not deeper:
                return None
            guess = _dotted(deeper[0], rest)
        else:
            return None
        where = f'{here} has no key {part!r}' if here else f'the config has no key {part!r}'
        return f'{where}; did you mean {guess}?'
    return None


def check_options(cfg: 'Config', options: Dict[str, Any], mode: str = 'train') -> 'Config':
    """Check the options ``{key: value}`` (``--cfg-options`` as MMEngine's ``DictAction`` parses
    them) against the loaded config ``cfg``, merge them into it, and run the whole-config checks
    of ``mode`` on the result; else ``ValueError`` naming the option, what is wrong and the
    closest existing key."""
    plain = cfg.to_dict()
    for key, value in options.items():
        problem = option_key_problem(plain, key)
        if problem:
            raise ValueError(f'option {key}={value!r}: {problem}')
    try:
        cfg.merge_from_dict(options)
    except (TypeError, KeyError, ValueError) as err:
        raise ValueError(f'the options do not merge into the config: {err}') from None
    check_mmstiff_types(cfg)
    if mode == 'train':
        check_train_loop(cfg)
    return cfg


#: the lists (and dicts) of a config the Runner builds entries of: field -> (registry name in
#: ``mmengine.registry``, what an entry is called)
RUNNER_LISTS = {
    'custom_hooks': ('HOOKS', 'hook'),
    'default_hooks': ('HOOKS', 'hook'),
    'param_scheduler': ('PARAM_SCHEDULERS', 'parameter scheduler'),
    'visualizer.vis_backends': ('VISBACKENDS', 'visualizer backend'),
}


def _a(noun):
    return f'{"an" if noun[:1].lower() in "aeiou" else "a"} {noun}'


def _registry_names(registry):
    """Every name ``registry`` and its parents know (for the closest-name hint)."""
    names = set()
    while registry is not None:
        registry.import_from_location()
        names.update(registry.module_dict)
        registry = registry.parent
    return names


def _lookup(registry_name, type_name, scope):
    """``(found, known names)``: whether ``type_name`` builds from MMEngine's registry
    ``registry_name`` in ``scope`` (as the Runner builds it), and the names known there."""
    from mmengine import registry as registries
    root = getattr(registries, registry_name)
    with root.switch_scope_and_registry(scope) as registry:
        try:
            found = registry.get(type_name) is not None
        except Exception:  # a scope or location that does not import: the build says so
            return True, ()
        return found, _registry_names(registry)


def _entries(cfg, field):
    """``(path, entry)`` of the entries of the Runner-level ``field`` of ``cfg`` (none when the
    field is unset), or raise ``ValueError`` for a field that is not a list or dict of them."""
    node = cfg
    for part in field.split('.'):
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return []
    if field == 'default_hooks':
        if not isinstance(node, dict):
            raise ValueError(
                f'default_hooks={node!r} is {_a(type(node).__name__)}; expected a dict '
                "of hooks by name, such as dict(checkpoint=dict(type='CheckpointHook'"
                ', interval=1))')
        return [(f'default_hooks.{key}', value) for key, value in node.items() if value is not None]
    if isinstance(node, dict):
        if field == 'custom_hooks':  # the Runner iterates it: a dict gives its keys
            raise ValueError(f'custom_hooks={node!r} is a dict; expected a list of hooks, '
                             f'such as [{node!r}]')
        if 'type' in node or field != 'param_scheduler':
            return [(field, node)]
        # param_scheduler of several optimizers: their names -> a scheduler or a list of them
        found = []
        for key, value in node.items():
            items = value if isinstance(value, (list, tuple)) else [value]
            if not all(isinstance(v, dict) for v in items):
                return [(field, node)]  # a scheduler without a type: said below
            found += [(f'{field}.{key}' + (f'.{i}' if isinstance(value, (list, tuple)) else ''), v)
                      for i, v in enumerate(items)]
        return found
    if isinstance(node, (list, tuple)):
        return [(f'{field}.{i}', entry) for i, entry in enumerate(node)]
    raise ValueError(f'{field}={node!r} is {_a(type(node).__name__)}; expected a list of dicts, '
                     'each with a type')


def check_runner_lists(cfg: Union['Config', dict]) -> None:
    """Every entry of the lists the Runner builds (:data:`RUNNER_LISTS`: ``custom_hooks``,
    ``default_hooks``, ``param_scheduler``, ``visualizer.vis_backends``) is a dict whose
    ``type`` the registry of the config's ``default_scope`` knows; else ``ValueError`` naming
    the field, the index and the value (MMEngine fails inside the Runner's constructor with
    ``TypeError: hook should be an instance of Hook or dict, but got str``, or a ``KeyError``)."""
    plain = cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg
    scope = plain.get('default_scope')
    for field, (registry_name, noun) in RUNNER_LISTS.items():
        for path, entry in _entries(plain, field):
            if not isinstance(entry, dict):
                if not isinstance(entry, (str, int, float, list, tuple)) and entry is not None:
                    continue  # an object built already (a Hook instance): the Runner takes it
                named = ''
                if isinstance(entry, str) and _lookup(registry_name, entry, scope)[0]:
                    named = f'; write dict(type={entry!r}) for the {noun} of that name'
                raise ValueError(f'{path}={entry!r} is {_a(type(entry).__name__)}, not a {noun} '
                                 f"config; expected a dict with a type, such as dict(type="
                                 f"'...'){named}")
            type_name = entry.get('type')
            if type_name is None:
                raise ValueError(f'{path}={entry!r} has no type; expected the {noun} to build '
                                 "named as type='...'")
            if not isinstance(type_name, str):
                continue  # a class: the Runner builds it as it is
            found, names = _lookup(registry_name, type_name, scope)
            if found:
                continue
            close = closest_names(type_name.split('.')[-1], names)
            hint = (f'did you mean {" or ".join(repr(c) for c in close)}?'
                    if close else 'check the name, or the custom_imports that register it')
            raise ValueError(f'{path}.type={type_name!r} is not a {noun} type registered in '
                             f'{scope or "mmengine"}; {hint}')
