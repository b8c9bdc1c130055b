"""Checkpoints loaded without running code from them, and loaded into a model strictly.

:func:`load_checkpoint_file` loads weights-only with an allow-list of what MMEngine checkpoints
hold; :func:`install_checkpoint_loader` makes it MMEngine's loader of local files;
:func:`load_weights` loads a state dict reporting every mismatch (docs/reliability.md,
"Untrusted checkpoints" and "A checkpoint of another model").
"""
import ast
import logging
import os.path as osp
import pickle
import re
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from torch.nn.modules.module import _IncompatibleKeys

from mmstiff.errors import MmstiffError

#: What the allow-listed ``getattr`` may return: the statistics methods a ``HistoryBuffer``
#: pickles its state with.
HISTORY_BUFFER_METHODS = ('min', 'max', 'current', 'mean')
#: Keys whose missing entries do not count (as in MMEngine's ``load_state_dict``).
IGNORED_MISSING = ('num_batches_tracked', )
#: How many keys of each kind an error message lists.
LIST_LIMIT = 10
#: Words of torch's weights-only errors (and of the ``getattr`` above) that mean "refused",
#: as opposed to a file that is not a pickle at all.
REFUSALS = ('global', 'reduce', 'Can only', 'allow-list', 'blocked')
#: where :func:`torch.load` puts the tensors (its ``map_location``)
MapLocation = Union[None, str, torch.device, Dict[str, str], Callable[..., Any]]


class CheckpointError(ValueError, MmstiffError):
    """A checkpoint file that cannot be used as it is; the message names the file."""


class UntrustedCheckpointError(CheckpointError):
    """A checkpoint that refers to objects outside the allow-list (unpickling it could run
    code)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint whose parameters do not match the model (keys or shapes)."""


class NonFiniteCheckpointError(CheckpointError):
    """A checkpoint with NaN or infinite weights or statistics (a diverged or damaged run)."""


# --------------------------------------------------------------------- weights-only loading
def _history_buffer_method(obj, name):
    """The ``builtins.getattr`` of the allow-list: ``HistoryBuffer.<statistics method>`` only."""
    from mmengine.logging import HistoryBuffer
    if obj is HistoryBuffer and name in HISTORY_BUFFER_METHODS:
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f'getattr({getattr(obj, "__qualname__", type(obj).__name__)}, {name!r}) is outside the '
        f'allow-list; only HistoryBuffer.{{{",".join(HISTORY_BUFFER_METHODS)}}} is allowed')


def checkpoint_safe_globals() -> List[Any]:
    """The allow-list for ``torch.load(weights_only=True)`` of MMEngine checkpoints.

    ``HistoryBuffer``, the restricted ``getattr`` above, and numpy's array / dtype / scalar
    reconstruction under both the numpy 1 (``numpy.core``) and numpy 2 (``numpy._core``) names.
    """
    from mmengine.logging import HistoryBuffer
    reconstruct = np.ndarray.__reduce__(np.zeros(0))[0]
    scalar = np.float64(0).__reduce__()[0]
    allowed = [HistoryBuffer, (_history_buffer_method, 'builtins.getattr'), np.ndarray, np.dtype]
    for package in ('numpy.core', 'numpy._core'):
        allowed += [(reconstruct, f'{package}.multiarray._reconstruct'),
                    (scalar, f'{package}.multiarray.scalar')]
    dtypes = getattr(np, 'dtypes', None)  # numpy >= 1.25: the dtype classes
    if dtypes is not None:
        allowed += [getattr(dtypes, name) for name in dtypes.__all__]
    return allowed


def _unsafe_globals(path):
    """Globals of ``path`` outside torch's and our allow-list (call under ``safe_globals``)."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # legacy (non-zip) format: not disassembled
        return []


def _weights_only_reason(message):
    """The part of torch's weights-only error that says what was refused, on one line."""
    reason = message.split('WeightsUnpickler error:', 1)[-1]
    reason = reason.split('Check the documentation of torch.load', 1)[0]
    return ' '.join(reason.split())


