"""A script of the checkout (``tools/*.py``, ``setup.py``) loaded as a module, for tests of its
functions; scripts are not a package. Importable from any test folder (it sits beside the root
conftest.py)."""
import importlib.util
import os.path as osp

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def load_script(path, name=None):
    """The script at ``path`` (relative to the checkout, or absolute), executed as a module
    named ``name`` (default: its file name); its ``__main__`` block does not run."""
    path = osp.join(REPO, path)
    name = name or osp.splitext(osp.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
