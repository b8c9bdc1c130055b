"""Whether the installed mmdet can run beside the installed mmcv, read without importing either.

mmdet 3.x asserts at import that mmcv lies in its range (3.3.0: ``>=2.0.0rc4, <2.2.0``), and
mmpretrain imports mmdet whenever it is installed, catching only ``ImportError``: an mmdet next
to an mmcv outside that range (such as ``mmcv-lite`` 2.2.0) breaks ``import mmpretrain.models``
and with it every classification run. :func:`check_det_stack`, run by ``import mmstiff``,
reads both versions from the installed files; when they do not fit, it warns in one line what
to change and makes ``import mmdet`` raise :class:`UnusablePackageError` (an ``ImportError``) in
this process, where it could not succeed anyway, so that classification keeps working.
:func:`missing_dependency` turns the ``ImportError`` a detection run meets into one line that
names the package to install. docs/install.md, "mmcv or mmcv-lite".

:func:`check_core_stack`, run first by ``import mmstiff``, finds (without importing) the packages
every run needs (torch, mmengine, mmcv, mmpretrain; none of which ``pip install mmstiff`` brings
in all cases: torch is the user's) and raises :class:`~mmstiff.errors.MissingDependencyError`
naming the missing ones and the command that installs each, printed by a tool as one ``error:``
line.
"""
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import os.path as osp
import re
import sys
import warnings
from typing import List, Optional, Sequence, Tuple

from .errors import MissingDependencyError

#: what to install for detection (the ``det`` extra of setup.py)
DET_INSTALL_HINT = 'pip install "mmstiff[det]"'
#: mmcv with its compiled ops, in the range mmdet 3.x accepts (docs/install.md says how)
MMCV_OPS_HINT = ('pip uninstall mmcv-lite, then install mmcv>=2.0.0rc4,<2.2.0 with its compiled '
                 'ops (mim install "mmcv>=2.0.0rc4,<2.2.0", or build it: docs/install.md)')
MMCV_DISTRIBUTIONS = ('mmcv', 'mmcv-lite', 'mmcv-full')
#: ``(module, what it is, the command that installs it)`` of every package a run needs, in the
#: order they are installed (requirements/runtime.txt, requirements/mminstall.txt)
CORE_PACKAGES = (
    ('torch', 'PyTorch', 'pip install torch torchvision (the build for your CUDA version; '
     'docs/install.md lists the tested versions)'),
    ('mmengine', 'MMEngine', 'pip install "mmengine>=0.8.3,<1.0.0"'),
    ('mmcv', 'MMCV', 'pip install "mmcv-lite>=2.0.0,<2.2.0" (or mmcv with its compiled ops, for '
     'detection: docs/install.md)'),
    ('mmpretrain', 'MMPretrain', 'pip install "mmpretrain>=1.2.0,<2.0.0"'),
)


class DetStackWarning(UserWarning):
    """The installed mmdet cannot run with the installed mmcv."""


class UnusablePackageError(ModuleNotFoundError):
    """``import mmdet`` where mmdet is installed but cannot run with the installed mmcv."""


def _package_dir(name):
    """The folder of the top-level package ``name`` (found, not imported), or None (also where
    a finder refuses the name, as an import blocker does)."""
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        return None
    if spec is not None and isinstance(spec.loader, _Unusable):  # blocked: look on sys.path
        spec = importlib.machinery.PathFinder.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return osp.dirname(spec.origin)


def _read(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except OSError:
        return ''


def installed_mmcv() -> Optional[Tuple[str, str]]:
    """``(distribution, version)`` of the ``mmcv`` package Python would import (``version``
    from its own ``mmcv/version.py``, ``distribution`` the one of mmcv, mmcv-lite and
    mmcv-full that installed that version), or None when there is no mmcv."""
    folder = _package_dir('mmcv')
    if folder is None:
        return None
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", _read(osp.join(folder, 'version.py')),
                      re.M)
    if found is None:
        return None
    version = found.group(1)
    dists = []
    for dist in MMCV_DISTRIBUTIONS:
        try:
            dists.append((importlib.metadata.version(dist) != version, dist))
        except importlib.metadata.PackageNotFoundError:
            pass
    return (min(dists)[1] if dists else 'mmcv'), version


def has_compiled_ops() -> bool:
    """Whether the installed mmcv carries its compiled ops (``mmcv/_ext*.so``; mmcv-lite has
    none), found without importing mmcv."""
    folder = _package_dir('mmcv')
    return folder is not None and any(
        n.startswith('_ext') and n.endswith(('.so', '.pyd')) for n in _listdir(folder))