def load_checkpoint_file(path: str, map_location: MapLocation = 'cpu', trust: bool = False,
                         mmap: bool = False) -> Any:
    """Load the checkpoint file ``path`` without running code from it (module docstring).

    Args:
        path (str): a local checkpoint file.
        map_location: as :func:`torch.load`. Default ``'cpu'``.
        trust (bool): unpickle in full (only for files from a source you trust); a warning
            names the file. Default False.
        mmap (bool): memory-map the tensors of a zip-format file (:func:`torch.load`).

    Raises:
        FileNotFoundError: ``path`` is not a file.
        UntrustedCheckpointError: the file refers to objects outside the allow-list, or its
            ``meta['config']`` holds code.
        CheckpointError: the file is not a readable checkpoint.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'checkpoint {path!r} does not exist')
    if trust:
        from mmengine.logging import print_log
        print_log(
            f'unpickling checkpoint {path!r} in full (--trust-checkpoint): a pickle can '
            'run code; do this only for files from a source you trust', logger='current',
            level=logging.WARNING)
        return torch.load(path, map_location=map_location, weights_only=False, mmap=mmap)
    with torch.serialization.safe_globals(checkpoint_safe_globals()):
        try:
            checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
        except pickle.UnpicklingError as exc:
            unsafe, reason = _unsafe_globals(path), _weights_only_reason(str(exc))
            if not unsafe and not any(m in reason for m in REFUSALS):
                raise CheckpointError(f'checkpoint {path!r} could not be read (not a '
                                      f'checkpoint, or damaged): {reason}') from None
            found = f'refers to {", ".join(unsafe)}' if unsafe else f'was refused: {reason}'
            raise UntrustedCheckpointError(
                f'checkpoint {path!r} {found}, outside the allow-list of what MMEngine '
                'checkpoints hold (tensors, containers, HistoryBuffer, numpy arrays and '
                'scalars); unpickling it could run code. If you trust its source, pass '
                '--trust-checkpoint to unpickle it in full.') from None
        except Exception as exc:
            raise CheckpointError(f'checkpoint {path!r} could not be read: '
                                  f'{type(exc).__name__}: {exc}') from exc
    check_meta_config(checkpoint, path)
    return checkpoint


#: AST nodes a plain ``key = value`` config is made of (``dict(...)`` calls aside).
_PLAIN_NODES = (ast.Module, ast.Assign, ast.Name, ast.Load, ast.Store, ast.Constant, ast.Dict,
                ast.List, ast.Tuple, ast.Set, ast.keyword, ast.UnaryOp, ast.USub, ast.UAdd,
                ast.Expr)


def config_code(text: str) -> Optional[str]:
    """The first construct of config ``text`` that is code rather than data, or None.

    Plain data is ``name = value`` with literals, containers and ``dict(...)`` calls; imports,
    other calls, attribute access, ``custom_imports`` (MMEngine imports those modules) and
    rebinding ``dict`` are code.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return f'a syntax error at line {exc.lineno}'
    for node in ast.walk(tree):
        line = getattr(node, 'lineno', '?')
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == 'dict'):
                return f'a call at line {line}'
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and \
                node.id in ('dict', 'custom_imports'):
            return f'an assignment to {node.id!r} at line {line}'
        elif not isinstance(node, _PLAIN_NODES):
            return f'{type(node).__name__} at line {line}'
    return None


def check_meta_config(checkpoint: Any, path: str) -> None:
    """Refuse a checkpoint whose ``meta['config']`` (run by ``Runner.resume``) holds code."""
    meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
    text = meta.get('config') if isinstance(meta, dict) else None
    if text is None:
        return
    found = config_code(text) if isinstance(text, str) else f'a {type(text).__name__}'
    if found is not None:
        raise UntrustedCheckpointError(
            f"checkpoint {path!r}: meta['config'] holds {found}; MMEngine executes that text "
            'when resuming, so it could run code. If you trust its source, pass '
            '--trust-checkpoint.')


def install_checkpoint_loader(trust: bool = False) -> None:
    """Make :func:`load_checkpoint_file` MMEngine's loader of local checkpoint files.

    Every local load of this process (``load_from``, ``--resume``, ``Pretrained`` init) then
    loads weights only, or in full with ``trust=True``.
    """
    from mmengine.runner.checkpoint import CheckpointLoader

    def load_from_local(filename, map_location):  # MMEngine logs the name after 'load_from_'
        return load_checkpoint_file(osp.expanduser(filename), map_location, trust=trust)

    CheckpointLoader.register_scheme(prefixes='', loader=load_from_local, force=True)


