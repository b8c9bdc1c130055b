"""How every command-line entry point of mmstiff ends: one ``error:`` line for a user's mistake.

``run_tool(main)`` (the last line of each tool, ``if __name__ == '__main__'``) runs the tool's
``main()``; an exception that names a user's mistake (:func:`mmstiff.errors.error_line`) ends it
with one ``error: ...`` line on stderr and exit status 1, wherever it was raised (the tool's own
checks, the Runner's build of the model, the datasets or the hooks). Anything else keeps its
traceback. ``--debug`` anywhere on the command line (taken off before the tool parses it) or
``MMSTIFF_DEBUG=1`` prints the traceback of a user's mistake too, before the same line; the
setting passes on to the tools a tool starts (the demo's, the study runner's).

In a distributed run (``RANK`` / ``SLURM_PROCID`` / ``OMPI_COMM_WORLD_RANK`` above 0) only rank 0
prints the line; every rank exits with status 1, the others :data:`RANK_GRACE_S` later, so that
a launcher that stops every process at the first failure (torchrun) lets rank 0 print first.
Nothing is removed on the way out: the checkpoints and logs written so far stay, and the work-dir
lock goes with the process.
"""
import logging
import os
import sys
import time
import traceback

from .errors import error_line

#: the command-line flag and the environment variable that ask for the traceback
DEBUG_FLAG = '--debug'
DEBUG_ENV = 'MMSTIFF_DEBUG'
#: the environment variables the launchers give each process its global rank in
RANK_VARIABLES = ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK')
#: how long a rank above 0 waits before it exits on a user's mistake
RANK_GRACE_S = 2.0


def take_debug_flag(argv):
    """Remove ``--debug`` from ``argv`` (in place, before a ``--``) and return whether the
    traceback is asked for (the flag, or ``MMSTIFF_DEBUG`` set to anything but ``0``/empty);
    with the flag, ``MMSTIFF_DEBUG=1`` is set for the processes this one starts."""
    end = argv.index('--') if '--' in argv else len(argv)
    flagged = DEBUG_FLAG in argv[1:end]
    if flagged:
        argv[:] = [a for i, a in enumerate(argv) if i >= end or i == 0 or a != DEBUG_FLAG]
        os.environ[DEBUG_ENV] = '1'
    return flagged or debug_from_env()


def debug_from_env():
    return os.environ.get(DEBUG_ENV, '') not in ('', '0')


def process_rank():
    """The global rank a launcher gave this process (0 when there is none)."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, '')
        if value.isdigit():
            return int(value)
    return 0


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


def report(exc, line, debug):
    """Print the user's-mistake ``line`` for ``exc`` (after its traceback with ``debug``)."""
    sys.stdout.flush()
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if process_rank() == 0 or debug:
        try:
            _log_to_files(line)
        except Exception:  # the line matters more than the log
            pass
        print(line, file=sys.stderr, flush=True)
    else:
        time.sleep(RANK_GRACE_S)


def run_tool(main, argv=None):
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
        line = error_line(exc)
        if line is None:
            raise
        report(exc, line, debug)
        raise SystemExit(1) from None
