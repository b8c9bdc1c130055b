"""Checks of a whole config that the tools run before the Runner is built.

* :func:`check_mmstiff_types`: every ``type='mmstiff.X'`` of the config names a registered
  mmstiff type; a misspelled one is an error naming the field and the closest registered names
  (``difflib``), where MMEngine would fail later with a ``KeyError`` that suggests nothing.
* :func:`check_train_loop`: the keys of ``train_cfg`` are arguments of the training loop the
  Runner will build; ``train_cfg.max_iters`` on an epoch-based config says that the loop is
  epoch-based and which key to use, where MMEngine would end in a ``TypeError``.

Both raise ``ValueError`` with a message that names the field, the value and what to write
instead; ``mmstiff.apis.runtime`` turns it into the tools' ``error: ...`` line.
"""
import difflib
import inspect

SCOPE_PREFIX = 'mmstiff.'
#: MMEngine's training loops: what ``train_cfg.by_epoch`` or ``train_cfg.type`` selects
TRAIN_LOOPS = {True: 'EpochBasedTrainLoop', False: 'IterBasedTrainLoop'}
#: the key a loop counts its length in, and the same key of the other loop
LENGTH_KEYS = {'EpochBasedTrainLoop': 'max_epochs', 'IterBasedTrainLoop': 'max_iters'}


def registered_mmstiff_types():
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


def closest_names(name, names, n=3):
    """Up to ``n`` of ``names`` closest to ``name`` (``difflib``, case-insensitive)."""
    lowered = {candidate.lower(): candidate for candidate in names}
    return [lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=n, cutoff=0.6)]


def check_mmstiff_types(cfg):
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


def train_loop_of(train_cfg):
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


def check_train_loop(cfg):
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
