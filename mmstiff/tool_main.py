"""How every command-line entry point of mmstiff ends: one ``error:`` line for a user's mistake.

``run_tool(main)`` (the last line of each tool, ``if __name__ == '__main__'``) runs the tool's
``main()``; an exception that names a user's mistake (:func:`error_line`) ends it
with one ``error: ...`` line on stderr and exit status 1, wherever it was raised (the tool's own
checks, the Runner's build of the model, the datasets or the hooks). Anything else keeps its
traceback. ``--debug`` anywhere on the command line (taken off before the tool parses it) or
``MMSTIFF_DEBUG=1`` prints the traceback of a user's mistake too, before the same line; the
setting passes on to the tools a tool starts (the demo's, the study runner's).

An exception raised in a DataLoader worker process reaches the main process as PyTorch's
wrapper (``ValueError: Caught ValueError in DataLoader worker process 0. Original Traceback
...``); the wrapped exception is judged as if the main process had raised it (its class, the file
and line of its ``raise``, the exceptions it was raised from), so a user's mistake in a dataset
ends in the same line with ``num_workers > 0`` as without (:func:`worker_error_line`). mmcv's
``failed to load image: PATH`` (a file that is not a readable image) is one line too, and so is a
file the machine refuses to write or open (a full disk, a quota, a read-only folder, no
permission: :func:`io_line`).

In a distributed run (``RANK`` / ``SLURM_PROCID`` / ``OMPI_COMM_WORLD_RANK`` set) the line is
printed once, by the first rank that meets a mistake: rank 0 at once, another rank after
:data:`RANK_GRACE_S` (so that a mistake every rank meets is rank 0's line, and a launcher that
stops every process at the first failure, torchrun or srun, stops the others first), naming
itself (``error: on rank 1 (of 2): ...``). Which rank printed is agreed through the process
group's store where there is one; another rank's failure that follows (a collective whose peer
left) then ends silently with status 1 instead of a traceback. Without a store, rank 0 prints at
once and another rank after the grace. Every rank exits with status 1. Nothing is removed on the
way out: the checkpoints and logs written so far stay, and the work-dir lock goes with the
process.
"""
import ast
import contextlib
import errno
import logging
import os
import re
import sys
import time
import traceback
from typing import Any, Callable, List, Optional

from .dependencies import missing_dependency
from .errors import ON_PURPOSE, MmstiffError, message_of, project_folders, user_error

#: the command-line flag and the environment variable that ask for the traceback
DEBUG_FLAG = '--debug'
DEBUG_ENV = 'MMSTIFF_DEBUG'
#: the environment variables the launchers give each process its global rank in, and the
#: number of processes
RANK_VARIABLES = ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK')
WORLD_VARIABLES = ('WORLD_SIZE', 'SLURM_NTASKS', 'OMPI_COMM_WORLD_SIZE')
#: the key of the process group's store that counts the ranks that met a mistake
ERROR_KEY = 'mmstiff/error_line'
#: how long a rank above 0 waits before it exits on a user's mistake
RANK_GRACE_S = 2.0


def take_debug_flag(argv: List[str]) -> bool:
    """Remove ``--debug`` from ``argv`` (in place, before a ``--``) and return whether the
    traceback is asked for (the flag, or ``MMSTIFF_DEBUG`` set to anything but ``0``/empty);
    with the flag, ``MMSTIFF_DEBUG=1`` is set for the processes this one starts."""
    end = argv.index('--') if '--' in argv else len(argv)
    flagged = DEBUG_FLAG in argv[1:end]
    if flagged:
        argv[:] = [a for i, a in enumerate(argv) if i >= end or i == 0 or a != DEBUG_FLAG]
        os.environ[DEBUG_ENV] = '1'
    return flagged or debug_from_env()


def debug_from_env() -> bool:
    """Whether ``MMSTIFF_DEBUG`` asks for the traceback: set to anything but ``0`` or empty."""
    return os.environ.get(DEBUG_ENV, '') not in ('', '0')


