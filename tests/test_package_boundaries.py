"""The package ``mmstiff`` holds library code only.

Command lines (``argparse``, ``sys.exit``), processes (``subprocess``, ``os.system``, apt) and
plotting live in ``tools/``; figures in :mod:`mmstiff.visualization`, which only the tools
import; test-data writers in :mod:`mmstiff.testing`, which only the tests import.

matplotlib itself cannot be kept out of every process: with the pinned stack,
``import mmpretrain.models`` (which every backbone of ``mmstiff.models`` subclasses) loads it
through ``mmdet.models`` -> ``mmdet.utils.mot_error_visualize`` -> ``matplotlib.pyplot``. So:

* a fresh interpreter that imports every package of mmstiff whose upstream imports are free of
  it (``mmstiff``, ``engine``, ``datasets``, ``analysis``, ``utils``, ``registry``) has no
  matplotlib afterwards;
* a fresh interpreter that also imports ``mmstiff.models`` and builds and runs a model through
  the registry, as a training config does, loads neither ``mmstiff.visualization`` nor
  ``mmstiff.testing``, and an import hook shows that no mmstiff module is what imported
  matplotlib;
* an AST scan of every ``mmstiff/**.py``: no module imports ``argparse`` or ``subprocess``,
  uses an ``ArgumentParser`` or a ``DictAction`` (``mmstiff/apis/cli.py`` aside: the argument
  groups the tools share), calls ``sys.exit`` or ``os.system``, names
  ``apt-get`` in its code (docstrings aside), or imports matplotlib or
  ``mmstiff.visualization`` (except ``mmstiff/visualization/`` itself, for matplotlib, and the
  dashboard hook, which imports the figure module inside the function that draws it, so that
  only a run that draws its dashboard loads matplotlib through mmstiff).
  ``mmstiff/testing/`` gets no exemption: its writers need only numpy, PIL and the standard
  library.
"""
import ast
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
PACKAGE = osp.join(REPO, 'mmstiff')

FORBIDDEN_MODULES = ('argparse', 'subprocess')
FORBIDDEN_CALLS = {('sys', 'exit'), ('os', 'system')}
FORBIDDEN_NAMES = ('ArgumentParser', 'DictAction')
#: package folder -> what it alone may import
ALLOWED = {'visualization': ('matplotlib', )}
#: the module of the argument groups the tools share: it builds parsers (and never exits)
CLI_MODULE = osp.join('mmstiff', 'apis', 'cli.py')
CLI_ONLY = ('argparse', 'ArgumentParser', 'DictAction')
#: the one module outside visualization/ that imports it: inside the function that draws
DASHBOARD_MODULE = osp.join('mmstiff', 'engine', 'hooks', 'dashboard_hook.py')

#: Records, for every matplotlib module a process imports, the module whose code imported it.
SPY = r'''
import importlib.abc
import sys

importers = []


class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'matplotlib':
            frame = sys._getframe(1)
            while frame is not None and (frame.f_code.co_filename.startswith('<frozen')
                                         or frame.f_globals.get('__name__') == 'importlib'):
                frame = frame.f_back
            importers.append(frame.f_globals.get('__name__') if frame else None)
        return None


sys.meta_path.insert(0, Spy())
'''

REPORT = r'''
import json
print(json.dumps(dict(
    importers=sorted({m for m in importers if m and m.split('.')[0] != 'matplotlib'}),
    loaded=sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'
                  or m.startswith(('mmstiff.visualization', 'mmstiff.testing'))),
    **result)))
'''

LIBRARY = SPY + r'''
import mmstiff, mmstiff.engine, mmstiff.datasets, mmstiff.analysis  # noqa
import mmstiff.utils, mmstiff.registry  # noqa
result = {}
''' + REPORT

WITH_MODELS = SPY + r'''
import mmstiff, mmstiff.models, mmstiff.engine, mmstiff.datasets, mmstiff.analysis  # noqa
import mmstiff.utils, mmstiff.registry  # noqa
import torch
from mmengine.registry import MODELS, init_default_scope

init_default_scope('mmpretrain')
model = MODELS.build(dict(type='mmstiff.StepResNet', depth=18,
                          adaptor=dict(type='mmstiff.StepNetAdaptor')))
model.eval()
with torch.no_grad():
    out = model(torch.rand(1, 3, 32, 32))
result = dict(model=type(model).__module__, out=list(out[-1].shape))
''' + REPORT


def _report(script, path=()):
    """Run ``script`` in a fresh interpreter (``path``: folders put first on its PYTHONPATH)."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(
            [*path, REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_library_imports_load_no_matplotlib_and_no_test_code():
    report = _report(LIBRARY)
    assert report['loaded'] == [] and report['importers'] == []


@pytest.mark.slow
def test_building_a_model_loads_matplotlib_only_through_upstream():
    report = _report(WITH_MODELS)
    assert report['model'] == 'mmstiff.models.backbones.step_resnet'
    assert report['out'] == [1, 512, 1, 1]
    assert not [m for m in report['importers'] if m.startswith('mmstiff')], report['importers']
    assert not [m for m in report['loaded'] if m.startswith('mmstiff')], report['loaded']


def test_the_import_hook_names_the_importer(tmp_path):
    (tmp_path / 'mmstiff_probe.py').write_text('import importlib\n'
                                               'importlib.import_module("matplotlib")\n')
    script = SPY + 'import mmstiff_probe\nresult = {}\n'
    report = _report(script + REPORT, path=[str(tmp_path)])
    assert report['importers'] == ['mmstiff_probe'] and 'matplotlib' in report['loaded']


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith('.py'):
                path = osp.join(folder, name)
                yield osp.relpath(path, REPO), path


def _absolute(node, relpath):
    """The module an ``import`` / ``from ... import`` names, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module]
    package = osp.dirname(relpath).split(osp.sep)  # a module's package, or an __init__'s own
    base = package[:len(package) - node.level + 1]
    return ['.'.join(base + ([node.module] if node.module else []))]


