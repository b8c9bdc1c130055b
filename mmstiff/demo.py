"""``python -m mmstiff.demo``: the first run of a new install, from any folder.

Runs the ``tools/demo.py`` that came with this mmstiff (``.mim/tools`` of an installed package,
``tools/`` of a checkout) with ``--quick`` (unless ``--data-root`` is given): a tiny dataset in
Fashion-MNIST's format written locally, one short epoch of the demo config, its evaluation and
its diagnostics, with nothing downloaded. Other arguments pass through
(``python -m mmstiff.demo --work-dir DIR``); docs/install.md, "First run".
"""
import os.path as osp
import runpy
import sys
from typing import List, Sequence

from mmstiff.tool_main import run_tool


def demo_script() -> str:
    """The path of ``demo.py`` among the tools of this mmstiff.

    Raises:
        FileNotFoundError: neither an installed ``.mim/tools`` nor a checkout's ``tools/``.
    """
    package = osp.dirname(osp.abspath(__file__))
    folders = [osp.join(package, '.mim', 'tools'), osp.join(osp.dirname(package), 'tools')]
    for folder in folders:
        if osp.isfile(osp.join(folder, 'demo.py')):
            return osp.join(folder, 'demo.py')
    raise FileNotFoundError(f'this mmstiff has no tools/demo.py (looked in {folders}); '
                            'reinstall it with pip install, which copies the tools')


def demo_argv(args: Sequence[str]) -> List[str]:
    """The command line of ``tools/demo.py`` for ``python -m mmstiff.demo ARGS``."""
    given = {a.split('=')[0] for a in args}
    return list(args) if given & {'--data-root', '--quick'} else ['--quick', *args]


def main() -> None:
    """Run the demo script with the command line of ``python -m mmstiff.demo``."""
    script = demo_script()
    sys.argv = [script, *demo_argv(sys.argv[1:])]
    runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
    run_tool(main)