def process_rank() -> int:
    """The global rank a launcher gave this process (0 when there is none)."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, '')
        if value.isdigit():
            return int(value)
    return 0


def world_size() -> int:
    """The number of processes a launcher started (1 when there is none)."""
    for name in WORLD_VARIABLES:
        value = os.environ.get(name, '')
        if value.isdigit():
            return int(value)
    return 1


def distributed() -> bool:
    """Whether a launcher gave this process a rank."""
    return any(os.environ.get(name, '').isdigit() for name in RANK_VARIABLES)


# ------------------------------------------------------------------ DataLoader workers
#: PyTorch's text of an exception of a DataLoader worker (``torch._utils.ExceptionWrapper``)
WORKER_WRAPPER = re.compile(
    r'^Caught [\w.]+ in DataLoader worker process (?P<worker>\d+)\.\nOriginal '
    r'(?P<text>Traceback \(most recent call last\):\n.*)\Z', re.S)
#: how Python's traceback text joins the exceptions of a chain
CHAINED = re.compile(r'\n(The above exception was the direct cause of the following exception|'
                     r'During handling of the above exception, another exception occurred):\n\n')
FRAME = re.compile(
    r'^  File "(?P<path>[^"]+)", line (?P<line>\d+), in .*\n'
    r'(?P<source>    .*\n)?(?:    *[~^]+ *\n)?', re.M)
EXCEPTION_LINE = re.compile(r'^(?P<cls>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?\Z', re.S)
#: mmcv's LoadImageFromFile on a file it cannot decode
UNREADABLE_IMAGE = 'failed to load image: '


def _parse_exception(block):
    """``(class name, message, innermost (path, line, source) or None)`` of one exception of a
    formatted traceback text, or None when it does not read as one."""
    frames = list(FRAME.finditer(block))
    rest = (block[frames[-1].end():] if frames else block).strip('\n').split('\n')
    while rest and rest[0].startswith(' '):  # more source lines of the statement, or its marks
        rest.pop(0)
    match = EXCEPTION_LINE.match('\n'.join(rest))
    if match is None:
        return None
    site = None
    if frames:
        last = frames[-1]
        site = (last['path'], int(last['line']), (last['source'] or '').strip())
    message = match['message'] or ''
    if match['cls'].split('.')[-1] == 'KeyError' and message[:1] in ('"', "'"):
        try:
            message = str(ast.literal_eval(message))
        except (ValueError, SyntaxError):
            pass
    return match['cls'], message, site


def _is_mmstiff_error_class(name):
    module, _, cls = name.rpartition('.')
    found = getattr(sys.modules.get(module), cls, None) if module.startswith('mmstiff') else None
    return isinstance(found, type) and issubclass(found, MmstiffError)


def _text_is_users(cls, site):
    """Whether the exception of class ``cls`` raised at ``site`` (read from a traceback text) is
    a user's mistake, as :func:`mmstiff.errors.user_error` judges a live one."""
    if _is_mmstiff_error_class(cls):
        return True
    if cls not in {c.__name__ for c in ON_PURPOSE} or site is None:
        return False
    path, _, source = site
    return (os.path.abspath(path).startswith(project_folders())
            and re.match(r'raise\b', source) is not None)


def upstream_line(cls: str, message: str) -> Optional[str]:
    """The line for an upstream exception that names a bad data file, or None."""
    if cls.split('.')[-1] == 'AssertionError' and message.startswith(UNREADABLE_IMAGE):
        path = message[len(UNREADABLE_IMAGE):].split('\n')[0].strip()
        return (f'error: image file {path} could not be read as an image (a damaged file, or '
                'not an image); expected a file that OpenCV decodes (JPEG, PNG, ...): replace '
                'it, or remove it from the annotation file')
    return None


def _worker_text_line(text):
    """The line of the formatted exception chain ``text`` of a worker, or None: the last
    exception, or one it was raised from (or rebuilt from), that is a user's mistake."""
    parts = CHAINED.split(text)
    blocks, links = parts[0::2], parts[1::2]
    outer = None
    for i in range(len(blocks) - 1, -1, -1):
        parsed = _parse_exception(blocks[i])
        if parsed is None:
            return None
        cls, message, site = parsed
        if outer is None:
            known = upstream_line(cls, message)
            if known is not None:
                return known
        elif not (links[i].startswith('The above') or (message and message in outer)):
            return None  # raised while handling it, but not a new form of it
        if _text_is_users(cls, site):
            return f'error: {" ".join(message.split()) or cls.split(".")[-1]}'
        outer = message
    return None


def worker_error_line(exc: Optional[BaseException]) -> Optional[str]:
    """The ``error:`` line of an exception raised in a DataLoader worker and raised again by
    PyTorch in the main process (module docstring), or None when ``exc`` (and what it was
    raised from) is no such wrapper of a user's mistake."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        match = WORKER_WRAPPER.match(str(exc.args[0]) if exc.args else '')
        if match is not None:
            return _worker_text_line(match['text'])
        exc = exc.__cause__ or exc.__context__
    return None


#: ``errno`` values of a file the machine refused to write: no space, a quota, a file too large,
#: a read-only file system; and no permission
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
NO_PERMISSION = (errno.EACCES, errno.EPERM)


def io_line(exc: Optional[BaseException]) -> Optional[str]:
    """The line for a file the machine refused (a full disk, a quota, a read-only folder, no
    permission: :data:`NO_SPACE`, :data:`NO_PERMISSION`), wherever the tool wrote or opened it
    (a figure, a results file), or None. A training run says more (the newest complete
    checkpoint and how to resume; :func:`mmstiff.apis.runtime.run`)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in NO_SPACE + NO_PERMISSION:
            code = errno.errorcode.get(exc.errno, str(exc.errno))
            what = f'{exc.filename}' if exc.filename else 'a file'
            verb = 'could not write' if exc.errno in NO_SPACE else 'no permission for'
            return (f'error: {verb} {what}: {exc.strerror} ({code}); the files written before '
                    'it are intact')
        exc = exc.__cause__ or exc.__context__
    return None


