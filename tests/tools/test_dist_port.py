"""dist_train.sh / dist_test.sh on a master port in use stop naming it, before torchrun starts
(before: a DistNetworkError traceback from every process)."""
import socket

import pytest
from script_modules import load_script  # tests/


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize('script, args', [('tools/dist_train.sh', ['CONFIG.py', '2']),
                                          ('tools/dist_test.sh', ['CONFIG.py', 'CKPT.pth', '2'])])
def test_port_in_use_is_named_with_the_way_out(run_tool, busy_port, script, args):
    proc = run_tool(script, *args, env=dict(PORT=str(busy_port)), check=False, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f'error: port {busy_port} on 127.0.0.1 is in use (another distributed run, or another '
        f'program); pick a free one with PORT=, e.g. PORT={busy_port + 1} tools/dist_train.sh '
        'CONFIG NUM_PROCS')


def test_a_free_port_passes(repo_root):
    check_port = load_script('tools/misc/check_port.py')
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    assert check_port.main(['127.0.0.1', str(port)]) == 0
    assert check_port.main(['localhost', str(port)]) == 0