def _docstrings(tree):
    nodes = [tree] + [
        n for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    return {
        id(n.body[0].value)
        for n in nodes
        if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }


def violations(relpath, source):
    """``['file:line: what']`` for every CLI, process or plotting use in one module."""
    tree = ast.parse(source, relpath)
    subpackage = relpath.split(osp.sep)[1] if relpath.count(osp.sep) > 1 else ''
    allowed = ALLOWED.get(subpackage, ()) + (CLI_ONLY if relpath == CLI_MODULE else ())
    forbidden_modules = tuple(m for m in FORBIDDEN_MODULES if m not in allowed)
    forbidden_names = tuple(n for n in FORBIDDEN_NAMES if n not in allowed)
    docstrings = _docstrings(tree)
    # the dashboard hook may import the figures, inside a function only
    draws = relpath == DASHBOARD_MODULE
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        where = f'{relpath}:{getattr(node, "lineno", 0)}'
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for module in _absolute(node, relpath):
                top = module.split('.')[0]
                if top in forbidden_modules:
                    found.append(f'{where}: imports {module}')
                if top == 'matplotlib' and 'matplotlib' not in allowed:
                    found.append(f'{where}: imports {module}')
                if (module.startswith('mmstiff.visualization') and subpackage != 'visualization'
                        and not (draws and id(node) not in top_level)):
                    found.append(f'{where}: imports {module}')
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, relpath)[0]
                for alias in node.names:
                    if alias.name in forbidden_names or (module, alias.name) in FORBIDDEN_CALLS:
                        found.append(f'{where}: imports {alias.name} from {module}')
                    if (f'{module}.{alias.name}'.startswith('mmstiff.visualization')
                            and not module.startswith('mmstiff.visualization')
                            and subpackage != 'visualization'
                            and not (draws and id(node) not in top_level)):
                        found.append(f'{where}: imports mmstiff.visualization')
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in FORBIDDEN_CALLS:
                found.append(f'{where}: uses {node.value.id}.{node.attr}')
            if node.attr in forbidden_names:
                found.append(f'{where}: uses {node.attr}')
        elif isinstance(node, ast.Name) and node.id in forbidden_names:
            found.append(f'{where}: uses {node.id}')
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and 'apt-get' in node.value and id(node) not in docstrings):
            found.append(f'{where}: runs or names apt-get')
    return found


def test_no_module_of_the_package_holds_cli_process_or_plotting_code():
    found = []
    for relpath, path in _modules():
        with open(path, encoding='utf-8') as f:
            found += violations(relpath, f.read())
    assert found == []


@pytest.mark.parametrize('source, what', [
    ('import argparse\n', 'imports argparse'),
    ('from argparse import ArgumentParser\n', 'imports argparse'),
    ('import subprocess\nsubprocess.run(["ls"])\n', 'imports subprocess'),
    ('import sys\n\ndef f():\n    sys.exit("error")\n', 'uses sys.exit'),
    ('from sys import exit\n', 'imports exit from sys'),
    ('import os\nos.system("true")\n', 'uses os.system'),
    ('CMD = ["apt-get", "install"]\n', 'names apt-get'),
    ('from mmengine.config import DictAction\n', 'imports DictAction'),
    ('import matplotlib.pyplot as plt\n', 'imports matplotlib.pyplot'),
    ('from ..visualization import plots\n', 'imports mmstiff.visualization'),
    ('from mmstiff import visualization\n', 'imports mmstiff.visualization'),
    ('from .. import visualization\n', 'imports mmstiff.visualization'),
])
def test_the_scan_catches_each_kind(source, what):
    found = violations(osp.join('mmstiff', 'analysis', 'x.py'), source)
    assert any(what in line for line in found), found


def test_the_scan_allows_docstrings_and_the_visualization_package():
    doc = '"""Install it with apt-get install -y pkg."""\nimport os\n'
    assert violations(osp.join('mmstiff', 'datasets', 'x.py'), doc) == []
    plotting = 'import matplotlib\nfrom . import plots\n'
    assert violations(osp.join('mmstiff', 'visualization', 'x.py'), plotting) == []


def test_only_the_dashboard_hook_draws_and_only_inside_a_function():
    inside = 'def draw():\n    from mmstiff.visualization import dashboard\n'
    assert violations(DASHBOARD_MODULE, inside) == []
    top = 'from mmstiff.visualization import dashboard\n'
    assert any('imports mmstiff.visualization' in line
               for line in violations(DASHBOARD_MODULE, top))
    other = osp.join('mmstiff', 'engine', 'hooks', 'stiffness_hook.py')
    assert any('imports mmstiff.visualization' in line for line in violations(other, inside))
    assert any('imports matplotlib' in line
               for line in violations(DASHBOARD_MODULE, 'def f():\n    import matplotlib\n'))


def test_the_cli_module_may_build_parsers_but_not_exit_or_run():
    parsers = ('import argparse\nfrom mmengine.config import DictAction\n'
               'p = argparse.ArgumentParser()\n')
    assert violations(CLI_MODULE, parsers) == []
    assert violations(osp.join('mmstiff', 'apis', 'runtime.py'), parsers)
    for source, what in [('import sys\nsys.exit(1)\n', 'uses sys.exit'),
                         ('import subprocess\n', 'imports subprocess')]:
        assert any(what in line for line in violations(CLI_MODULE, source)), source