def failure_line(exc: BaseException) -> Optional[str]:
    """The ``error:`` line for ``exc`` (a user's mistake, in this process or in a DataLoader
    worker, a file the machine refused, or a known upstream data error), or None: it keeps its
    traceback."""
    line = worker_error_line(exc)
    if line is None:
        line = error_line(exc)
    if line is None:
        line = io_line(exc)
    if line is None and isinstance(exc, AssertionError):
        line = upstream_line('AssertionError', str(exc))
    return line


# ------------------------------------------------------------------ ranks
def _error_store():
    """The store of the run's process group (where one is set up), or None."""
    dist = sys.modules.get('torch.distributed')
    if dist is None:
        return None
    try:
        from datetime import timedelta
        if dist.is_available() and dist.is_initialized():
            from torch.distributed.distributed_c10d import _get_default_store
            store = _get_default_store()
        elif os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True':
            store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),
                                  is_master=False, timeout=timedelta(seconds=10))
        else:
            return None
        store.set_timeout(timedelta(seconds=10))
        return store
    except Exception:  # no store to agree through: the grace alone keeps the line single
        return None


def _count_errors(store, add):
    """Add ``add`` to the run's count of ranks that met a mistake; return the count (None where
    the store cannot be reached: the rank that held it has ended)."""
    key = f'{ERROR_KEY}/{os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}'
    with _quiet_stderr():  # c10d's own warning, with C++ frames, when the store is gone
        try:
            return store.add(key, add)
        except Exception:
            return None


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 to ``/dev/null`` for the block (what C++ code writes there too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, 'w') as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


#: what gloo and NCCL say when a peer of a collective has left
PEER_LEFT = re.compile(
    r'Connection (closed|reset) by peer|Broken pipe|NCCL communicator was '
    r'aborted|remote process exited', re.I)


def another_rank_reported(exc: BaseException) -> bool:
    """Whether, in a distributed run, ``exc`` follows another rank's error line: that rank has
    counted its line in the store, or (the store gone with rank 0, which held it) ``exc`` says
    that a peer of a collective left."""
    if not distributed():
        return False
    if process_rank() > 0 and PEER_LEFT.search(str(exc)) is not None:
        return True  # rank 0 printed why it left (a store it held has gone with it)
    store = _error_store()
    count = None if store is None else _count_errors(store, 0)
    return bool(count)


def _print_line(line):
    try:
        _log_to_files(line)
    except Exception:  # the line matters more than the log
        pass
    print(line, file=sys.stderr, flush=True)


def _log_to_files(line):
    """Append ``line`` to the log files of MMEngine's current logger (the run's ``.log``), so
    the log says why the run stopped; nothing when no logger exists."""
    mmengine_logging = sys.modules.get('mmengine.logging')
    if mmengine_logging is None or not mmengine_logging.MMLogger._instance_dict:
        return
    logger = mmengine_logging.MMLogger.get_current_instance()
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, line, None, None)
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def report(exc: BaseException, line: str, debug: bool) -> None:
    """Print the user's-mistake ``line`` for ``exc`` (after its traceback with ``debug``); in a
    distributed run once, by the first rank that meets it (module docstring)."""
    sys.stdout.flush()
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if not distributed():
        _print_line(line)
        return
    rank = process_rank()
    if rank > 0:
        time.sleep(RANK_GRACE_S)  # rank 0 first, when it meets the mistake too
        line = f'error: on rank {rank} (of {world_size()}): {line[len("error: "):]}'
    store = _error_store()
    count = None if store is None else _count_errors(store, 1)
    if count is None or count == 1:
        _print_line(line)


def error_line(exc: BaseException, what: str = 'this config') -> Optional[str]:
    """``'error: ...'`` for an exception that is the user's (:mod:`mmstiff.errors`, or an
    ``ImportError`` of a missing or unusable package), else None; ``what`` names what needed
    a missing package (``'this config needs mmdet, ...'``)."""
    found = user_error(exc)
    if found is not None:
        return f'error: {message_of(found)}'
    if isinstance(exc, ImportError):
        missing = missing_dependency(exc, what)
        if missing is not None:
            return f'error: {missing}'
    return None


def run_tool(main: Callable[[], Any], argv: Optional[List[str]] = None) -> Any:
    """Run ``main()`` as a tool's entry point (module docstring); returns what it returns.

    Args:
        main (Callable[[], Any]): the tool's ``main``, reading ``sys.argv`` (without
            ``--debug``, which this takes off).
        argv (list[str], optional): the command line to take ``--debug`` off; ``sys.argv``.
    """
    debug = take_debug_flag(sys.argv if argv is None else argv)
    try:
        return main()
    except Exception as exc:
        line = failure_line(exc)
        if line is None:
            if not debug and another_rank_reported(exc):
                raise SystemExit(1) from None  # the consequence of that rank's mistake
            raise
        report(exc, line, debug)
        raise SystemExit(1) from None