# --------------------------------------------------------------------- strict loading
class StateDictMismatch:
    """What did not load: ``missing`` and ``unexpected`` keys, and ``errors`` (shape
    mismatches and other messages of ``_load_from_state_dict``)."""

    def __init__(self, missing: Iterable[str] = (), unexpected: Iterable[str] = (),
                 errors: Iterable[str] = ()):
        self.missing = tuple(missing)
        self.unexpected = tuple(unexpected)
        self.errors = tuple(errors)

    def __bool__(self):
        return bool(self.missing or self.unexpected or self.errors)

    def __repr__(self):
        return (f'StateDictMismatch(missing={list(self.missing)}, '
                f'unexpected={list(self.unexpected)}, errors={list(self.errors)})')

    def describe(self, limit: int = LIST_LIMIT) -> str:
        """One line per kind, each listing up to ``limit`` entries and the count."""

        def listed(items):
            shown = ', '.join(items[:limit])
            return shown + (f', ... ({len(items) - limit} more)' if len(items) > limit else '')

        parts = []
        if self.missing:
            parts.append(f'{len(self.missing)} missing key(s): {listed(self.missing)}')
        if self.unexpected:
            parts.append(f'{len(self.unexpected)} unexpected key(s): '
                         f'{listed(self.unexpected)}')
        if self.errors:
            parts.append(f'{len(self.errors)} error(s): {listed(self.errors)}')
        return '; '.join(parts)


def state_dict_of(checkpoint: Any) -> 'OrderedDict[str, Any]':
    """The parameters of a loaded checkpoint (``checkpoint['state_dict']`` or the checkpoint
    itself), with a DDP ``module.`` prefix removed as MMEngine does."""
    state_dict = checkpoint.get('state_dict', checkpoint) if isinstance(checkpoint, dict) \
        else checkpoint
    if not isinstance(state_dict, dict):
        raise CheckpointError(f'checkpoint holds a {type(state_dict).__name__}; expected a '
                              "dict of tensors or a dict with 'state_dict'")
    metadata = getattr(state_dict, '_metadata', OrderedDict())
    revised = OrderedDict((re.sub(r'^module\.', '', k), v) for k, v in state_dict.items())
    revised._metadata = metadata
    return revised


def load_state_dict_report(module: nn.Module, state_dict: Mapping[str, Any]) -> StateDictMismatch:
    """Load ``state_dict`` into ``module`` as far as it matches; return the
    :class:`StateDictMismatch`. Each module's ``_load_from_state_dict`` (with its pre-hooks)
    and load post-hooks run as in :meth:`torch.nn.Module.load_state_dict`, so checkpoint
    upgrades apply."""
    missing, unexpected, errors = [], [], []
    metadata = getattr(state_dict, '_metadata', None)
    state_dict = OrderedDict(state_dict)

    def load(mod, local_state_dict, prefix=''):
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        mod._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing,
                                  unexpected, errors)
        for name, child in mod._modules.items():
            if child is not None:
                child_prefix = f'{prefix}{name}.'
                load(child, {
                    k: v
                    for k, v in local_state_dict.items() if k.startswith(child_prefix)
                }, child_prefix)
        incompatible = _IncompatibleKeys(missing, unexpected)  # post-hooks may edit these
        for hook in mod._load_state_dict_post_hooks.values():
            hook(mod, incompatible)

    load(module, state_dict)
    missing = [k for k in missing if not k.endswith(IGNORED_MISSING)]
    return StateDictMismatch(missing, unexpected, [e.replace('\n', ' ') for e in errors])


