"""A test file's Triton tests run in Triton's interpreter, on the CPU. Importable from any test
folder (it sits beside the root conftest.py).

Triton reads ``TRITON_INTERPRET`` when it compiles a kernel's decorator, so the kernels are
interpreted only in a process that set it before importing Triton. A file marks those tests
``interpreted_in(its driver)`` and has a driver test, marked :data:`driver`, that calls
:func:`run_interpreted` on the file: the file's tests then run again in such a process.
"""
import os
import subprocess
import sys

import pytest

from mmstiff.utils.triton_launch import HAS_TRITON

#: whether this process interprets the kernels
INTERPRETED = os.environ.get('TRITON_INTERPRET') == '1'
#: the mark of a driver test: it runs in the ordinary process, where Triton is installed
driver = pytest.mark.skipif(INTERPRETED or not HAS_TRITON, reason='drives the interpreted tests')


def interpreted_in(driver_name):
    """The mark of a test that runs only in the process ``driver_name`` starts."""
    return pytest.mark.skipif(not INTERPRETED,
                              reason=f'runs in the TRITON_INTERPRET=1 process of {driver_name}')


def run_interpreted(test_file, repo_root, markers='not slow', timeout=900):
    """Run ``test_file``'s tests selected by ``markers`` in a process that interprets the
    kernels; they must all pass, and some must run."""
    env = dict(os.environ, TRITON_INTERPRET='1', OMP_NUM_THREADS='1')
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-m', markers, test_file],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert ' passed' in proc.stdout, proc.stdout[-2000:]