def _listdir(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def mmdet_mmcv_range() -> Optional[Tuple[str, str, str]]:
    """``(mmdet version, minimum, maximum)``: the mmcv range the installed mmdet asserts at
    import (``mmcv_minimum_version <= mmcv < mmcv_maximum_version`` in its ``__init__.py``), or
    None where mmdet is missing or states no range."""
    folder = _package_dir('mmdet')
    if folder is None:
        return None
    source = _read(osp.join(folder, '__init__.py'))
    bounds = [
        re.search(rf"^mmcv_{b}_version\s*=\s*['\"]([^'\"]+)", source, re.M)
        for b in ('minimum', 'maximum')
    ]
    if not all(bounds):
        return None
    try:
        version = importlib.metadata.version('mmdet')
    except importlib.metadata.PackageNotFoundError:
        version = '?'
    return version, bounds[0].group(1), bounds[1].group(1)


def det_stack_conflict() -> Optional[str]:
    """One line saying what to change when the installed mmdet refuses the installed mmcv
    (None when they fit, or one of them is missing)."""
    mmcv, det = installed_mmcv(), mmdet_mmcv_range()
    if mmcv is None or det is None:
        return None
    from mmengine.utils import digit_version
    dist, version = mmcv
    det_version, low, high = det
    if digit_version(low) <= digit_version(version) < digit_version(high):
        return None
    lite = dist == 'mmcv-lite'
    keep = (f'pip install "mmcv-lite>={low},<{high}" to classify, or ' if lite else '')
    return (f'mmdet {det_version} cannot run with {dist} {version} (it needs mmcv>={low},<{high}), '
            f'so detection is off in this process; {keep}install mmcv>={low},<{high} with its '
            'compiled ops for detection (docs/install.md), or pip uninstall mmdet')


class _Unusable(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A ``sys.meta_path`` finder under which package ``name`` is found (``find_spec`` says it
    is installed) but importing it raises ``UnusablePackageError`` with ``reason``."""

    def __init__(self, name, reason):
        self.name, self.reason = name, reason

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + '.'):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise UnusablePackageError(self.reason, name=module.__name__)


def check_det_stack() -> Optional[str]:
    """Warn once, in one line, when mmdet cannot run with the installed mmcv, and make
    ``import mmdet`` fail with that line as an ``ImportError`` (as a missing mmdet would).
    Returns the line, or None when the stack is fine or mmdet is already imported."""
    if 'mmdet' in sys.modules:
        return None
    if any(isinstance(f, _Unusable) for f in sys.meta_path):
        return next(f.reason for f in sys.meta_path if isinstance(f, _Unusable))
    reason = det_stack_conflict()
    if reason is None:
        return None
    sys.meta_path.insert(0, _Unusable('mmdet', reason))
    warnings.warn(reason, DetStackWarning, stacklevel=2)
    return reason


def missing_dependency(exc: Optional[BaseException], what: str = 'this') -> Optional[str]:
    """One line naming what to install, for an ``ImportError`` raised by a detection import
    (mmdet missing or unusable, mmcv without its ops), looking through the exception's causes;
    None for any other error. ``what`` names what needed the import (``'mmstiff.CocoDataset'``).
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, UnusablePackageError):
            return f'{what} needs mmdet, but {exc}'
        if isinstance(exc, ModuleNotFoundError):
            # MMEngine's `mmdet::` bases raise it without a name: 'mmdet is not installed, ...'
            unnamed = re.match(r'(\w+) is not installed', str(exc))
            name = exc.name or (unnamed.group(1) if unnamed else '')
            core = {module: command for module, _, command in CORE_PACKAGES}
            if name in core:  # the package itself, not a module of it
                return f'{what} needs {name}, which is not installed: {core[name]}'
            if name.split('.')[0] == 'mmdet':
                return f'{what} needs mmdet, which is not installed: {DET_INSTALL_HINT}'
            if name.startswith(('mmcv._ext', 'mmcv.ops')):
                dist, version = installed_mmcv() or ('mmcv', '?')
                return (f'{what} needs mmdet, and mmdet needs mmcv with its compiled ops, which '
                        f'{dist} {version} does not have: {MMCV_OPS_HINT}')
        exc = exc.__cause__ or exc.__context__
    return None


def import_detection_class(module: str, name: str, what: str) -> type:
    """``module.name``, a class that needs mmdet; an ``ImportError`` whose one-line message
    names what to install when mmdet is missing or cannot run here (:func:`missing_dependency`).
    ``what`` names the class for the message (``'mmstiff.CocoDataset'``)."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as e:
        message = missing_dependency(e, what)
        if message is None:
            raise
        raise ImportError(message) from None


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder refusing it, a half-removed module
        return False


def missing_core_packages() -> List[Tuple[str, str, str]]:
    """``(module, what, install command)`` of every package of :data:`CORE_PACKAGES` that Python
    cannot find (found without importing it)."""
    return [package for package in CORE_PACKAGES if not _importable(package[0])]


def missing_core_line(missing: Sequence[Tuple[str, str, str]]) -> str:
    """One line naming the missing packages and the command that installs each."""
    names = ', '.join(f'{what} ({module})' for module, what, _ in missing)
    commands = '; '.join(command for _, _, command in missing)
    return (f'mmstiff needs {names}, which {"is" if len(missing) == 1 else "are"} not '
            f'installed in this Python ({sys.executable}): {commands}')


def _one_line_hook(previous):
    """A ``sys.excepthook`` that prints a :class:`MissingDependencyError` left uncaught as one
    ``error:`` line (its traceback with ``MMSTIFF_DEBUG=1``) and passes anything else on."""

    def hook(kind, value, tb):
        if isinstance(value, MissingDependencyError) and \
                os.environ.get('MMSTIFF_DEBUG', '') in ('', '0'):
            print(f'error: {value}', file=sys.stderr)
            return
        previous(kind, value, tb)

    hook.one_line = True
    return hook


def check_core_stack() -> None:
    """Raise :class:`~mmstiff.errors.MissingDependencyError` naming what to install when a
    package of :data:`CORE_PACKAGES` is missing; a process that does not catch it (a tool,
    ``python -c 'import mmstiff'``) ends with that one line and exit status 1."""
    missing = missing_core_packages()
    if not missing:
        return
    if not getattr(sys.excepthook, 'one_line', False):
        sys.excepthook = _one_line_hook(sys.excepthook)
    raise MissingDependencyError(missing_core_line(missing))