def compare_state_dict(model: nn.Module, state_dict: Mapping[str, Any]) -> StateDictMismatch:
    """What loading ``state_dict`` into ``model`` would not match, without loading it: the
    missing and unexpected keys and the shape mismatches (:class:`StateDictMismatch`)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict and not k.endswith(IGNORED_MISSING)]
    unexpected = [k for k in state_dict if k not in own]
    errors = [
        f'{k}: shape {tuple(v.shape)} in the checkpoint, {tuple(own[k].shape)} in the '
        'model' for k, v in state_dict.items()
        if k in own and hasattr(v, 'shape') and tuple(v.shape) != tuple(own[k].shape)
    ]
    return StateDictMismatch(missing, unexpected, errors)


def check_resume_checkpoint(model: nn.Module, path: str, trust: bool = False) -> None:
    """Refuse to resume ``model`` from a checkpoint of another model (before MMEngine loads
    it, whose optimizer would fail with a bare ``ValueError`` traceback).

    Raises:
        CheckpointMismatchError: listing the keys and shapes that differ.
    """
    from mmengine.model import is_model_wrapper
    if is_model_wrapper(model):
        model = model.module
    checkpoint = load_checkpoint_file(path, 'cpu', trust=trust)
    mismatch = compare_state_dict(model, state_dict_of(checkpoint))
    if mismatch:
        raise CheckpointMismatchError(
            f'resume checkpoint {path!r} does not match the model of the config: '
            f'{mismatch.describe()}. It was saved from another model or config; resume it '
            'with the config it was trained with, or start a new run from its weights with '
            'load_from (without --resume)')


def load_weights(model: nn.Module, checkpoint: Any, path: str,
                 strict: bool = True) -> StateDictMismatch:
    """Load the parameters of the loaded ``checkpoint`` (read from ``path``) into ``model``.

    Returns:
        StateDictMismatch: what did not load (empty when everything matched).

    Raises:
        CheckpointMismatchError: with ``strict``, for any mismatch, listing the keys.
    """
    mismatch = load_state_dict_report(model, state_dict_of(checkpoint))
    if mismatch and strict:
        raise CheckpointMismatchError(
            f'checkpoint {path!r} does not match the model of the config: '
            f'{mismatch.describe()}. It was saved from another model or config; pass '
            '--allow-partial-load to load the parts that match anyway.')
    if mismatch:
        from mmengine.logging import print_log
        print_log(
            f'checkpoint {path!r} loaded partially (--allow-partial-load): '
            f'{mismatch.describe()}', logger='current', level=logging.WARNING)
    return mismatch


def non_finite_entries(state_dict: Mapping[str, Any]) -> List[Tuple[str, int]]:
    """``[(key, number of non-finite values)]`` of the floating-point tensors of
    ``state_dict`` that hold NaN or ±inf, in the state dict's order."""
    found = []
    for key, value in state_dict.items():
        if torch.is_tensor(value) and value.is_floating_point():
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                found.append((key, bad))
    return found


def check_finite(checkpoint: Any, path: str, allow: bool = False,
                 limit: int = LIST_LIMIT) -> List[Tuple[str, int]]:
    """Refuse a checkpoint whose weights or statistics are not all finite.

    A model with NaN weights evaluates to numbers that look like results (accuracy 0.0).
    With ``allow`` (the tools' ``--allow-non-finite``) a warning names them instead.

    Raises:
        NonFiniteCheckpointError: naming the file, how many entries and the first ones.
    """
    found = non_finite_entries(state_dict_of(checkpoint))
    if not found:
        return found
    shown = ', '.join(f'{key} ({bad} value(s))' for key, bad in found[:limit])
    more = f', ... ({len(found) - limit} more)' if len(found) > limit else ''
    message = (f'checkpoint {path!r} holds non-finite (NaN or inf) values in {len(found)} '
               f'parameter(s) or statistic(s): {shown}{more}')
    if not allow:
        raise NonFiniteCheckpointError(
            f'{message}. The run that wrote it diverged or the file is damaged; pass '
            '--allow-non-finite to use it anyway.')
    from mmengine.logging import print_log
    print_log(f'{message} (--allow-non-finite: used anyway)', logger='current',
              level=logging.WARNING)
    return found


def load_checkpoint_into(model: nn.Module, path: str, strict: bool = True, trust: bool = False,
                         map_location: MapLocation = 'cpu', allow_non_finite: bool = False) -> Any:
    """Read ``path`` (:func:`load_checkpoint_file`), check that its values are finite
    (:func:`check_finite`) and load it into ``model`` (:func:`load_weights`; a model wrapper
    is unwrapped). Returns the loaded checkpoint."""
    from mmengine.model import is_model_wrapper
    if is_model_wrapper(model):
        model = model.module
    checkpoint = load_checkpoint_file(path, map_location, trust=trust)
    check_finite(checkpoint, path, allow=allow_non_finite)
    load_weights(model, checkpoint, path, strict=strict)
    return checkpoint
