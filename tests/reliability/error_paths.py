"""Every error path of mmstiff that names a user's mistake, found in the sources, and a driver
that ends a tool on each of them in a process of its own.

:func:`raise_sites` lists (by parsing every file of ``mmstiff/`` and ``tools/``) each ``raise``
statement of a ``ValueError``, ``KeyError`` or ``FileNotFoundError``, or of one of mmstiff's
own error classes (:class:`mmstiff.errors.MmstiffError` and its subclasses): none is picked by
hand, a new one is covered as soon as it is written.

Run as a script (``python error_paths.py SITES.json RESULTS.json``), this file is the driver: it
imports the stack once, then for each site forks a fresh process that runs a tool's ending
(:func:`mmstiff.tool_main.run_tool`) on a ``main`` that builds a model through MMEngine's
registry, whose ``__init__`` raises that site's exception from that site's file and line (the
code compiled at that position), as the Runner's build would meet it. The parent records each
child's exit status and stderr.
"""
import ast
import json
import os
import os.path as osp
import sys

HERE = osp.dirname(osp.abspath(__file__))
REPO = osp.dirname(osp.dirname(HERE))
SOURCES = ('mmstiff', 'tools')
BUILTIN = {'ValueError': ValueError, 'KeyError': KeyError, 'FileNotFoundError': FileNotFoundError}
#: the modules that define mmstiff's error classes (imported so that their subclasses are known)
ERROR_MODULES = ('mmstiff.apis.runtime', 'mmstiff.utils.checkpoint', 'mmstiff.engine',
                 'mmstiff.studies.files', 'mmstiff.models.utils.depth', 'mmstiff.models.steps',
                 'mmstiff.datasets.preflight', 'mmstiff.datasets.safe_pickle', 'mmstiff.errors')


def mmstiff_error_classes():
    """``{name: class}`` of :class:`mmstiff.errors.MmstiffError` and every subclass."""
    import importlib

    from mmstiff.errors import MmstiffError
    for module in ERROR_MODULES:
        importlib.import_module(module)
    found, todo = {}, [MmstiffError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo += cls.__subclasses__()
    return found


def _raised_name(node):
    exc = node.exc
    if isinstance(exc, ast.Call):
        exc = exc.func
    if isinstance(exc, ast.Name):
        return exc.id
    if isinstance(exc, ast.Attribute):
        return exc.attr
    return None


def raise_sites(names=None):
    """``[dict(path, line, cls)]`` of every ``raise`` of the classes ``names`` (default: the
    built-in ones of :data:`BUILTIN` and mmstiff's error classes) in the sources."""
    names = set(names or (set(BUILTIN) | set(mmstiff_error_classes())))
    sites = []
    for top in SOURCES:
        for folder, _, files in os.walk(osp.join(REPO, top)):
            if '.mim' in folder or '__pycache__' in folder:
                continue
            for name in sorted(files):
                if not name.endswith('.py'):
                    continue
                path = osp.join(folder, name)
                with open(path, encoding='utf-8') as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Raise) and _raised_name(node) in names:
                        sites.append(
                            dict(
                                path=osp.relpath(path, REPO), line=node.lineno,
                                cls=_raised_name(node)))
    return sorted(sites, key=lambda s: (s['path'], s['line']))


def site_id(site):
    return f"{site['path']}:{site['line']}:{site['cls']}"


def marker(site):
    """The message the driver gives the exception of ``site`` (named in the error line)."""
    return f"bad value at {site['path']} line {site['line']}"


def _exception(site, classes):
    cls = BUILTIN.get(site['cls']) or classes[site['cls']]
    message = marker(site)
    try:
        return cls(message)
    except TypeError:  # a class with its own arguments: built bare, message set after
        exc = cls.__new__(cls)
        exc.args = (message, )
        return exc


def _raiser(site, classes):
    """A function that raises the exception of ``site`` from its file and line."""
    path = osp.join(REPO, site['path'])
    code = compile('\n' * (site['line'] - 1) + 'raise _exc', path, 'exec')
    exc = _exception(site, classes)

    def raise_there():
        exec(code, {'_exc': exc})

    return raise_there


def _child(site, classes, debug, err_path):
    """In the forked process: stderr to ``err_path``, then a tool's ending on the site."""
    from mmengine.registry import MODELS

    from mmstiff.tool_main import run_tool
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    raise_there = _raiser(site, classes)

    class SiteModel:  # built by MMEngine's registry, as the Runner builds a model

        def __init__(self):
            raise_there()

    name = f'ErrorSite{os.getpid()}'
    MODELS.register_module(name=name, module=SiteModel)
    argv = ['tool.py'] + (['--debug'] if debug else [])
    status = 0
    try:
        run_tool(lambda: MODELS.build(dict(type=name)), argv=argv)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    sys.stderr.flush()
    os._exit(status)


def drive(sites, out_dir, debug_every=25):
    """Fork one process per site (and, for every ``debug_every``-th, a second with
    ``--debug``); return ``{site id: dict(status, stderr, debug=bool)}``."""
    classes = mmstiff_error_classes()
    results = {}
    for i, site in enumerate(sites):
        for debug in ((False, True) if i % debug_every == 0 else (False, )):
            err_path = osp.join(out_dir, f'{i}{"d" if debug else ""}.err')
            pid = os.fork()
            if pid == 0:
                _child(site, classes, debug, err_path)
            _, status = os.waitpid(pid, 0)
            with open(err_path) as f:
                stderr = f.read()
            key = site_id(site) + (':debug' if debug else '')
            results[key] = dict(
                status=os.waitstatus_to_exitcode(status), stderr=stderr, debug=debug)
    return results


if __name__ == '__main__':
    with open(sys.argv[1]) as f:
        given = json.load(f)
    out = drive(given, osp.dirname(osp.abspath(sys.argv[2])))
    with open(sys.argv[2], 'w') as f:
        json.dump(out, f)
