"""The errors that name a mistake of the user, and how an exception is told to be one.

A user's mistake (a config field, a data file, a checkpoint, an option) ends a tool with one
``error: ...`` line and exit status 1 (:mod:`mmstiff.tool_main`); anything else (a bug, an
upstream exception this module does not recognise) keeps its traceback. An exception is the
user's when

* it is a :class:`MmstiffError` (the project's own error classes derive from it), or
* it is one of :data:`ON_PURPOSE` raised by a ``raise`` statement in a file of mmstiff (the
  package, or the ``tools/`` beside it): the checks of the library raise plain ``ValueError``,
  ``KeyError`` and ``FileNotFoundError`` with a message naming the field and the value, and an
  ``int('x')`` or a missing dict key inside mmstiff stays a bug, or
* it carries such an exception: raised ``from`` it, or rebuilt from it while handling it, its
  message holding the first one's (``type(e)(f'Failed to import ...: {e}')``).

An ``ImportError`` of a missing or unusable package is the user's too: the tools' line for it
(:func:`mmstiff.tool_main.error_line`) comes from :func:`mmstiff.dependencies.missing_dependency`,
which imports this module. Only the standard library is imported here: the missing-dependency
line must work without torch.
"""
import linecache
import os.path as osp
import re
from typing import Optional, Tuple

#: the exception classes a ``raise`` statement in mmstiff uses for a user's mistake
ON_PURPOSE = (ValueError, KeyError, FileNotFoundError)


class MmstiffError(Exception):
    """Base of mmstiff's errors that name a mistake of the user (a config field, a data file, a
    checkpoint, an option); the tools print their message as one ``error:`` line."""


class MissingDependencyError(MmstiffError, ImportError):
    """A package mmstiff needs (torch, mmengine, mmcv, mmpretrain) is not installed; the message
    says which and the command that installs it."""


def project_folders() -> Tuple[str, str]:
    """The folders whose ``raise`` statements count as on purpose: the package (its ``.mim/tools``
    included) and the ``tools/`` of a checkout."""
    package = osp.dirname(osp.abspath(__file__))
    return (package + osp.sep, osp.join(osp.dirname(package), 'tools') + osp.sep)


def _innermost_frame(exc):
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def raise_site(exc: BaseException) -> Optional[Tuple[str, int, str]]:
    """``(file, line number, source line)`` of the statement that raised ``exc``, or None."""
    tb = _innermost_frame(exc)
    if tb is None:
        return None
    path = tb.tb_frame.f_code.co_filename
    return path, tb.tb_lineno, linecache.getline(path, tb.tb_lineno).strip()


def raised_on_purpose(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`ON_PURPOSE` raised by a ``raise`` statement in mmstiff."""
    if not isinstance(exc, ON_PURPOSE):
        return False
    site = raise_site(exc)
    if site is None:
        return False
    path, _, line = site
    in_project = osp.abspath(path).startswith(project_folders())
    return in_project and re.match(r'raise\b', line) is not None


def _rebuilt_from(outer, inner):
    """Whether ``outer`` was raised while handling ``inner`` as a new form of it (its message
    holds ``inner``'s)."""
    return inner is not None and bool(str(inner)) and str(inner) in str(outer)


def user_error(exc: Optional[BaseException]) -> Optional[BaseException]:
    """The exception of the chain of ``exc`` that names a user's mistake (``exc`` itself, or the
    one it was raised from or rebuilt from), or None when ``exc`` is not the user's."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MmstiffError) or raised_on_purpose(exc):
            return exc
        if exc.__cause__ is not None:
            exc = exc.__cause__
        elif not exc.__suppress_context__ and _rebuilt_from(exc, exc.__context__):
            exc = exc.__context__
        else:
            return None
    return None


def message_of(exc: BaseException) -> str:
    """The text of ``exc`` on one line (a ``KeyError``'s without the quotes ``str`` adds)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        text = exc.args[0]
    else:
        text = str(exc)
    return ' '.join(text.split()) or type(exc).__name__
